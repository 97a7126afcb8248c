"""Configurations of the model descriptions under examples/, for the oracle.

Each must describe exactly the IR of its file: the end-to-end tests run the
compiled example and this configuration on the same weights.
"""
from .model import Config


def tiny_k3_example_config() -> Config:
    """examples/tiny_k3.mlir."""
    return Config(hidden_size=64, num_hidden_layers=8, vocab_size=256, rms_norm_eps=1e-5,
                  hidden_act="situ", activation_situ_beta=4.0, activation_situ_linear_beta=25.0,
                  attn_res_block_size=4, intermediate_size=96, first_k_dense_replace=1,
                  num_experts=8, num_experts_per_token=2, num_shared_experts=2,
                  moe_intermediate_size=16, routed_expert_hidden_size=32,
                  latent_moe_use_norm=True, routed_scaling_factor=1.0,
                  moe_router_activation_func="sigmoid", moe_renormalize=True,
                  num_attention_heads=2, q_lora_rank=32, kv_lora_rank=16,
                  qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                  mla_use_output_gate=True, kda_layers=[1, 2, 3, 5, 6, 7],
                  full_attn_layers=[4, 8], kda_num_heads=2, kda_head_dim=16,
                  short_conv_kernel_size=4, gate_lower_bound=-5.0,
                  use_full_rank_gate=True, tie_word_embeddings=False)
