// RUN: k3-opt %s -split-input-file --k3-plan-memory -verify-diagnostics

// k3-plan-memory runs on outlined model functions (k3-outline-kernels).

func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}) -> tensor<4xf32> {
  // expected-error @+1 {{'tensor.empty' op has no k3.shapes (run --k3-outline-kernels)}}
  %e = tensor.empty() : tensor<4xf32>
  return %e : tensor<4xf32>
}

// -----

func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}) {
  %s = k3.state.read "s" : tensor<?x4xf32>
  // expected-error @+1 {{'k3.state.write' op expects its value from a launch: a dedicated copy or an in-place update (run --k3-outline-kernels)}}
  k3.state.write "s", %s : tensor<?x4xf32>
  return
}
