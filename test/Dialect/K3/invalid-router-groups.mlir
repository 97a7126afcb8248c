// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of group-limited routing (n_group, topk_group) on
// k3.moe_router and k3.moe_topk.

func.func @router_n_group_zero(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'n_group' >= 1, got 0}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, n_group = 0 : i64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_n_group_divides(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'n_group' (3) to divide the expert count 8}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, n_group = 3 : i64, topk_group = 2 : i64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_topk_group_zero(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'topk_group' in [1, 4] ('n_group'), got 0}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, n_group = 4 : i64, topk_group = 0 : i64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_topk_group_above_n_group(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'topk_group' in [1, 4] ('n_group'), got 5}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, n_group = 4 : i64, topk_group = 5 : i64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_top_k_above_eligible(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'top_k' (3) at most the 2 experts of 'topk_group' (1) groups of 2}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 3 : i64, routed_scaling_factor = 1.0 : f64, n_group = 4 : i64, topk_group = 1 : i64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x3xi32>, tensor<?x3xf32>)
  return
}

// -----

func.func @router_groups_of_one_with_bias(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'k3.moe_router' op expects groups of at least 2 experts with a correction bias (the group score sums the best two), got 1}}
  %i, %p = k3.moe_router sigmoid %x, %w bias(%b) {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, n_group = 8 : i64, topk_group = 4 : i64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>, tensor<8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @topk_n_group_divides(%l: tensor<?x40xf32>) {
  // expected-error @+1 {{'k3.moe_topk' op expects 'n_group' (6) to divide the expert count 40}}
  %i, %p = k3.moe_topk softmax %l {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, n_group = 6 : i64, topk_group = 2 : i64}
      : (tensor<?x40xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @topk_topk_group_above_n_group(%l: tensor<?x40xf32>) {
  // expected-error @+1 {{'k3.moe_topk' op expects 'topk_group' in [1, 4] ('n_group'), got 6}}
  %i, %p = k3.moe_topk softmax %l {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, n_group = 4 : i64, topk_group = 6 : i64}
      : (tensor<?x40xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @topk_top_k_above_eligible(%l: tensor<?x40xf32>) {
  // expected-error @+1 {{'k3.moe_topk' op expects 'top_k' (21) at most the 20 experts of 'topk_group' (2) groups of 10}}
  %i, %p = k3.moe_topk softmax %l {top_k = 21 : i64, routed_scaling_factor = 1.0 : f64, n_group = 4 : i64, topk_group = 2 : i64}
      : (tensor<?x40xf32>) -> (tensor<?x21xi32>, tensor<?x21xf32>)
  return
}

// -----

func.func @topk_groups_of_one_with_bias(%l: tensor<?x4xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'k3.moe_topk' op expects groups of at least 2 experts with a correction bias (the group score sums the best two), got 1}}
  %i, %p = k3.moe_topk sigmoid %l bias(%b) {top_k = 1 : i64, routed_scaling_factor = 1.0 : f64, n_group = 4 : i64, topk_group = 2 : i64}
      : (tensor<?x4xf32>, tensor<4xf32>) -> (tensor<?x1xi32>, tensor<?x1xf32>)
  return
}
