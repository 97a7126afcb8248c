"""Whole-model oracle: prefill/decode consistency, varlen, routing, names, config, I/O."""
import json

import numpy as np
import pytest

from k3ref import model, ops
from k3ref_testutil import rel_err

CFGS = {"k3": model.tiny_k3_config, "kimi_linear": model.tiny_kimi_linear_config}


@pytest.fixture(scope="module", params=list(CFGS))
def cw(request):
    cfg = CFGS[request.param]()
    return cfg, model.random_weights(cfg, seed=11)


def test_tiny_configs_have_the_intended_structure():
    c = model.tiny_k3_config()
    assert [c.is_kda(i) for i in range(8)] == [True, True, True, False] * 2
    assert [c.is_moe(i) for i in range(8)] == [False] + [True] * 7
    W = model.random_weights(c, 0)
    assert "model.layers.3.self_attn.q_a_proj.weight" in W
    assert "model.layers.3.self_attn.g_proj.weight" in W
    assert "model.layers.0.self_attn.g_proj.weight" in W          # full-rank KDA gate
    assert "model.layers.1.block_sparse_moe.routed_expert_norm.weight" in W
    assert "model.layers.5.self_attention_res_proj.weight" in W
    assert W["model.layers.0.self_attn.A_log"].shape == (16,)      # padded past H = 2
    k = model.tiny_kimi_linear_config()
    Wk = model.random_weights(k, 0)
    assert "model.layers.3.self_attn.q_proj.weight" in Wk
    assert "model.layers.0.self_attn.g_a_proj.weight" in Wk
    assert "model.layers.1.block_sparse_moe.experts.5.w2.weight" in Wk
    assert not any("attn_res" in n for n in Wk)


def test_prefill_then_decode_equals_long_prefill(cw):
    cfg, W = cw
    rng = np.random.default_rng(0)
    T, N = 9, 4
    ids = rng.integers(0, cfg.vocab_size, T + N)
    full = model.forward(cfg, W, ids)
    logits, st = model.forward(cfg, W, ids[:T], return_state=True)
    assert rel_err(logits, full[:T]) < 1e-10
    for j in range(N):
        step, st = model.forward(cfg, W, ids[T + j:T + j + 1], state=st, return_state=True)
        assert rel_err(step[0], full[T + j]) < 1e-9
    # a second chunk of several tokens (chunked prefill) continues as well
    l2, _ = model.forward(cfg, W, ids[T:], state=model.forward(cfg, W, ids[:T], return_state=True)[1],
                          return_state=True)
    assert rel_err(l2, full[T:]) < 1e-9


def test_decode_state_shapes(cw):
    cfg, W = cw
    _, st = model.forward(cfg, W, [1, 2, 3, 4, 5], cu_seqlens=[0, 2, 5], return_state=True)
    P = cfg.kda_num_heads * cfg.kda_head_dim
    for i in range(cfg.num_hidden_layers):
        if cfg.is_kda(i):
            assert st[i]["conv_q"].shape == (2, P, cfg.short_conv_kernel_size - 1)
            assert st[i]["recurrent"].shape == (2, cfg.kda_num_heads, cfg.kda_head_dim, cfg.kda_head_dim)
        else:
            assert [c.shape for c in st[i]["latent"]] == [
                (2, cfg.kv_lora_rank + cfg.qk_rope_head_dim), (3, cfg.kv_lora_rank + cfg.qk_rope_head_dim)]


def test_varlen_batch_equals_separate_and_batched_decode(cw):
    cfg, W = cw
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, cfg.vocab_size, 6), rng.integers(0, cfg.vocab_size, 3)
    la, sa = model.forward(cfg, W, a, return_state=True)
    lb, sb = model.forward(cfg, W, b, return_state=True)
    lp, sp = model.forward(cfg, W, np.concatenate([a, b]), cu_seqlens=[0, 6, 9], return_state=True)
    assert rel_err(lp[:6], la) < 1e-12 and rel_err(lp[6:], lb) < 1e-12
    nxt = np.array([ops.argmax_sample(la[-1]), ops.argmax_sample(lb[-1])])
    ld, _ = model.forward(cfg, W, nxt, cu_seqlens=[0, 1, 2], state=sp, return_state=True)
    da = model.forward(cfg, W, nxt[:1], state=sa)
    db = model.forward(cfg, W, nxt[1:], state=sb)
    assert rel_err(ld[0], da[0]) < 1e-12 and rel_err(ld[1], db[0]) < 1e-12


@pytest.mark.parametrize("core", ["chunk", "segment"])
def test_model_kda_cores_agree(cw, core):
    cfg, W = cw
    ids = np.arange(20) % cfg.vocab_size
    assert rel_err(model.forward(cfg, W, ids, kda_core=core), model.forward(cfg, W, ids)) < 1e-10


def test_last_token_logits(cw):
    """logits="last" (k3-compile's default) is the last row of each sequence
    of logits="all"; an empty sequence gives zeros."""
    cfg, W = cw
    cu = np.array([0, 5, 6, 13], np.int32)
    ids = np.random.default_rng(4).integers(0, cfg.vocab_size, 13)
    full = model.forward(cfg, W, ids, cu_seqlens=cu)
    last = model.forward(cfg, W, ids, cu_seqlens=cu, logits="last")
    assert last.shape == (3, cfg.vocab_size)
    assert rel_err(last, full[cu[1:] - 1]) <= 1e-12
    assert np.array_equal(ops.last_tokens(np.arange(6.0).reshape(3, 2), [0, 2, 2, 3]),
                          [[2.0, 3.0], [0.0, 0.0], [4.0, 5.0]])
    with pytest.raises(ValueError, match="logits must be"):
        model.forward(cfg, W, ids, cu_seqlens=cu, logits="first")


def test_greedy_generate_matches_full_forward_argmax():
    cfg = model.tiny_k3_config()
    W = model.random_weights(cfg, 3)
    prompt = [5, 17, 2, 40]
    out = model.greedy_generate(cfg, W, prompt, 4)
    seq = list(prompt) + out
    full = model.forward(cfg, W, seq)
    assert out == [int(ops.argmax_sample(full[len(prompt) - 1 + j])) for j in range(4)]


def test_forced_routing(cw):
    cfg, W = cw
    ids = np.arange(7) % cfg.vocab_size
    dumps = {}
    base = model.forward(cfg, W, ids, dumps=dumps)
    forced = {i: dumps[f"layers.{i}.router_indices"] for i in range(cfg.num_hidden_layers) if cfg.is_moe(i)}
    assert rel_err(model.forward(cfg, W, ids, forced_routing=forced), base) < 1e-15
    li = min(forced)
    alt = dict(forced)
    alt[li] = (forced[li] + 1) % cfg.num_experts
    assert rel_err(model.forward(cfg, W, ids, forced_routing=alt), base) > 1e-6


def test_mlp_prefix_alias_and_language_model_prefix(cw):
    cfg, W = cw
    ids = [3, 1, 4, 1, 5]
    base = model.forward(cfg, W, ids)
    W2 = {n.replace(".block_sparse_moe.", ".mlp."): v for n, v in W.items()}
    assert rel_err(model.forward(cfg, W2, ids), base) == 0.0
    W3 = {"language_model." + n: v for n, v in W.items()}
    assert rel_err(model.forward(cfg, W3, ids), base) == 0.0


def test_plain_residual_vs_attn_res_differ_and_dumps():
    cfg = model.tiny_k3_config()
    W = model.random_weights(cfg, 4)
    d = {}
    model.forward(cfg, W, [1, 2, 3], dumps=d)
    assert d["embed"].shape == (3, 64) and "layers.0.kda.g" in d
    assert d["layers.0.kda.g"].min() > -5.0 - 1e-12 and d["layers.0.kda.g"].max() < 0
    # layer 0 runs on x = P = embedding (no blocks yet)
    assert rel_err(d["layers.0.attn_in"], ops.rms_norm(d["embed"], W["model.layers.0.input_layernorm.weight"], 1e-5)) < 1e-15


def test_tie_word_embeddings():
    cfg = model.tiny_kimi_linear_config(tie_word_embeddings=True)
    W = model.random_weights(cfg, 5)
    assert "lm_head.weight" not in W
    d = {}
    lg = model.forward(cfg, W, [1, 2], dumps=d)
    assert rel_err(lg, d["final_hidden"] @ W["model.embed_tokens.weight"].T) < 1e-15


K3_TEXT = {
    "hidden_size": 7168, "num_hidden_layers": 93, "vocab_size": 163840, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False, "hidden_act": "situ", "activation_situ_beta": 4.0,
    "activation_situ_linear_beta": 25.0, "attn_res_block_size": 12, "intermediate_size": 33792,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "num_experts": 896, "num_experts_per_token": 16,
    "num_shared_experts": 2, "moe_intermediate_size": 3072, "routed_expert_hidden_size": 3584,
    "latent_moe_use_norm": True, "routed_scaling_factor": 1.0, "moe_router_activation_func": "sigmoid",
    "moe_renormalize": True, "num_attention_heads": 96, "num_key_value_heads": 96, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "mla_use_nope": True, "mla_use_output_gate": True, "model_type": "kimi_linear",
    "linear_attn_config": {
        "kda_layers": [i for i in range(1, 93) if i % 4 != 0],
        "full_attn_layers": [i for i in range(4, 93, 4)] + [93],
        "num_heads": 96, "head_dim": 128, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
        "use_full_rank_gate": True},
}


def test_from_hf_k3():
    assert len(K3_TEXT["linear_attn_config"]["kda_layers"]) == 69
    assert len(K3_TEXT["linear_attn_config"]["full_attn_layers"]) == 24
    c = model.Config.from_hf({"model_type": "kimi_k3", "text_config": K3_TEXT})
    mla = [i for i in range(93) if not c.is_kda(i)]
    assert mla == list(range(3, 92, 4)) + [92]
    assert c.gate_lower_bound == -5.0 and c.use_full_rank_gate and c.kda_num_heads == 96
    assert c.attn_res_block_size == 12 and c.routed_expert_hidden_size == 3584
    assert [c.is_moe(i) for i in (0, 1, 92)] == [False, True, True]
    S = model.weight_shapes(c)
    assert S["model.layers.0.self_attn.q_conv1d.weight"] == (12288, 1, 4)
    assert S["model.layers.3.self_attn.kv_b_proj.weight"] == (24576, 512)
    assert S["model.layers.3.self_attn.q_b_proj.weight"] == (18432, 1536)
    assert S["model.layers.1.block_sparse_moe.experts.0.w1.weight"] == (3072, 3584)
    assert S["model.layers.1.block_sparse_moe.shared_experts.gate_proj.weight"] == (6144, 7168)
    assert S["model.layers.0.self_attn.A_log"] == (128,)


def test_from_hf_kimi_linear():
    d = {"model_type": "kimi_linear", "hidden_size": 2304, "num_hidden_layers": 27,
         "hidden_act": "silu", "num_experts": 256, "num_experts_per_token": 8,
         "num_shared_experts": 1, "moe_intermediate_size": 1024, "routed_scaling_factor": 2.446,
         "first_k_dense_replace": 1, "q_lora_rank": None, "kv_lora_rank": 512,
         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "mla_use_nope": True,
         "linear_attn_config": {"kda_layers": [1, 2, 3, 5], "full_attn_layers": [4],
                                "num_heads": 32, "head_dim": 128, "short_conv_kernel_size": 4}}
    c = model.Config.from_hf(json.loads(json.dumps(d)))
    assert c.gate_lower_bound is None and not c.use_full_rank_gate
    assert c.attn_res_block_size is None and c.routed_expert_hidden_size is None
    assert c.q_lora_rank is None and c.kda_num_heads == 32 and c.is_kda(0) and not c.is_kda(3)


def test_safetensors_roundtrip(tmp_path):
    import ml_dtypes
    import safetensors.numpy as stn
    rng = np.random.default_rng(6)
    t = {"a.weight": rng.standard_normal((3, 4)), "b": rng.standard_normal(5)}
    p = tmp_path / "x.safetensors"
    model.save_safetensors(p, t)
    back = model.load_safetensors(p)
    assert all(np.array_equal(back[k], t[k]) for k in t)
    model.save_safetensors(p, t, dtype="bf16")
    back = model.load_safetensors(p)
    for k in t:
        assert np.array_equal(back[k], t[k].astype(ml_dtypes.bfloat16).astype(np.float64))
        assert not np.array_equal(back[k], t[k])
    # interoperates with the safetensors library (F32)
    model.save_safetensors(p, t, dtype="f32")
    lib = stn.load_file(str(p))
    assert all(np.array_equal(lib[k], t[k].astype(np.float32)) for k in t)
    p2 = tmp_path / "y.safetensors"
    stn.save_file({"language_model.z": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(p2))
    assert model.load_safetensors(p2)["z"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_attn_res_blocks_in_model():
    cfg = model.tiny_k3_config()          # 8 layers, block size 4: B = [emb, layers 0-3 sum]
    W = model.random_weights(cfg, 8)
    d = {}
    model.forward(cfg, W, [4, 9, 1], dumps=d)
    B = d["attn_res_blocks"]
    assert len(B) == 2 and rel_err(B[0], d["embed"]) == 0
    s = sum(d[f"layers.{i}.attn_out"] + d[f"layers.{i}.mlp_out"] for i in range(4))
    assert rel_err(B[1], s) < 1e-13


def test_attn_res_dataflow_follows_spec_section7():
    """Re-derive every layer's normalised inputs from the dumped sublayer outputs (K3-SPEC §7)."""
    cfg = model.tiny_k3_config()
    W = model.random_weights(cfg, 9)
    d = {}
    logits = model.forward(cfg, W, [7, 3, 3, 8, 1], dumps=d)
    nrm = lambda v, n: ops.rms_norm(v, W[n], 1e-5)
    B, P = [], d["embed"]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        x = P if not B else ops.attn_res_mix(B, P, W[p + "self_attention_res_norm.weight"],
                                             W[p + "self_attention_res_proj.weight"])
        assert rel_err(d[f"layers.{i}.attn_in"], nrm(x, p + "input_layernorm.weight")) < 1e-13
        if i % cfg.attn_res_block_size == 0:
            B, P = B + [P], 0.0
        P = P + d[f"layers.{i}.attn_out"]
        y = ops.attn_res_mix(B, P, W[p + "mlp_res_norm.weight"], W[p + "mlp_res_proj.weight"])
        assert rel_err(d[f"layers.{i}.mlp_in"], nrm(y, p + "post_attention_layernorm.weight")) < 1e-13
        P = P + d[f"layers.{i}.mlp_out"]
    h = ops.attn_res_mix(B, P, W["model.output_attn_res_norm.weight"], W["model.output_attn_res_proj.weight"])
    ref = nrm(h, "model.norm.weight") @ W["lm_head.weight"].T
    assert rel_err(logits, ref) < 1e-13


def test_plain_residual_dataflow_kimi_linear():
    cfg = model.tiny_kimi_linear_config()
    W = model.random_weights(cfg, 10)
    d = {}
    logits = model.forward(cfg, W, [2, 7, 1], dumps=d)
    h = d["embed"]
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        assert rel_err(d[f"layers.{i}.attn_in"], ops.rms_norm(h, W[p + "input_layernorm.weight"], 1e-5)) < 1e-13
        h = h + d[f"layers.{i}.attn_out"]
        assert rel_err(d[f"layers.{i}.mlp_in"], ops.rms_norm(h, W[p + "post_attention_layernorm.weight"], 1e-5)) < 1e-13
        h = h + d[f"layers.{i}.mlp_out"]
    ref = ops.rms_norm(h, W["model.norm.weight"], 1e-5) @ W["lm_head.weight"].T
    assert rel_err(logits, ref) < 1e-13
