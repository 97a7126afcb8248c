// RUN: k3-opt %s -split-input-file --k3-kda-mma-split | FileCheck %s

// A bf16 k3.kda with the in-op lower-bounded gate (K = 128, V = 64) becomes
// the token-parallel operand op (5K/2 + 16 = 336 words per token) and the
// tensor-core chain, which takes over the results.

// CHECK-LABEL: func.func @covered
// CHECK-SAME:    (%[[Q:[^:]*]]: tensor<1x?x2x128xbf16>, %[[V:[^:]*]]: tensor<1x?x2x64xbf16>, %[[G:[^:]*]]: tensor<1x?x2x128xbf16>, %[[B:[^:]*]]: tensor<1x?x2xbf16>, %[[S0:[^:]*]]: tensor<?x2x128x64xf32>, %[[CU:[^:]*]]: tensor<?xi32>, %[[A:[^:]*]]: tensor<2xf32>, %[[DT:[^:]*]]: tensor<256xf32>)
// CHECK-NOT:     k3.kda %
// CHECK:         %[[P:.*]] = k3.kda_mma_operands %[[Q]], %[[Q]], %[[G]], %[[B]] cu_seqlens(%[[CU]]) gate_params(%[[A]], %[[DT]])
// CHECK-SAME:      {lower_bound = -5.000000e+00 : f64, scale = 0.088388347648318447 : f64, use_beta_sigmoid, use_qk_l2norm}
// CHECK-SAME:      -> tensor<1x?x2x336xi32>
// CHECK:         %[[O:.*]], %[[S:.*]] = k3.kda_mma_recurrence %[[P]], %[[V]] initial_state(%[[S0]]) cu_seqlens(%[[CU]])
// CHECK-SAME:      -> (tensor<1x?x2x64xbf16>, tensor<?x2x128x64xf32>)
// CHECK:         return %[[O]], %[[S]]
func.func @covered(%q: tensor<1x?x2x128xbf16>, %v: tensor<1x?x2x64xbf16>, %g: tensor<1x?x2x128xbf16>,
    %beta: tensor<1x?x2xbf16>, %s0: tensor<?x2x128x64xf32>, %cu: tensor<?xi32>,
    %alog: tensor<2xf32>, %dtb: tensor<256xf32>) -> (tensor<1x?x2x64xbf16>, tensor<?x2x128x64xf32>) {
  %o, %s = k3.kda %q, %q, %v, %g, %beta initial_state(%s0) cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.08838834764831845 : f64, use_qk_l2norm, use_beta_sigmoid,
       gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x64xbf16>, tensor<1x?x2x128xbf16>,
         tensor<1x?x2xbf16>, tensor<?x2x128x64xf32>, tensor<?xi32>, tensor<2xf32>, tensor<256xf32>)
      -> (tensor<1x?x2x64xbf16>, tensor<?x2x128x64xf32>)
  return %o, %s : tensor<1x?x2x64xbf16>, tensor<?x2x128x64xf32>
}

// -----

// Not covered, left to the recurrent kernel: two sequences as a batch of 2
// without cu_seqlens (the operand kernel walks one token axis).

// CHECK-LABEL: func.func @batch_without_cu_seqlens
// CHECK-NOT:     k3.kda_mma
// CHECK:         k3.kda %
func.func @batch_without_cu_seqlens(%q: tensor<2x?x2x128xbf16>, %beta: tensor<2x?x2xbf16>,
    %alog: tensor<2xf32>, %dtb: tensor<256xf32>) -> tensor<2x?x2x128xbf16> {
  %o, %s = k3.kda %q, %q, %q, %q, %beta gate_params(%alog, %dtb)
      {scale = 0.08838834764831845 : f64, gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<2x?x2x128xbf16>, tensor<2x?x2x128xbf16>, tensor<2x?x2x128xbf16>, tensor<2x?x2x128xbf16>,
         tensor<2x?x2xbf16>, tensor<2xf32>, tensor<256xf32>)
      -> (tensor<2x?x2x128xbf16>, tensor<2x2x128x128xf32>)
  return %o : tensor<2x?x2x128xbf16>
}

// -----

// Not covered: f32 operands (the f32 model keeps f32 accuracy), a key
// dimension that is not a multiple of 64.

// CHECK-LABEL: func.func @f32_operands
// CHECK-NOT:     k3.kda_mma
func.func @f32_operands(%q: tensor<1x?x2x128xf32>, %beta: tensor<1x?x2xf32>, %cu: tensor<?xi32>,
    %alog: tensor<2xf32>, %dtb: tensor<256xf32>) -> tensor<1x?x2x128xf32> {
  %o, %s = k3.kda %q, %q, %q, %q, %beta cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.08838834764831845 : f64, gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x128xf32>, tensor<1x?x2x128xf32>, tensor<1x?x2x128xf32>, tensor<1x?x2x128xf32>,
         tensor<1x?x2xf32>, tensor<?xi32>, tensor<2xf32>, tensor<256xf32>)
      -> (tensor<1x?x2x128xf32>, tensor<?x2x128x128xf32>)
  return %o : tensor<1x?x2x128xf32>
}

// CHECK-LABEL: func.func @key_dim_96
// CHECK-NOT:     k3.kda_mma
func.func @key_dim_96(%q: tensor<1x?x2x96xbf16>, %beta: tensor<1x?x2xbf16>, %cu: tensor<?xi32>,
    %alog: tensor<2xf32>, %dtb: tensor<192xf32>) -> tensor<1x?x2x96xbf16> {
  %o, %s = k3.kda %q, %q, %q, %q, %beta cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.1 : f64, gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x96xbf16>, tensor<1x?x2x96xbf16>, tensor<1x?x2x96xbf16>, tensor<1x?x2x96xbf16>,
         tensor<1x?x2xbf16>, tensor<?xi32>, tensor<2xf32>, tensor<192xf32>)
      -> (tensor<1x?x2x96xbf16>, tensor<?x2x96x96xf32>)
  return %o : tensor<1x?x2x96xbf16>
}

// -----

// Kimi Linear's unbounded softplus gate is covered too (the operand kernel
// forms its in-chunk products exactly); the op carries the gate kind and
// no lower bound.

// CHECK-LABEL: func.func @softplus_gate
// CHECK-NOT:     k3.kda %
// CHECK:         k3.kda_mma_operands
// CHECK-SAME:      {gate_kind = #k3<decay_gate neg_softplus>, scale = 0.088388347648318447 : f64}
// CHECK:         k3.kda_mma_recurrence
func.func @softplus_gate(%q: tensor<1x?x2x128xbf16>, %beta: tensor<1x?x2xbf16>, %cu: tensor<?xi32>,
    %alog: tensor<2xf32>, %dtb: tensor<256xf32>) -> tensor<1x?x2x128xbf16> {
  %o, %s = k3.kda %q, %q, %q, %q, %beta cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.08838834764831845 : f64, gate_kind = #k3<decay_gate neg_softplus>}
      : (tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>,
         tensor<1x?x2xbf16>, tensor<?xi32>, tensor<2xf32>, tensor<256xf32>)
      -> (tensor<1x?x2x128xbf16>, tensor<?x2x128x128xf32>)
  return %o : tensor<1x?x2x128xbf16>
}

