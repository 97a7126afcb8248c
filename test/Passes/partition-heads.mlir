// RUN: k3-opt %s -split-input-file -verify-diagnostics --k3-partition=tp=2 | FileCheck %s

// A KDA layer keeps half of its heads on each rank: the projections into
// the heads by rows, the short convolutions and their states by channels,
// the decay gate's A_log (its first H entries: K3 pads it) and dt_bias, the
// recurrent state by heads, the output gate; o_norm (per channel of a head)
// stays whole; o_proj is split by columns and an all-reduce sums it.

// CHECK-LABEL: func.func @kda
// CHECK-DAG:     %[[WQ:.*]] = k3.weight "q_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<8x32xf32>
// CHECK-DAG:     %[[CQ:.*]] = k3.weight "q_conv1d.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<8x1x4xf32>
// CHECK-DAG:     k3.weight "A_log" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0, extent = 8>} : tensor<1xf32>
// CHECK-DAG:     k3.weight "dt_bias" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<8xf32>
// CHECK-DAG:     k3.weight "b_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<1x32xf32>
// CHECK-DAG:     k3.weight "o_norm.weight" : tensor<8xf32>
// CHECK-DAG:     %[[WO:.*]] = k3.weight "o_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 1>} : tensor<32x8xf32>
// CHECK:         k3.state.read "q_conv_state" : tensor<?x8x3xf32>
// CHECK:         k3.short_conv {{.*}} -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
// CHECK:         tensor.expand_shape {{.*}} output_shape [%{{.*}}, 1, 8] : tensor<?x8xf32> into tensor<?x1x8xf32>
// CHECK:         k3.kda_gate lower_bounded_sigmoid {{.*}} : (tensor<?x1x8xf32>, tensor<1xf32>, tensor<8xf32>) -> tensor<?x1x8xf32>
// CHECK:         k3.state.read "recurrent_state" : tensor<?x1x8x8xf32>
// CHECK:         k3.kda {{.*}} -> (tensor<1x?x1x8xf32>, tensor<?x1x8x8xf32>)
// CHECK:         k3.gated_rms_norm {{.*}} -> tensor<?x1x8xf32>
// CHECK:         %[[P:.*]] = k3.linear %{{.*}}, %[[WO]] : (tensor<?x8xf32>, tensor<32x8xf32>) -> tensor<?x32xf32>
// CHECK-NEXT:    %[[S:.*]] = k3.all_reduce sum %[[P]] {group = "tp", group_size = 2 : i64}
// CHECK-NEXT:    return %[[S]]
func.func @kda(%x: tensor<?x32xf32>, %cu: tensor<?xi32>) -> tensor<?x32xf32> {
  %c0 = arith.constant 0 : index
  %T = tensor.dim %x, %c0 : tensor<?x32xf32>
  %wq = k3.weight "q_proj.weight" : tensor<16x32xf32>
  %wk = k3.weight "k_proj.weight" : tensor<16x32xf32>
  %wv = k3.weight "v_proj.weight" : tensor<16x32xf32>
  %cq = k3.weight "q_conv1d.weight" : tensor<16x1x4xf32>
  %wf = k3.weight "f_proj.weight" : tensor<16x32xf32>
  %alog = k3.weight "A_log" : tensor<8xf32>
  %dtb = k3.weight "dt_bias" : tensor<16xf32>
  %wb = k3.weight "b_proj.weight" : tensor<2x32xf32>
  %wg = k3.weight "g_proj.weight" : tensor<16x32xf32>
  %onw = k3.weight "o_norm.weight" : tensor<8xf32>
  %wo = k3.weight "o_proj.weight" : tensor<32x16xf32>
  %q0 = k3.linear %x, %wq : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  %sq = k3.state.read "q_conv_state" : tensor<?x16x3xf32>
  %q1, %sq1 = k3.short_conv %q0, %cq state(%sq) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x16xf32>, tensor<16x1x4xf32>, tensor<?x16x3xf32>, tensor<?xi32>) -> (tensor<?x16xf32>, tensor<?x16x3xf32>)
  k3.state.write "q_conv_state", %sq1 : tensor<?x16x3xf32>
  %k1 = k3.linear %x, %wk : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  %v1 = k3.linear %x, %wv : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  %f = k3.linear %x, %wf : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  %z = tensor.expand_shape %f [[0], [1, 2]] output_shape [%T, 2, 8] : tensor<?x16xf32> into tensor<?x2x8xf32>
  %g = k3.kda_gate lower_bounded_sigmoid %z, %alog, %dtb {lower_bound = -5.0 : f64}
      : (tensor<?x2x8xf32>, tensor<8xf32>, tensor<16xf32>) -> tensor<?x2x8xf32>
  %beta = k3.linear %x, %wb : (tensor<?x32xf32>, tensor<2x32xf32>) -> tensor<?x2xf32>
  %q = tensor.expand_shape %q1 [[0, 1], [2, 3]] output_shape [1, %T, 2, 8] : tensor<?x16xf32> into tensor<1x?x2x8xf32>
  %k = tensor.expand_shape %k1 [[0, 1], [2, 3]] output_shape [1, %T, 2, 8] : tensor<?x16xf32> into tensor<1x?x2x8xf32>
  %v = tensor.expand_shape %v1 [[0, 1], [2, 3]] output_shape [1, %T, 2, 8] : tensor<?x16xf32> into tensor<1x?x2x8xf32>
  %g4 = tensor.expand_shape %g [[0, 1], [2], [3]] output_shape [1, %T, 2, 8] : tensor<?x2x8xf32> into tensor<1x?x2x8xf32>
  %b4 = tensor.expand_shape %beta [[0, 1], [2]] output_shape [1, %T, 2] : tensor<?x2xf32> into tensor<1x?x2xf32>
  %s0 = k3.state.read "recurrent_state" : tensor<?x2x8x8xf32>
  %o, %s1 = k3.kda %q, %k, %v, %g4, %b4 initial_state(%s0) cu_seqlens(%cu)
      {scale = 0.35 : f64, use_qk_l2norm, use_beta_sigmoid}
      : (tensor<1x?x2x8xf32>, tensor<1x?x2x8xf32>, tensor<1x?x2x8xf32>, tensor<1x?x2x8xf32>,
         tensor<1x?x2xf32>, tensor<?x2x8x8xf32>, tensor<?xi32>) -> (tensor<1x?x2x8xf32>, tensor<?x2x8x8xf32>)
  k3.state.write "recurrent_state", %s1 : tensor<?x2x8x8xf32>
  %o3 = tensor.collapse_shape %o [[0, 1], [2], [3]] : tensor<1x?x2x8xf32> into tensor<?x2x8xf32>
  %zg = k3.linear %x, %wg : (tensor<?x32xf32>, tensor<16x32xf32>) -> tensor<?x16xf32>
  %zg3 = tensor.expand_shape %zg [[0], [1, 2]] output_shape [%T, 2, 8] : tensor<?x16xf32> into tensor<?x2x8xf32>
  %on = k3.gated_rms_norm %o3, %zg3, %onw {epsilon = 1.0e-5 : f64}
      : (tensor<?x2x8xf32>, tensor<?x2x8xf32>, tensor<8xf32>) -> tensor<?x2x8xf32>
  %o2 = tensor.collapse_shape %on [[0], [1, 2]] : tensor<?x2x8xf32> into tensor<?x16xf32>
  %y = k3.linear %o2, %wo : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// An MLA layer: the queries and kv_b's rows by heads, the latent and its
// cache whole on every rank, the gated output by columns, then a sum.

// CHECK-LABEL: func.func @mla
// CHECK-DAG:     k3.weight "q_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<24x32xf32>
// CHECK-DAG:     k3.weight "kv_a.weight" : tensor<20x32xf32>
// CHECK-DAG:     k3.weight "kv_b_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<32x16xf32>
// CHECK-DAG:     k3.weight "g_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<16x32xf32>
// CHECK:         k3.latent_attention {{.*}}num_heads = 2 : i64
// CHECK-SAME:      -> (tensor<?x2x8xf32>, tensor<?x64x20xf32>)
// CHECK:         k3.sigmoid_gate {{.*}} -> tensor<?x16xf32>
// CHECK:         k3.linear {{.*}} : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
// CHECK-NEXT:    k3.all_reduce sum
func.func @mla(%x: tensor<?x32xf32>, %cu: tensor<?xi32>, %ctx: tensor<?xi32>) -> tensor<?x32xf32> {
  %c0 = arith.constant 0 : index
  %T = tensor.dim %x, %c0 : tensor<?x32xf32>
  %wq = k3.weight "q_proj.weight" : tensor<48x32xf32>
  %wkva = k3.weight "kv_a.weight" : tensor<20x32xf32>
  %wkvb = k3.weight "kv_b_proj.weight" : tensor<64x16xf32>
  %wg = k3.weight "g_proj.weight" : tensor<32x32xf32>
  %wo = k3.weight "o_proj.weight" : tensor<32x32xf32>
  %q2 = k3.linear %x, %wq : (tensor<?x32xf32>, tensor<48x32xf32>) -> tensor<?x48xf32>
  %q = tensor.expand_shape %q2 [[0], [1, 2]] output_shape [%T, 4, 12] : tensor<?x48xf32> into tensor<?x4x12xf32>
  %latent = k3.linear %x, %wkva : (tensor<?x32xf32>, tensor<20x32xf32>) -> tensor<?x20xf32>
  %cache = k3.state.read "latent_cache" : tensor<?x64x20xf32>
  %o, %cache1 = k3.latent_attention %q, %latent, %wkvb cache(%cache, %ctx) cu_seqlens(%cu)
      {num_heads = 4 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64,
       v_head_dim = 8 : i64, kv_lora_rank = 16 : i64, scale = 0.29 : f64}
      : (tensor<?x4x12xf32>, tensor<?x20xf32>, tensor<64x16xf32>, tensor<?x64x20xf32>, tensor<?xi32>, tensor<?xi32>)
      -> (tensor<?x4x8xf32>, tensor<?x64x20xf32>)
  k3.state.write "latent_cache", %cache1 : tensor<?x64x20xf32>
  %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x4x8xf32> into tensor<?x32xf32>
  %zg = k3.linear %x, %wg : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
  %og = k3.sigmoid_gate %o2, %zg : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
  %y = k3.linear %og, %wo : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// A per-head value that reaches an op no rule covers.

func.func @uncovered(%x: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %kv = k3.weight "kv_b_proj.weight" : tensor<64x16xf32>
  %c0 = arith.constant 0 : index
  %T = tensor.dim %x, %c0 : tensor<?x32xf32>
  %wq = k3.weight "q_proj.weight" : tensor<48x32xf32>
  %nw = k3.weight "n.weight" : tensor<48xf32>
  %wkva = k3.weight "kv_a.weight" : tensor<20x32xf32>
  %wo = k3.weight "o_proj.weight" : tensor<32x32xf32>
  %q0 = k3.linear %x, %wq : (tensor<?x32xf32>, tensor<48x32xf32>) -> tensor<?x48xf32>
  // expected-error @below {{k3-partition: cannot split by attention heads}}
  %q1 = k3.rms_norm %q0, %nw {epsilon = 1.0e-6 : f64} : (tensor<?x48xf32>, tensor<48xf32>) -> tensor<?x48xf32>
  %q = tensor.expand_shape %q1 [[0], [1, 2]] output_shape [%T, 4, 12] : tensor<?x48xf32> into tensor<?x4x12xf32>
  %latent = k3.linear %x, %wkva : (tensor<?x32xf32>, tensor<20x32xf32>) -> tensor<?x20xf32>
  %o = k3.latent_attention %q, %latent, %kv
      {num_heads = 4 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 4 : i64,
       v_head_dim = 8 : i64, kv_lora_rank = 16 : i64, scale = 0.29 : f64}
      : (tensor<?x4x12xf32>, tensor<?x20xf32>, tensor<64x16xf32>) -> tensor<?x4x8xf32>
  %o2 = tensor.collapse_shape %o [[0], [1, 2]] : tensor<?x4x8xf32> into tensor<?x32xf32>
  %y = k3.linear %o2, %wo : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
