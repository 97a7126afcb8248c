// RUN: k3-opt %s -split-input-file --k3-split-router | FileCheck %s

// k3.moe_router becomes a k3.linear (f32 logits [T, E], whatever the
// activations' type) and a k3.moe_topk with the router's attributes and
// bias; the results keep their uses.

// CHECK-LABEL: func.func @router
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x32xbf16>, %[[W:[^:]*]]: tensor<8x32xbf16>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-NOT:     k3.moe_router
// CHECK:         %[[L:.*]] = k3.linear %[[X]], %[[W]] : (tensor<?x32xbf16>, tensor<8x32xbf16>) -> tensor<?x8xf32>
// CHECK:         %[[I:.*]], %[[P:.*]] = k3.moe_topk sigmoid %[[L]] bias(%[[B]]) {renormalize, routed_scaling_factor = 2.500000e+00 : f64, top_k = 2 : i64}
// CHECK-SAME:      : (tensor<?x8xf32>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
// CHECK:         return %[[I]], %[[P]]
func.func @router(%x: tensor<?x32xbf16>, %w: tensor<8x32xbf16>, %b: tensor<8xf32>)
    -> (tensor<?x2xi32>, tensor<?x2xf32>) {
  %i, %p = k3.moe_router sigmoid %x, %w bias(%b) {top_k = 2 : i64, renormalize, routed_scaling_factor = 2.5 : f64}
      : (tensor<?x32xbf16>, tensor<8x32xbf16>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %i, %p : tensor<?x2xi32>, tensor<?x2xf32>
}

// -----

// Softmax scores, no bias, no renormalisation.
// CHECK-LABEL: func.func @softmax
// CHECK:         %[[L:.*]] = k3.linear %{{.*}}, %{{.*}} : (tensor<5x16xf32>, tensor<4x16xf32>) -> tensor<5x4xf32>
// CHECK:         k3.moe_topk softmax %[[L]] {routed_scaling_factor = 1.000000e+00 : f64, top_k = 1 : i64}
// CHECK-SAME:      : (tensor<5x4xf32>) -> (tensor<5x1xi32>, tensor<5x1xf32>)
func.func @softmax(%x: tensor<5x16xf32>, %w: tensor<4x16xf32>)
    -> (tensor<5x1xi32>, tensor<5x1xf32>) {
  %i, %p = k3.moe_router softmax %x, %w {top_k = 1 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<5x16xf32>, tensor<4x16xf32>) -> (tensor<5x1xi32>, tensor<5x1xf32>)
  return %i, %p : tensor<5x1xi32>, tensor<5x1xf32>
}

// -----

// Group-limited routing: n_group / topk_group carry over to the selection.
// CHECK-LABEL: func.func @grouped
// CHECK:         k3.moe_topk sigmoid %{{.*}} bias(%{{.*}}) {n_group = 4 : i64, renormalize, routed_scaling_factor = 2.500000e+00 : f64, top_k = 3 : i64, topk_group = 2 : i64}
func.func @grouped(%x: tensor<?x32xbf16>, %w: tensor<16x32xbf16>, %b: tensor<16xf32>)
    -> (tensor<?x3xi32>, tensor<?x3xf32>) {
  %i, %p = k3.moe_router sigmoid %x, %w bias(%b) {top_k = 3 : i64, renormalize, routed_scaling_factor = 2.5 : f64, n_group = 4 : i64, topk_group = 2 : i64}
      : (tensor<?x32xbf16>, tensor<16x32xbf16>, tensor<16xf32>) -> (tensor<?x3xi32>, tensor<?x3xf32>)
  return %i, %p : tensor<?x3xi32>, tensor<?x3xf32>
}
