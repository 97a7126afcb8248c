// RUN: k3-opt %s | k3-opt | FileCheck %s
// RUN: k3-opt %s --mlir-print-op-generic | k3-opt | FileCheck %s
// RUN: k3-opt %s --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC

// Round trip of every op of the k3 dialect, with each combination of its
// optional operands and attributes. The second RUN line goes through the
// generic form, so the custom printer and parser must agree with the
// properties (operandSegmentSizes, optional attributes) the generic form
// spells out.

// CHECK-LABEL: func.func @resources
// CHECK-SAME:    (%[[V:.*]]: tensor<?x4x3xf32>)
// CHECK:         %[[W:.*]] = k3.weight "model.layers.0.self_attn.q_proj.weight" : tensor<8x4xbf16>
// CHECK:         %[[E:.*]] = k3.weight "model.layers.1.mlp.experts.{expert}.w1.weight" : tensor<2x3x4xf16>
// CHECK:         %[[S:.*]] = k3.state.read "conv_state" : tensor<?x4x3xf32>
// CHECK:         k3.state.write "conv_state", %[[V]] : tensor<?x4x3xf32>
// CHECK:         return %[[W]], %[[E]], %[[S]]
func.func @resources(%v: tensor<?x4x3xf32>)
    -> (tensor<8x4xbf16>, tensor<2x3x4xf16>, tensor<?x4x3xf32>) {
  %w = k3.weight "model.layers.0.self_attn.q_proj.weight" : tensor<8x4xbf16>
  %e = k3.weight "model.layers.1.mlp.experts.{expert}.w1.weight" : tensor<2x3x4xf16>
  %s = k3.state.read "conv_state" : tensor<?x4x3xf32>
  k3.state.write "conv_state", %v : tensor<?x4x3xf32>
  return %w, %e, %s : tensor<8x4xbf16>, tensor<2x3x4xf16>, tensor<?x4x3xf32>
}

// GENERIC-LABEL: sym_name = "resources"
// GENERIC:         "k3.weight"() <{name = "model.layers.0.self_attn.q_proj.weight"}> : () -> tensor<8x4xbf16>
// GENERIC:         "k3.state.read"() <{name = "conv_state"}> : () -> tensor<?x4x3xf32>
// GENERIC:         "k3.state.write"(%{{.*}}) <{name = "conv_state"}> : (tensor<?x4x3xf32>) -> ()

// CHECK-LABEL: func.func @dense
// CHECK:         %[[EMB:.*]] = k3.embedding %arg0, %arg1 : (tensor<?xi32>, tensor<256x64xbf16>) -> tensor<?x64xf32>
// CHECK:         %[[N:.*]] = k3.rms_norm %[[EMB]], %arg2 {epsilon = 1.000000e-05 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
// CHECK:         %[[L:.*]] = k3.linear %[[N]], %arg3 : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
// CHECK:         %[[L3:.*]] = k3.linear %arg4, %arg3 : (tensor<2x?x64xf16>, tensor<32x64xbf16>) -> tensor<2x?x32xf32>
// CHECK:         %[[A:.*]] = k3.add %[[L]], %[[L]] : tensor<?x32xf32>
// CHECK:         %[[G:.*]] = k3.sigmoid_gate %[[A]], %[[L]] : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
// CHECK:         %[[GN:.*]] = k3.gated_rms_norm %arg5, %arg5, %arg6 {epsilon = 9.9999999999999995E-7 : f64} : (tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<16xf32>) -> tensor<?x2x16xf32>
// CHECK:         %[[AM:.*]] = k3.argmax %arg7 : (tensor<?x256xf32>) -> tensor<?xi32>
// CHECK:         return %[[G]], %[[L3]], %[[GN]], %[[AM]]
func.func @dense(%ids: tensor<?xi32>, %table: tensor<256x64xbf16>,
                 %nw: tensor<64xbf16>, %w: tensor<32x64xbf16>,
                 %x3: tensor<2x?x64xf16>, %o: tensor<?x2x16xf32>,
                 %onw: tensor<16xf32>, %logits: tensor<?x256xf32>)
    -> (tensor<?x32xf32>, tensor<2x?x32xf32>, tensor<?x2x16xf32>, tensor<?xi32>) {
  %e = k3.embedding %ids, %table : (tensor<?xi32>, tensor<256x64xbf16>) -> tensor<?x64xf32>
  %n = k3.rms_norm %e, %nw {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xbf16>) -> tensor<?x64xf32>
  %l = k3.linear %n, %w : (tensor<?x64xf32>, tensor<32x64xbf16>) -> tensor<?x32xf32>
  %l3 = k3.linear %x3, %w : (tensor<2x?x64xf16>, tensor<32x64xbf16>) -> tensor<2x?x32xf32>
  %a = k3.add %l, %l : tensor<?x32xf32>
  %g = k3.sigmoid_gate %a, %l : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
  %gn = k3.gated_rms_norm %o, %o, %onw {epsilon = 1.0e-6 : f64}
      : (tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<16xf32>) -> tensor<?x2x16xf32>
  %am = k3.argmax %logits : (tensor<?x256xf32>) -> tensor<?xi32>
  return %g, %l3, %gn, %am : tensor<?x32xf32>, tensor<2x?x32xf32>, tensor<?x2x16xf32>, tensor<?xi32>
}

// CHECK-LABEL: func.func @short_conv
// CHECK:         k3.short_conv %arg0, %arg1 {kernel_size = 4 : i64} : (tensor<?x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
// CHECK:         k3.short_conv %arg0, %arg1 state(%arg2) {kernel_size = 4 : i64} : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<2x8x3xf32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
// CHECK:         k3.short_conv %arg0, %arg1 cu_seqlens(%arg3) {kernel_size = 4 : i64} : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<3xi32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
// CHECK:         k3.short_conv %arg0, %arg1 state(%arg2) cu_seqlens(%arg3) {kernel_size = 4 : i64} : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<2x8x3xf32>, tensor<3xi32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
// CHECK:         k3.short_conv %arg4, %arg5 {kernel_size = 1 : i64} : (tensor<?x8xbf16>, tensor<8x1x1xbf16>) -> (tensor<?x8xbf16>, tensor<?x8x0xbf16>)
// GENERIC-LABEL: sym_name = "short_conv"
// GENERIC:         "k3.short_conv"(%{{.*}}, %{{.*}}) <{kernel_size = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 0>}>
// GENERIC:         "k3.short_conv"(%{{.*}}, %{{.*}}, %{{.*}}) <{kernel_size = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 0>}>
// GENERIC:         "k3.short_conv"(%{{.*}}, %{{.*}}, %{{.*}}) <{kernel_size = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1>}>
// GENERIC:         "k3.short_conv"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{kernel_size = 4 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1>}>
func.func @short_conv(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>,
                      %s: tensor<2x8x3xf32>, %cu: tensor<3xi32>,
                      %xb: tensor<?x8xbf16>, %w1: tensor<8x1x1xbf16>) {
  %a, %as = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
  %b, %bs = k3.short_conv %x, %w state(%s) {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<2x8x3xf32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
  %c, %cs = k3.short_conv %x, %w cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<3xi32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
  %d, %ds = k3.short_conv %x, %w state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<2x8x3xf32>, tensor<3xi32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
  // A pointwise "convolution" keeps an empty history.
  %e, %es = k3.short_conv %xb, %w1 {kernel_size = 1 : i64}
      : (tensor<?x8xbf16>, tensor<8x1x1xbf16>) -> (tensor<?x8xbf16>, tensor<?x8x0xbf16>)
  return
}

// CHECK-LABEL: func.func @kda_gate
// CHECK:         k3.kda_gate lower_bounded_sigmoid %arg0, %arg1, %arg2 {lower_bound = -5.000000e+00 : f64} : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
// CHECK:         k3.kda_gate neg_softplus %arg3, %arg1, %arg2 : (tensor<?x2x16xbf16>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
// GENERIC-LABEL: sym_name = "kda_gate"
// GENERIC:         "k3.kda_gate"(%{{.*}}, %{{.*}}, %{{.*}}) <{kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.000000e+00 : f64}>
// GENERIC:         "k3.kda_gate"(%{{.*}}, %{{.*}}, %{{.*}}) <{kind = #k3<decay_gate neg_softplus>}>
func.func @kda_gate(%z: tensor<?x2x16xf32>, %alog: tensor<128xf32>,
                    %dtb: tensor<32xf32>, %zb: tensor<?x2x16xbf16>) {
  %g0 = k3.kda_gate lower_bounded_sigmoid %z, %alog, %dtb {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  %g1 = k3.kda_gate neg_softplus %zb, %alog, %dtb
      : (tensor<?x2x16xbf16>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  return
}

// CHECK-LABEL: func.func @kda
// CHECK:         k3.kda %arg0, %arg0, %arg1, %arg2, %arg3 {scale = 2.500000e-01 : f64} : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>) -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
// CHECK:         k3.kda %arg0, %arg0, %arg1, %arg2, %arg3 initial_state(%arg4) {scale = 2.500000e-01 : f64, use_beta_sigmoid, use_qk_l2norm} : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2x2x16x8xf32>) -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
// CHECK:         k3.kda %arg5, %arg5, %arg6, %arg7, %arg8 cu_seqlens(%arg9) {scale = 2.500000e-01 : f64, use_qk_l2norm} : (tensor<1x?x2x16xbf16>, tensor<1x?x2x16xbf16>, tensor<1x?x2x8xbf16>, tensor<1x?x2x16xf32>, tensor<1x?x2xbf16>, tensor<?xi32>) -> (tensor<1x?x2x8xbf16>, tensor<?x2x16x8xf32>)
// CHECK:         k3.kda %arg5, %arg5, %arg6, %arg10, %arg8 gate_params(%arg11, %arg12) {gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.000000e+00 : f64, scale = 2.500000e-01 : f64} : (tensor<1x?x2x16xbf16>, tensor<1x?x2x16xbf16>, tensor<1x?x2x8xbf16>, tensor<1x?x2x16xbf16>, tensor<1x?x2xbf16>, tensor<128xf32>, tensor<32xf32>) -> (tensor<1x?x2x8xbf16>, tensor<1x2x16x8xf32>)
// CHECK:         k3.kda %arg5, %arg5, %arg6, %arg10, %arg8 initial_state(%arg13) cu_seqlens(%arg9) gate_params(%arg11, %arg12) {gate_kind = #k3<decay_gate neg_softplus>, scale = 2.500000e-01 : f64, use_beta_sigmoid, use_qk_l2norm} : (tensor<1x?x2x16xbf16>, tensor<1x?x2x16xbf16>, tensor<1x?x2x8xbf16>, tensor<1x?x2x16xbf16>, tensor<1x?x2xbf16>, tensor<?x2x16x8xf32>, tensor<?xi32>, tensor<128xf32>, tensor<32xf32>) -> (tensor<1x?x2x8xbf16>, tensor<?x2x16x8xf32>)
// GENERIC-LABEL: sym_name = "kda"
// GENERIC:         "k3.kda"({{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0, 0>, scale = 2.500000e-01 : f64}>
// GENERIC:         "k3.kda"({{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0, 0>, scale = 2.500000e-01 : f64, use_beta_sigmoid, use_qk_l2norm}>
// GENERIC:         "k3.kda"({{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1, 0, 0>, scale = 2.500000e-01 : f64, use_qk_l2norm}>
// GENERIC:         "k3.kda"({{.*}}) <{gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.000000e+00 : f64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 1, 1>, scale = 2.500000e-01 : f64}>
// GENERIC:         "k3.kda"({{.*}}) <{gate_kind = #k3<decay_gate neg_softplus>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 1, 1>, scale = 2.500000e-01 : f64, use_beta_sigmoid, use_qk_l2norm}>
func.func @kda(%q: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>,
               %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>,
               %s0: tensor<2x2x16x8xf32>,
               %qb: tensor<1x?x2x16xbf16>, %vb: tensor<1x?x2x8xbf16>,
               %gf: tensor<1x?x2x16xf32>, %bb: tensor<1x?x2xbf16>,
               %cu: tensor<?xi32>, %z: tensor<1x?x2x16xbf16>,
               %alog: tensor<128xf32>, %dtb: tensor<32xf32>,
               %sn: tensor<?x2x16x8xf32>) {
  // Batched, no state, no gate.
  %o0, %f0 = k3.kda %q, %q, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>,
         tensor<2x?x2xf32>) -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  // Initial state and both unit attributes.
  %o1, %f1 = k3.kda %q, %q, %v, %g, %beta initial_state(%s0)
      {scale = 0.25 : f64, use_qk_l2norm, use_beta_sigmoid}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>,
         tensor<2x?x2xf32>, tensor<2x2x16x8xf32>) -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  // Packed variable-length batch.
  %o2, %f2 = k3.kda %qb, %qb, %vb, %gf, %bb cu_seqlens(%cu) {scale = 0.25 : f64, use_qk_l2norm}
      : (tensor<1x?x2x16xbf16>, tensor<1x?x2x16xbf16>, tensor<1x?x2x8xbf16>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xbf16>, tensor<?xi32>) -> (tensor<1x?x2x8xbf16>, tensor<?x2x16x8xf32>)
  // In-op gate (raw bf16 gate projection).
  %o3, %f3 = k3.kda %qb, %qb, %vb, %z, %bb gate_params(%alog, %dtb)
      {scale = 0.25 : f64, gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x16xbf16>, tensor<1x?x2x16xbf16>, tensor<1x?x2x8xbf16>, tensor<1x?x2x16xbf16>,
         tensor<1x?x2xbf16>, tensor<128xf32>, tensor<32xf32>) -> (tensor<1x?x2x8xbf16>, tensor<1x2x16x8xf32>)
  // Everything at once.
  %o4, %f4 = k3.kda %qb, %qb, %vb, %z, %bb initial_state(%sn) cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.25 : f64, gate_kind = #k3<decay_gate neg_softplus>, use_qk_l2norm, use_beta_sigmoid}
      : (tensor<1x?x2x16xbf16>, tensor<1x?x2x16xbf16>, tensor<1x?x2x8xbf16>, tensor<1x?x2x16xbf16>,
         tensor<1x?x2xbf16>, tensor<?x2x16x8xf32>, tensor<?xi32>, tensor<128xf32>, tensor<32xf32>)
      -> (tensor<1x?x2x8xbf16>, tensor<?x2x16x8xf32>)
  return
}

// CHECK-LABEL: func.func @attention
// CHECK:         k3.causal_attention %arg0, %arg0, %arg1 {scale = 1.250000e-01 : f64} : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>) -> tensor<?x2x16xf32>
// CHECK:         k3.causal_attention %arg0, %arg0, %arg1 cu_seqlens(%arg7) {scale = 1.250000e-01 : f64} : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>, tensor<?xi32>) -> tensor<?x2x16xf32>
// CHECK:         %{{.*}} = k3.latent_attention %arg2, %arg3, %arg4 {kv_lora_rank = 16 : i64, num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, scale = 2.000000e-01 : f64, v_head_dim = 16 : i64} : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
// CHECK:         %{{.*}} = k3.latent_attention %arg2, %arg3, %arg4 cu_seqlens(%arg7) {kv_lora_rank = 16 : i64, num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, scale = 2.000000e-01 : f64, v_head_dim = 16 : i64} : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?xi32>) -> tensor<?x2x16xf32>
// CHECK:         %{{.*}}, %{{.*}} = k3.latent_attention %arg2, %arg3, %arg4 cache(%arg5, %arg6) {kv_lora_rank = 16 : i64, num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, scale = 2.000000e-01 : f64, v_head_dim = 16 : i64} : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?xi32>) -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
// CHECK:         %{{.*}}, %{{.*}} = k3.latent_attention %arg2, %arg3, %arg4 cache(%arg5, %arg6) cu_seqlens(%arg7) {kv_lora_rank = 16 : i64, num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64, scale = 2.000000e-01 : f64, v_head_dim = 16 : i64} : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?xi32>, tensor<?xi32>) -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
// CHECK:         k3.latent_attention %arg8, %arg9, %arg10 {kv_lora_rank = 4 : i64, num_heads = 1 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 0 : i64, scale = 3.500000e-01 : f64, v_head_dim = 8 : i64} : (tensor<3x1x8xbf16>, tensor<3x4xbf16>, tensor<16x4xbf16>) -> tensor<3x1x8xbf16>
// GENERIC-LABEL: sym_name = "attention"
// GENERIC:         "k3.causal_attention"(%{{.*}}, %{{.*}}, %{{.*}}) <{scale
// GENERIC:         "k3.causal_attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) <{scale
// GENERIC:         "k3.latent_attention"({{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 0>
// GENERIC:         "k3.latent_attention"({{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 1>
// GENERIC:         "k3.latent_attention"({{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0>
// GENERIC:         "k3.latent_attention"({{.*}}operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>
func.func @attention(%q: tensor<?x2x24xf32>, %v: tensor<?x2x16xf32>,
                     %mq: tensor<?x2x24xf32>, %lat: tensor<?x24xf32>,
                     %kvb: tensor<64x16xbf16>, %cache: tensor<?x128x24xf32>,
                     %lens: tensor<?xi32>, %cu: tensor<?xi32>,
                     %nq: tensor<3x1x8xbf16>, %nlat: tensor<3x4xbf16>,
                     %nkvb: tensor<16x4xbf16>) {
  %a0 = k3.causal_attention %q, %q, %v {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>) -> tensor<?x2x16xf32>
  %a1 = k3.causal_attention %q, %q, %v cu_seqlens(%cu) {scale = 0.125 : f64}
      : (tensor<?x2x24xf32>, tensor<?x2x24xf32>, tensor<?x2x16xf32>, tensor<?xi32>) -> tensor<?x2x16xf32>
  %m0 = k3.latent_attention %mq, %lat, %kvb
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>) -> tensor<?x2x16xf32>
  %m1 = k3.latent_attention %mq, %lat, %kvb cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?xi32>) -> tensor<?x2x16xf32>
  %m2, %c2 = k3.latent_attention %mq, %lat, %kvb cache(%cache, %lens)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?xi32>)
      -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
  %m3, %c3 = k3.latent_attention %mq, %lat, %kvb cache(%cache, %lens) cu_seqlens(%cu)
      {num_heads = 2 : i64, qk_nope_head_dim = 16 : i64, qk_rope_head_dim = 8 : i64,
       v_head_dim = 16 : i64, kv_lora_rank = 16 : i64, scale = 0.2 : f64}
      : (tensor<?x2x24xf32>, tensor<?x24xf32>, tensor<64x16xbf16>, tensor<?x128x24xf32>, tensor<?xi32>, tensor<?xi32>)
      -> (tensor<?x2x16xf32>, tensor<?x128x24xf32>)
  // Static shapes and no rotary part (qk_rope_head_dim = 0 is allowed).
  %m4 = k3.latent_attention %nq, %nlat, %nkvb
      {num_heads = 1 : i64, qk_nope_head_dim = 8 : i64, qk_rope_head_dim = 0 : i64,
       v_head_dim = 8 : i64, kv_lora_rank = 4 : i64, scale = 0.35 : f64}
      : (tensor<3x1x8xbf16>, tensor<3x4xbf16>, tensor<16x4xbf16>) -> tensor<3x1x8xbf16>
  return
}

// CHECK-LABEL: func.func @mlp_and_moe
// CHECK:         k3.glu_mlp silu %arg0, %arg1, %arg1, %arg2 : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
// CHECK:         k3.glu_mlp situ %arg0, %arg1, %arg1, %arg2 {beta = 4.000000e+00 : f64} : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
// CHECK:         k3.glu_mlp situ %arg0, %arg1, %arg1, %arg2 {beta = 4.000000e+00 : f64, linear_beta = 2.500000e+01 : f64} : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
// CHECK:         k3.moe_router sigmoid %arg0, %arg3 {routed_scaling_factor = 1.000000e+00 : f64, top_k = 2 : i64} : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
// CHECK:         %[[IDX:.*]], %[[WTS:.*]] = k3.moe_router sigmoid %arg0, %arg3 bias(%arg4) {renormalize, routed_scaling_factor = 2.500000e+00 : f64, top_k = 2 : i64} : (tensor<?x64xf32>, tensor<8x64xbf16>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
// CHECK:         k3.moe_router softmax %arg0, %arg3 {renormalize, routed_scaling_factor = 1.000000e+00 : f64, top_k = 8 : i64} : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x8xi32>, tensor<?x8xf32>)
// CHECK:         k3.moe_experts silu %arg5, %[[IDX]], %[[WTS]], %arg6, %arg6, %arg7 : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
// CHECK:         k3.moe_experts situ %arg5, %[[IDX]], %[[WTS]], %arg6, %arg6, %arg7 {beta = 4.000000e+00 : f64, linear_beta = 2.500000e+01 : f64} : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
// GENERIC-LABEL: sym_name = "mlp_and_moe"
// GENERIC:         "k3.glu_mlp"({{.*}}) <{activation = #k3<glu_activation silu>}>
// GENERIC:         "k3.glu_mlp"({{.*}}) <{activation = #k3<glu_activation situ>, beta = 4.000000e+00 : f64}>
// GENERIC:         "k3.moe_router"(%{{.*}}, %{{.*}}) <{n_group = 1 : i64, routed_scaling_factor = 1.000000e+00 : f64, score = #k3<router_score sigmoid>, top_k = 2 : i64, topk_group = 1 : i64}>
// GENERIC:         "k3.moe_router"(%{{.*}}, %{{.*}}, %{{.*}}) <{n_group = 1 : i64, renormalize, routed_scaling_factor = 2.500000e+00 : f64, score = #k3<router_score sigmoid>, top_k = 2 : i64, topk_group = 1 : i64}>
func.func @mlp_and_moe(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>,
                       %wd: tensor<64x96xbf16>, %wr: tensor<8x64xbf16>,
                       %bias: tensor<8xf32>, %l: tensor<?x32xf32>,
                       %w1: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  %m0 = k3.glu_mlp silu %x, %wg, %wg, %wd
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  %m1 = k3.glu_mlp situ %x, %wg, %wg, %wd {beta = 4.0 : f64}
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  %m2 = k3.glu_mlp situ %x, %wg, %wg, %wd {beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  %i0, %w0 = k3.moe_router sigmoid %x, %wr {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %i1, %wt1 = k3.moe_router sigmoid %x, %wr bias(%bias)
      {top_k = 2 : i64, renormalize, routed_scaling_factor = 2.5 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %i2, %wt2 = k3.moe_router softmax %x, %wr {top_k = 8 : i64, renormalize, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x8xi32>, tensor<?x8xf32>)
  %r0 = k3.moe_experts silu %l, %i1, %wt1, %w1, %w1, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>,
         tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  %r1 = k3.moe_experts situ %l, %i1, %wt1, %w1, %w1, %w2 {beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>,
         tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// CHECK-LABEL: func.func @attn_res
// CHECK:         %[[MIX:.*]] = k3.attn_res_mix %arg0, %arg1, %arg2, %arg3 {epsilon = 1.000000e-05 : f64} : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
// CHECK:         %[[PUSH:.*]] = k3.attn_res_push %arg0, %[[MIX]] : (tensor<?x?x64xf32>, tensor<?x64xf32>) -> tensor<?x?x64xf32>
// CHECK:         k3.attn_res_push %arg4, %arg5 : (tensor<2x3x64xf32>, tensor<3x64xf32>) -> tensor<3x3x64xf32>
// CHECK:         k3.attn_res_mix %arg6, %arg5, %arg2, %arg3 {epsilon = 9.9999999999999995E-7 : f64} : (tensor<0x3x64xf32>, tensor<3x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<3x64xf32>
func.func @attn_res(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>,
                    %nw: tensor<64xbf16>, %pw: tensor<1x64xbf16>,
                    %sb: tensor<2x3x64xf32>, %sp: tensor<3x64xf32>,
                    %empty: tensor<0x3x64xf32>) -> tensor<?x?x64xf32> {
  %m = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  %b1 = k3.attn_res_push %b, %m : (tensor<?x?x64xf32>, tensor<?x64xf32>) -> tensor<?x?x64xf32>
  %b2 = k3.attn_res_push %sb, %sp : (tensor<2x3x64xf32>, tensor<3x64xf32>) -> tensor<3x3x64xf32>
  // No closed block yet: NB = 0.
  %m0 = k3.attn_res_mix %empty, %sp, %nw, %pw {epsilon = 1.0e-6 : f64}
      : (tensor<0x3x64xf32>, tensor<3x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<3x64xf32>
  return %b1 : tensor<?x?x64xf32>
}

// CHECK-LABEL: func.func private @template_two
// CHECK-LABEL: func.func private @template_none
// CHECK-LABEL: func.func private @template_nested
// CHECK:         %[[N:.*]]:2 = k3.layer @template_two("inner.") (%arg0) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK:         return %[[N]]#1
// CHECK-LABEL: func.func @layers
// CHECK:         %[[R:.*]]:2 = k3.layer @template_two("model.layers.0.") (%arg0) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK:         k3.layer @template_none("model.layers.1.") () : () -> (){{$}}
// CHECK:         %[[S:.*]] = k3.layer @template_nested("") (%[[R]]#0) {k3.note = "empty prefix"} : (tensor<4xf32>) -> tensor<4xf32>
// CHECK:         return %[[S]]
// GENERIC-LABEL: sym_name = "layers"
// GENERIC:         "k3.layer"(%{{.*}}) <{callee = @template_two, prefix = "model.layers.0."}> : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// GENERIC:         "k3.layer"() <{callee = @template_none, prefix = "model.layers.1."}> : () -> ()
// GENERIC:         "k3.layer"(%{{.*}}) <{callee = @template_nested, prefix = ""}> {k3.note = "empty prefix"}
func.func private @template_two(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %w = k3.weight "norm.weight" : tensor<4xf32>
  return %x, %w : tensor<4xf32>, tensor<4xf32>
}
func.func private @template_none() {
  return
}
func.func private @template_nested(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a:2 = k3.layer @template_two("inner.") (%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return %a#1 : tensor<4xf32>
}
func.func @layers(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r:2 = k3.layer @template_two("model.layers.0.") (%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  k3.layer @template_none("model.layers.1.") () : () -> ()
  %s = k3.layer @template_nested("") (%r#0) {k3.note = "empty prefix"} : (tensor<4xf32>) -> tensor<4xf32>
  return %s : tensor<4xf32>
}
