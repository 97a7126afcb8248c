// A tiny Kimi-K3-shaped model: the structure of K3-SPEC.md at small sizes.
//
//   hidden 64, vocabulary 256, 8 layers = 2 x (3 KDA + 1 gated MLA)
//   KDA: 2 heads x 16, short convolution 4, lower-bounded gate (-5),
//        full-rank output gate
//   MLA: 2 heads, q_lora_rank 32, kv_lora_rank 16, qk 16 + 8, v 16, NoPE,
//        sigmoid output gate; latent cache of up to 128 tokens
//   MLP: layer 0 dense (intermediate 96); layers 1-7 latent MoE: 8 experts,
//        top-2, latent width 32, expert intermediate 16, 2 shared experts
//        (intermediate 32), SiTU-GLU (beta 4, linear beta 25)
//   Block AttnRes, block size 4: blocks close at layers 0 and 4
//
// Weights and decode state are named as in the checkpoint (K3-SPEC.md,
// model-side names; MoE tensors under `block_sparse_moe.` as in the upstream
// modeling code, docs/oracle.md); templates use names relative to their
// k3.layer prefix.
// This file is the embedded default model of k3-opt's main job.

module attributes {k3.model = "tiny-k3", k3.vocab_size = 256 : i64,
                   k3.hidden_size = 64 : i64, k3.max_context = 128 : i64} {

// Activations are f32 [T, 64] with T tokens packed over the batch.
// Inputs: token ids [T], sequence offsets [N + 1], and per sequence the
// number of tokens already in its decode state (the MLA latent cache).
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu_seqlens: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %context_lens: tensor<?xi32> {k3.name = "context_lens"})
    -> (tensor<?x256xf32> {k3.name = "logits"}, tensor<?xi32> {k3.name = "next_tokens"}) {
  %c0 = arith.constant 0 : index
  %T = tensor.dim %ids, %c0 : tensor<?xi32>
  %embed = k3.weight "model.embed_tokens.weight" : tensor<256x64xbf16>
  %p0 = k3.embedding %ids, %embed : (tensor<?xi32>, tensor<256x64xbf16>) -> tensor<?x64xf32>
  %none = tensor.empty(%T) : tensor<0x?x64xf32>
  %b0 = tensor.cast %none : tensor<0x?x64xf32> to tensor<?x?x64xf32>

  %p1, %b1 = k3.layer @kda_dense_layer_open("model.layers.0.")(%p0, %b0, %cu_seqlens, %context_lens)
      : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>)
  %p2, %b2 = k3.layer @kda_moe_layer("model.layers.1.")(%p1, %b1, %cu_seqlens, %context_lens)
      : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>)
  %p3, %b3 = k3.layer @kda_moe_layer("model.layers.2.")(%p2, %b2, %cu_seqlens, %context_lens)
      : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>)
  %p4, %b4 = k3.layer @mla_moe_layer("model.layers.3.")(%p3, %b3, %cu_seqlens, %context_lens)
      : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>)
  %p5, %b5 = k3.layer @kda_moe_layer_open("model.layers.4.")(%p4, %b4, %cu_seqlens, %context_lens)
      : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>)
  %p6, %b6 = k3.layer @kda_moe_layer("model.layers.5.")(%p5, %b5, %cu_seqlens, %context_lens)
      : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>)
  %p7, %b7 = k3.layer @kda_moe_layer("model.layers.6.")(%p6, %b6, %cu_seqlens, %context_lens)
      : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>)
  %p8, %b8 = k3.layer @mla_moe_layer("model.layers.7.")(%p7, %b7, %cu_seqlens, %context_lens)
      : (tensor<?x64xf32>, tensor<?x?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>)

  // Final depth mix over the 2 closed blocks and the open one, then the head.
  %onw = k3.weight "model.output_attn_res_norm.weight" : tensor<64xbf16>
  %opw = k3.weight "model.output_attn_res_proj.weight" : tensor<1x64xbf16>
  %h = k3.attn_res_mix %b8, %p8, %onw, %opw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %normw = k3.weight "model.norm.weight" : tensor<64xbf16>
  %hn = k3.rms_norm %h, %normw {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %head = k3.weight "lm_head.weight" : tensor<256x64xbf16>
  %logits = k3.linear %hn, %head : (tensor<?x64xf32>, tensor<256x64xbf16>) -> tensor<?x256xf32>
  %next = k3.argmax %logits : (tensor<?x256xf32>) -> tensor<?xi32>
  return %logits, %next : tensor<?x256xf32>, tensor<?xi32>
}

//===----------------------------------------------------------------------===//
// Decoder layers (K3-SPEC.md §7). P is the running sum of the open block, B
// the closed blocks. "_open" layers close the previous block first.
//===----------------------------------------------------------------------===//

func.func private @kda_dense_layer_open(%p: tensor<?x64xf32>, %b: tensor<?x?x64xf32>,
    %cu: tensor<?xi32>, %ctx: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>) {
  %san = k3.weight "self_attention_res_norm.weight" : tensor<64xbf16>
  %sap = k3.weight "self_attention_res_proj.weight" : tensor<1x64xbf16>
  %mrn = k3.weight "mlp_res_norm.weight" : tensor<64xbf16>
  %mrp = k3.weight "mlp_res_proj.weight" : tensor<1x64xbf16>
  %inl = k3.weight "input_layernorm.weight" : tensor<64xbf16>
  %pal = k3.weight "post_attention_layernorm.weight" : tensor<64xbf16>
  %x = k3.attn_res_mix %b, %p, %san, %sap {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %b1 = k3.attn_res_push %b, %p : (tensor<?x?x64xf32>, tensor<?x64xf32>) -> tensor<?x?x64xf32>
  %xn = k3.rms_norm %x, %inl {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %a = k3.layer @kda_mixer("self_attn.")(%xn, %cu) : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %y = k3.attn_res_mix %b1, %a, %mrn, %mrp {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %yn = k3.rms_norm %y, %pal {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %wg = k3.weight "mlp.gate_proj.weight" : tensor<96x64xbf16>
  %wu = k3.weight "mlp.up_proj.weight" : tensor<96x64xbf16>
  %wd = k3.weight "mlp.down_proj.weight" : tensor<64x96xbf16>
  %m = k3.glu_mlp situ %yn, %wg, %wu, %wd {beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  %p2 = k3.add %a, %m : tensor<?x64xf32>
  return %p2, %b1 : tensor<?x64xf32>, tensor<?x?x64xf32>
}

func.func private @kda_moe_layer(%p: tensor<?x64xf32>, %b: tensor<?x?x64xf32>,
    %cu: tensor<?xi32>, %ctx: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>) {
  %san = k3.weight "self_attention_res_norm.weight" : tensor<64xbf16>
  %sap = k3.weight "self_attention_res_proj.weight" : tensor<1x64xbf16>
  %mrn = k3.weight "mlp_res_norm.weight" : tensor<64xbf16>
  %mrp = k3.weight "mlp_res_proj.weight" : tensor<1x64xbf16>
  %inl = k3.weight "input_layernorm.weight" : tensor<64xbf16>
  %pal = k3.weight "post_attention_layernorm.weight" : tensor<64xbf16>
  %x = k3.attn_res_mix %b, %p, %san, %sap {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %xn = k3.rms_norm %x, %inl {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %a = k3.layer @kda_mixer("self_attn.")(%xn, %cu) : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %p1 = k3.add %p, %a : tensor<?x64xf32>
  %y = k3.attn_res_mix %b, %p1, %mrn, %mrp {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %yn = k3.rms_norm %y, %pal {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %m = k3.layer @latent_moe("block_sparse_moe.")(%yn) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %p2 = k3.add %p1, %m : tensor<?x64xf32>
  return %p2, %b : tensor<?x64xf32>, tensor<?x?x64xf32>
}

func.func private @kda_moe_layer_open(%p: tensor<?x64xf32>, %b: tensor<?x?x64xf32>,
    %cu: tensor<?xi32>, %ctx: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>) {
  %san = k3.weight "self_attention_res_norm.weight" : tensor<64xbf16>
  %sap = k3.weight "self_attention_res_proj.weight" : tensor<1x64xbf16>
  %mrn = k3.weight "mlp_res_norm.weight" : tensor<64xbf16>
  %mrp = k3.weight "mlp_res_proj.weight" : tensor<1x64xbf16>
  %inl = k3.weight "input_layernorm.weight" : tensor<64xbf16>
  %pal = k3.weight "post_attention_layernorm.weight" : tensor<64xbf16>
  %x = k3.attn_res_mix %b, %p, %san, %sap {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %b1 = k3.attn_res_push %b, %p : (tensor<?x?x64xf32>, tensor<?x64xf32>) -> tensor<?x?x64xf32>
  %xn = k3.rms_norm %x, %inl {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %a = k3.layer @kda_mixer("self_attn.")(%xn, %cu) : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  %y = k3.attn_res_mix %b1, %a, %mrn, %mrp {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %yn = k3.rms_norm %y, %pal {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %m = k3.layer @latent_moe("block_sparse_moe.")(%yn) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %p2 = k3.add %a, %m : tensor<?x64xf32>
  return %p2, %b1 : tensor<?x64xf32>, tensor<?x?x64xf32>
}

func.func private @mla_moe_layer(%p: tensor<?x64xf32>, %b: tensor<?x?x64xf32>,
    %cu: tensor<?xi32>, %ctx: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x?x64xf32>) {
  %san = k3.weight "self_attention_res_norm.weight" : tensor<64xbf16>
  %sap = k3.weight "self_attention_res_proj.weight" : tensor<1x64xbf16>
  %mrn = k3.weight "mlp_res_norm.weight" : tensor<64xbf16>
  %mrp = k3.weight "mlp_res_proj.weight" : tensor<1x64xbf16>
  %inl = k3.weight "input_layernorm.weight" : tensor<64xbf16>
  %pal = k3.weight "post_attention_layernorm.weight" : tensor<64xbf16>
  %x = k3.attn_res_mix %b, %p, %san, %sap {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %xn = k3.rms_norm %x, %inl {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %a = k3.layer @mla_mixer("self_attn.")(%xn, %cu, %ctx)
      : (tensor<?x64xf32>, tensor<?xi32>, tensor<?xi32>) -> tensor<?x64xf32>
  %p1 = k3.add %p, %a : tensor<?x64xf32>
  %y = k3.attn_res_mix %b, %p1, %mrn, %mrp {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %yn = k3.rms_norm %y, %pal {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %m = k3.layer @latent_moe("block_sparse_moe.")(%yn) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %p2 = k3.add %p1, %m : tensor<?x64xf32>
  return %p2, %b : tensor<?x64xf32>, tensor<?x?x64xf32>
}

//===----------------------------------------------------------------------===//
// Token mixers
//===----------------------------------------------------------------------===//

// KDA (K3-SPEC.md §2): 2 heads x 16.
func.func private @kda_mixer(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %T = tensor.dim %x, %c0 : tensor<?x64xf32>
  %wq = k3.weight "q_proj.weight" : tensor<32x64xbf16>
  %wk = k3.weight "k_proj.weight" : tensor<32x64xbf16>
  %wv = k3.weight "v_proj.weight" : tensor<32x64xbf16>
  %cq = k3.weight "q_conv1d.weight" : tensor<32x1x4xf32>
  %ck = k3.weight "k_conv1d.weight" : tensor<32x1x4xf32>
  %cv = k3.weight "v_conv1d.weight" : tensor<32x1x4xf32>
  %wfa = k3.weight "f_a_proj.weight" : tensor<16x64xbf16>
  %wfb = k3.weight "f_b_proj.weight" : tensor<32x16xbf16>
  %alog = k3.weight "A_log" : tensor<16xf32>
  %dtb = k3.weight "dt_bias" : tensor<32xf32>
  %wb = k3.weight "b_proj.weight" : tensor<2x64xbf16>
  %wg = k3.weight "g_proj.weight" : tensor<32x64xbf16>
  %onw = k3.weight "o_norm.weight" : tensor<16xf32>
  %wo = k3.weight "o_proj.weight" : tensor<64x32xbf16>

  // Projections, then causal short convolutions + SiLU with decode state.
  %q0 = k3.linear %x, %wq : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  %k0 = k3.linear %x, %wk : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  %v0 = k3.linear %x, %wv : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  %sq = k3.state.read "q_conv_state" : tensor<?x32x3xf32>
  %sk = k3.state.read "k_conv_state" : tensor<?x32x3xf32>
  %sv = k3.state.read "v_conv_state" : tensor<?x32x3xf32>
  %q1, %sq1 = k3.short_conv %q0, %cq state(%sq) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x32xf32>, tensor<32x1x4xf32>, tensor<?x32x3xf32>, tensor<?xi32>) -> (tensor<?x32xf32>, tensor<?x32x3xf32>)
  %k1, %sk1 = k3.short_conv %k0, %ck state(%sk) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x32xf32>, tensor<32x1x4xf32>, tensor<?x32x3xf32>, tensor<?xi32>) -> (tensor<?x32xf32>, tensor<?x32x3xf32>)
  %v1, %sv1 = k3.short_conv %v0, %cv state(%sv) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x32xf32>, tensor<32x1x4xf32>, tensor<?x32x3xf32>, tensor<?xi32>) -> (tensor<?x32xf32>, tensor<?x32x3xf32>)
  k3.state.write "q_conv_state", %sq1 : tensor<?x32x3xf32>
  k3.state.write "k_conv_state", %sk1 : tensor<?x32x3xf32>
  k3.state.write "v_conv_state", %sv1 : tensor<?x32x3xf32>

  // Lower-bounded per-channel decay from the low-rank gate projection.
  %fa = k3.linear %x, %wfa : (tensor<?x64xf32>, tensor<16x64xbf16>) -> tensor<?x16xf32>
  %f = k3.linear %fa, %wfb : (tensor<?x16xf32>, tensor<32x16xbf16>) -> tensor<?x32xf32>
  %z = tensor.expand_shape %f [[0], [1, 2]] output_shape [%T, 2, 16] : tensor<?x32xf32> into tensor<?x2x16xf32>
  %g = k3.kda_gate lower_bounded_sigmoid %z, %alog, %dtb {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<16xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  %beta = k3.linear %x, %wb : (tensor<?x64xf32>, tensor<2x64xbf16>) -> tensor<?x2xf32>

  // The gated delta rule over [1, T, H, D] with packed sequences.
  %q = tensor.expand_shape %q1 [[0, 1], [2, 3]] output_shape [1, %T, 2, 16] : tensor<?x32xf32> into tensor<1x?x2x16xf32>
  %k = tensor.expand_shape %k1 [[0, 1], [2, 3]] output_shape [1, %T, 2, 16] : tensor<?x32xf32> into tensor<1x?x2x16xf32>
  %v = tensor.expand_shape %v1 [[0, 1], [2, 3]] output_shape [1, %T, 2, 16] : tensor<?x32xf32> into tensor<1x?x2x16xf32>
  %g4 = tensor.expand_shape %g [[0, 1], [2], [3]] output_shape [1, %T, 2, 16] : tensor<?x2x16xf32> into tensor<1x?x2x16xf32>
  %b4 = tensor.expand_shape %beta [[0, 1], [2]] output_shape [1, %T, 2] : tensor<?x2xf32> into tensor<1x?x2xf32>
  %s0 = k3.state.read "recurrent_state" : tensor<?x2x16x16xf32>
  %o, %s1 = k3.kda %q, %k, %v, %g4, %b4 initial_state(%s0) cu_seqlens(%cu)
      {scale = 0.25 : f64, use_qk_l2norm, use_beta_sigmoid}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?x2x16x16xf32>, tensor<?xi32>) -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
  k3.state.write "recurrent_state", %s1 : tensor<?x2x16x16xf32>

  // Output: per-head RMSNorm times sigmoid of the full-rank gate, then o_proj.
  %o3 = tensor.collapse_shape %o [[0, 1], [2], [3]] : tensor<1x?x2x16xf32> into tensor<?x2x16xf32>
  %zg = k3.linear %x, %wg : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  %zg3 = tensor.expand_shape %zg [[0], [1, 2]] output_shape [%T, 2, 16] : tensor<?x32xf32> into tensor<?x2x16xf32>
  %on = k3.gated_rms_norm %o3, %zg3, %onw {epsilon = 1.0e-5 : f64}
      : (tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<16xf32>) -> tensor<?x2x16xf32>
  %o2 = tensor.collapse_shape %on [[0], [1, 2]] : tensor<?x2x16xf32> into tensor<?x32xf32>
  %y = k3.linear %o2, %wo : (tensor<?x32xf32>, tensor<64x32xbf16>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// Gated MLA (K3-SPEC.md §3): NoPE, latent cache, sigmoid output gate.
func.func private @mla_mixer(%x: tensor<?x64xf32>, %cu: tensor<?xi32>, %ctx: tensor<?xi32>)
    -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %T = tensor.dim %x, %c0 : tensor<?x64xf32>
  %wqa = k3.weight "q_a_proj.weight" : tensor<32x64xbf16>
  %qan = k3.weight "q_a_layernorm.weight" : tensor<32xbf16>
  %wqb = k3.weight "q_b_proj.weight" : tensor<48x32xbf16>
  %wkva = k3.weight "kv_a_proj_with_mqa.weight" : tensor<24x64xbf16>
  %kvan = k3.weight "kv_a_layernorm.weight" : tensor<16xbf16>
  %wkvb = k3.weight "kv_b_proj.weight" : tensor<64x16xbf16>
  %wg = k3.weight "g_proj.weight" : tensor<32x64xbf16>
  %wo = k3.weight "o_proj.weight" : tensor<64x32xbf16>

  %cq = k3.linear %x, %wqa : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  %cqn = k3.rms_norm %cq, %qan {epsilon = 1.0e-6 : f64} : (tensor<?x32xf32>, tensor<32xbf16>) -> tensor<?x32xf32>
  %q2 = k3.linear %cqn, %wqb : (tensor<?x32xf32>, tensor<48x32xbf16>) -> tensor<?x48xf32>
  %q = tensor.expand_shape %q2 [[0], [1, 2]] output_shape [%T, 2, 24] : tensor<?x48xf32> into tensor<?x2x24xf32>

  // Latent = [RMSNorm(c_kv) | k_pe]; k_pe is neither normalised nor rotated.
  %ckv = k3.linear %x, %wkva : (tensor<?x64xf32>, tensor<24x64xbf16>) -> tensor<?x24xf32>
  %c = tensor.extract_slice %ckv[0, 0] [%T, 16] [1, 1] : tensor<?x24xf32> to tensor<?x16xf32>
  %kpe = tensor.extract_slice %ckv[0, 16] [%T, 8] [1, 1] : tensor<?x24xf32> to tensor<?x8xf32>
  %cn = k3.rms_norm %c, %kvan {epsilon = 1.0e-6 : f64} : (tensor<?x16xf32>, tensor<16xbf16>) -> tensor<?x16xf32>
  %latent = tensor.concat dim(1) %cn, %kpe : (tensor<?x16xf32>, tensor<?x8xf32>) -> tensor<?x24xf32>

  %cache = k3.state.read "latent_cache" : tensor<?x128x24xf32>
  %o, %cache1 = k3.latent_attention %q, %latent, %wkvb cache(%cache, %ctx) cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.20412414523193154 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?xi32>, tensor<?xi32>)
      -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
  k3.state.write "latent_cache", %cache1 : tensor<?x128x24xf32>

  %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x2x16xf32> into tensor<?x32xf32>
  %zg = k3.linear %x, %wg : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  %og = k3.sigmoid_gate %o2, %zg : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
  %y = k3.linear %og, %wo : (tensor<?x32xf32>, tensor<64x32xbf16>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

//===----------------------------------------------------------------------===//
// Latent MoE (K3-SPEC.md §5)
//===----------------------------------------------------------------------===//

func.func private @latent_moe(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %wr = k3.weight "gate.weight" : tensor<8x64xbf16>
  %bias = k3.weight "gate.e_score_correction_bias" : tensor<8xf32>
  %idx, %w = k3.moe_router sigmoid %x, %wr bias(%bias)
      {top_k = 2 : i64, renormalize, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)

  // Routed experts work in the 32-wide latent.
  %wdown = k3.weight "routed_expert_down_proj.weight" : tensor<32x64xbf16>
  %rnorm = k3.weight "routed_expert_norm.weight" : tensor<32xbf16>
  %wup = k3.weight "routed_expert_up_proj.weight" : tensor<64x32xbf16>
  %w1 = k3.weight "experts.{expert}.w1.weight" : tensor<8x16x32xbf16>
  %w3 = k3.weight "experts.{expert}.w3.weight" : tensor<8x16x32xbf16>
  %w2 = k3.weight "experts.{expert}.w2.weight" : tensor<8x32x16xbf16>
  %l = k3.linear %x, %wdown : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  %r = k3.moe_experts situ %l, %idx, %w, %w1, %w3, %w2 {beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>,
         tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  %rn = k3.rms_norm %r, %rnorm {epsilon = 1.0e-5 : f64} : (tensor<?x32xf32>, tensor<32xbf16>) -> tensor<?x32xf32>
  %up = k3.linear %rn, %wup : (tensor<?x32xf32>, tensor<64x32xbf16>) -> tensor<?x64xf32>

  // Two shared experts at full width, as one MLP of twice the width.
  %sg = k3.weight "shared_experts.gate_proj.weight" : tensor<32x64xbf16>
  %su = k3.weight "shared_experts.up_proj.weight" : tensor<32x64xbf16>
  %sd = k3.weight "shared_experts.down_proj.weight" : tensor<64x32xbf16>
  %s = k3.glu_mlp situ %x, %sg, %su, %sd {beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x64xf32>, tensor<32x64xbf16>, tensor<32x64xbf16>, tensor<64x32xbf16>) -> tensor<?x64xf32>
  %y = k3.add %up, %s : tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

}
