// RUN: k3-opt %s -split-input-file --k3-fuse-kda-gate | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-fuse-kda-gate --k3-fuse-kda-gate | FileCheck %s

// k3.kda_gate feeding k3.kda (through the tensor.expand_shape that adds the
// batch dimension) is folded into the in-op gate: k3.kda takes the raw gate
// projection with gate_params(A_log, dt_bias), gate_kind and lower_bound,
// and the dead f32 log-decay disappears. The second RUN line checks that the
// rewrite is idempotent.

// CHECK-LABEL: func.func @fold_lower_bounded_sigmoid
// CHECK-SAME:    (%[[Q:[^:]*]]: tensor<1x?x2x16xf32>, %[[Z:[^:]*]]: tensor<?x2x16xf32>, %[[A:[^:]*]]: tensor<2xf32>, %[[DT:[^:]*]]: tensor<32xf32>, %[[B:[^:]*]]: tensor<1x?x2xf32>, %[[CU:[^:]*]]: tensor<?xi32>, %[[T:[^:]*]]: index)
// CHECK-NOT:     k3.kda_gate
// CHECK:         %[[Z4:.*]] = tensor.expand_shape %[[Z]] {{\[\[}}0, 1], [2], [3]] output_shape [1, %[[T]], 2, 16] : tensor<?x2x16xf32> into tensor<1x?x2x16xf32>
// CHECK-NOT:     k3.kda_gate
// CHECK:         %{{.*}}, %{{.*}} = k3.kda %[[Q]], %[[Q]], %[[Q]], %[[Z4]], %[[B]] cu_seqlens(%[[CU]]) gate_params(%[[A]], %[[DT]])
// CHECK-SAME:      {gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.000000e+00 : f64, scale = 2.500000e-01 : f64, use_qk_l2norm}
func.func @fold_lower_bounded_sigmoid(%q: tensor<1x?x2x16xf32>, %z: tensor<?x2x16xf32>,
    %alog: tensor<2xf32>, %dtb: tensor<32xf32>, %beta: tensor<1x?x2xf32>,
    %cu: tensor<?xi32>, %T: index) -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>) {
  %g = k3.kda_gate lower_bounded_sigmoid %z, %alog, %dtb {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<2xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  %g4 = tensor.expand_shape %g [[0, 1], [2], [3]] output_shape [1, %T, 2, 16]
      : tensor<?x2x16xf32> into tensor<1x?x2x16xf32>
  %o, %s = k3.kda %q, %q, %q, %g4, %beta cu_seqlens(%cu) {scale = 0.25 : f64, use_qk_l2norm}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?xi32>) -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
  return %o, %s : tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>
}

// -----

// A bf16 gate projection stays bf16 (the new reshape takes the raw element
// type); the neg_softplus gate has no lower bound; the initial state is kept.

// CHECK-LABEL: func.func @fold_neg_softplus_bf16
// CHECK-SAME:    (%[[Q:[^:]*]]: tensor<1x4x2x16xbf16>, %[[Z:[^:]*]]: tensor<4x2x16xbf16>, %[[A:[^:]*]]: tensor<128xf32>, %[[DT:[^:]*]]: tensor<32xf32>, %[[B:[^:]*]]: tensor<1x4x2xbf16>, %[[S0:[^:]*]]: tensor<1x2x16x16xf32>)
// CHECK-NOT:     k3.kda_gate
// CHECK:         %[[Z4:.*]] = tensor.expand_shape %[[Z]] {{\[\[}}0, 1], [2], [3]] output_shape [1, 4, 2, 16] : tensor<4x2x16xbf16> into tensor<1x4x2x16xbf16>
// CHECK:         k3.kda %[[Q]], %[[Q]], %[[Q]], %[[Z4]], %[[B]] initial_state(%[[S0]]) gate_params(%[[A]], %[[DT]])
// CHECK-SAME:      {gate_kind = #k3<decay_gate neg_softplus>, scale = 2.500000e-01 : f64, use_beta_sigmoid}
// CHECK-SAME:      : (tensor<1x4x2x16xbf16>, tensor<1x4x2x16xbf16>, tensor<1x4x2x16xbf16>, tensor<1x4x2x16xbf16>, tensor<1x4x2xbf16>, tensor<1x2x16x16xf32>, tensor<128xf32>, tensor<32xf32>)
// CHECK-NOT:     lower_bound
func.func @fold_neg_softplus_bf16(%q: tensor<1x4x2x16xbf16>, %z: tensor<4x2x16xbf16>,
    %alog: tensor<128xf32>, %dtb: tensor<32xf32>, %beta: tensor<1x4x2xbf16>,
    %s0: tensor<1x2x16x16xf32>) -> tensor<1x4x2x16xbf16> {
  %g = k3.kda_gate neg_softplus %z, %alog, %dtb
      : (tensor<4x2x16xbf16>, tensor<128xf32>, tensor<32xf32>) -> tensor<4x2x16xf32>
  %g4 = tensor.expand_shape %g [[0, 1], [2], [3]] output_shape [1, 4, 2, 16]
      : tensor<4x2x16xf32> into tensor<1x4x2x16xf32>
  %o, %s = k3.kda %q, %q, %q, %g4, %beta initial_state(%s0) {scale = 0.25 : f64, use_beta_sigmoid}
      : (tensor<1x4x2x16xbf16>, tensor<1x4x2x16xbf16>, tensor<1x4x2x16xbf16>, tensor<1x4x2x16xf32>,
         tensor<1x4x2xbf16>, tensor<1x2x16x16xf32>) -> (tensor<1x4x2x16xbf16>, tensor<1x2x16x16xf32>)
  return %o : tensor<1x4x2x16xbf16>
}

// -----

// When the log-decay has another user the gate stays for it, while k3.kda
// is still fused.

// CHECK-LABEL: func.func @gate_with_other_user
// CHECK:         %[[G:.*]] = k3.kda_gate neg_softplus
// CHECK:         k3.kda {{.*}} gate_params(
// CHECK-SAME:      gate_kind = #k3<decay_gate neg_softplus>
// CHECK:         return %[[G]]
func.func @gate_with_other_user(%q: tensor<1x4x2x16xf32>, %z: tensor<4x2x16xf32>,
    %alog: tensor<2xf32>, %dtb: tensor<32xf32>, %beta: tensor<1x4x2xf32>)
    -> (tensor<4x2x16xf32>, tensor<1x4x2x16xf32>) {
  %g = k3.kda_gate neg_softplus %z, %alog, %dtb
      : (tensor<4x2x16xf32>, tensor<2xf32>, tensor<32xf32>) -> tensor<4x2x16xf32>
  %g4 = tensor.expand_shape %g [[0, 1], [2], [3]] output_shape [1, 4, 2, 16]
      : tensor<4x2x16xf32> into tensor<1x4x2x16xf32>
  %o, %s = k3.kda %q, %q, %q, %g4, %beta {scale = 0.25 : f64}
      : (tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>,
         tensor<1x4x2xf32>) -> (tensor<1x4x2x16xf32>, tensor<1x2x16x16xf32>)
  return %g, %o : tensor<4x2x16xf32>, tensor<1x4x2x16xf32>
}

// -----

// Negative cases: nothing to fold, the IR is unchanged.
//  * g is a precomputed log-decay (a function argument);
//  * g is reshaped from something that is not a k3.kda_gate;
//  * k3.kda already computes its gate in-op.

// CHECK-LABEL: func.func @nothing_to_fold
// CHECK-SAME:    (%[[Q:[^:]*]]: tensor<1x4x2x16xf32>, %[[G:[^:]*]]: tensor<1x4x2x16xf32>, %[[B:[^:]*]]: tensor<1x4x2xf32>, %[[G3:[^:]*]]: tensor<4x2x16xf32>, %[[A:[^:]*]]: tensor<2xf32>, %[[DT:[^:]*]]: tensor<32xf32>)
// CHECK-NEXT:    k3.kda %[[Q]], %[[Q]], %[[Q]], %[[G]], %[[B]] {scale = 2.500000e-01 : f64} :
// CHECK-NEXT:    %[[G4:.*]] = tensor.expand_shape %[[G3]]
// CHECK-NEXT:    k3.kda %[[Q]], %[[Q]], %[[Q]], %[[G4]], %[[B]] {scale = 2.500000e-01 : f64} :
// CHECK-NEXT:    k3.kda %[[Q]], %[[Q]], %[[Q]], %[[G]], %[[B]] gate_params(%[[A]], %[[DT]]) {gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -2.000000e+00 : f64, scale = 2.500000e-01 : f64} :
// CHECK-NEXT:    return
func.func @nothing_to_fold(%q: tensor<1x4x2x16xf32>, %g: tensor<1x4x2x16xf32>,
    %beta: tensor<1x4x2xf32>, %g3: tensor<4x2x16xf32>, %alog: tensor<2xf32>,
    %dtb: tensor<32xf32>) -> (tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>) {
  %o0, %s0 = k3.kda %q, %q, %q, %g, %beta {scale = 0.25 : f64}
      : (tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>,
         tensor<1x4x2xf32>) -> (tensor<1x4x2x16xf32>, tensor<1x2x16x16xf32>)
  %g4 = tensor.expand_shape %g3 [[0, 1], [2], [3]] output_shape [1, 4, 2, 16]
      : tensor<4x2x16xf32> into tensor<1x4x2x16xf32>
  %o1, %s1 = k3.kda %q, %q, %q, %g4, %beta {scale = 0.25 : f64}
      : (tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>,
         tensor<1x4x2xf32>) -> (tensor<1x4x2x16xf32>, tensor<1x2x16x16xf32>)
  %o2, %s2 = k3.kda %q, %q, %q, %g, %beta gate_params(%alog, %dtb)
      {scale = 0.25 : f64, gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -2.0 : f64}
      : (tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>,
         tensor<1x4x2xf32>, tensor<2xf32>, tensor<32xf32>) -> (tensor<1x4x2x16xf32>, tensor<1x2x16x16xf32>)
  return %o0, %o1, %o2 : tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>, tensor<1x4x2x16xf32>
}
