// RUN: k3-opt %s | FileCheck %s
// RUN: k3-opt %s | k3-opt | FileCheck %s

// n_group / topk_group round-trip; the default 1 / 1 (the plain top-k)
// is not printed, so IR without group-limited routing reads as before.
// Groups of one expert are allowed without a bias (the group score is its
// best expert's).

// CHECK-LABEL: func.func @groups
// CHECK:         k3.moe_router sigmoid %{{.*}}, %{{.*}} bias(%{{.*}}) {n_group = 4 : i64, renormalize, routed_scaling_factor = 2.500000e+00 : f64, top_k = 2 : i64, topk_group = 2 : i64}
// CHECK:         k3.moe_topk softmax %{{.*}} {n_group = 8 : i64, routed_scaling_factor = 1.000000e+00 : f64, top_k = 3 : i64, topk_group = 3 : i64}
// CHECK:         k3.moe_topk sigmoid %{{.*}} {routed_scaling_factor = 1.000000e+00 : f64, top_k = 3 : i64}
func.func @groups(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>, %b: tensor<8xf32>, %l: tensor<?x8xf32>) {
  %i, %p = k3.moe_router sigmoid %x, %w bias(%b) {top_k = 2 : i64, renormalize, routed_scaling_factor = 2.5 : f64, n_group = 4 : i64, topk_group = 2 : i64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %i2, %p2 = k3.moe_topk softmax %l {top_k = 3 : i64, routed_scaling_factor = 1.0 : f64, n_group = 8 : i64, topk_group = 3 : i64}
      : (tensor<?x8xf32>) -> (tensor<?x3xi32>, tensor<?x3xf32>)
  %i3, %p3 = k3.moe_topk sigmoid %l {top_k = 3 : i64, routed_scaling_factor = 1.0 : f64, n_group = 1 : i64, topk_group = 1 : i64}
      : (tensor<?x8xf32>) -> (tensor<?x3xi32>, tensor<?x3xf32>)
  return
}
