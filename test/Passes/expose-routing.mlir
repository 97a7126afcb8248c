// RUN: k3-opt %s -split-input-file --k3-expose-routing -verify-diagnostics | FileCheck %s

// Each router's expert ids become a named result of the model function.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> (tensor<?x8xf32>, tensor<?x2xi32> {k3.name = "model.layers.1.block_sparse_moe.router_indices"})
// CHECK: %[[IDX:.*]], %{{.*}} = k3.moe_router
// CHECK: return %{{.*}}, %[[IDX]] : tensor<?x8xf32>, tensor<?x2xi32>
func.func @forward(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %w = k3.weight "model.layers.1.block_sparse_moe.gate.weight" : tensor<4x8xbf16>
  %idx, %wts = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, renormalize, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x8xf32>, tensor<4x8xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %x : tensor<?x8xf32>
}

// -----

// Without a router the function is unchanged.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: -> tensor<?x8xf32> {
func.func @forward(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  return %x : tensor<?x8xf32>
}

// -----

func.func @forward(%x: tensor<?x8xf32>, %w: tensor<4x8xbf16>) -> tensor<?x8xf32> {
  // expected-error @+1 {{router weight must be a k3.weight named '<prefix>gate.weight'}}
  %idx, %wts = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, renormalize, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x8xf32>, tensor<4x8xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %x : tensor<?x8xf32>
}
