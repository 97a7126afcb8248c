// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of k3.glu_mlp, k3.moe_router and k3.moe_experts.

func.func @glu_input_rank(%x: tensor<1x?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op expects 'input' to have rank 2, got 3}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<1x?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<1x?x64xf32>
  return
}

// -----

func.func @glu_w_gate_rank(%x: tensor<?x64xf32>, %wg: tensor<96xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op expects 'w_gate' to have rank 2, got 1}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x64xf32>, tensor<96xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_w_down_rank(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<1x64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op expects 'w_down' to have rank 2, got 3}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<1x64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_w_up_shape(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<48x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op shape mismatch: 'w_gate' dimension 0 is 96 but 'w_up' dimension 0 is 48}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<48x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_result_shape(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op shape mismatch: 'input' dimension 1 is 64 but 'result' dimension 1 is 96}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x96xf32>
  return
}

// -----

func.func @glu_hidden_gate(%x: tensor<?x64xf32>, %wg: tensor<96x32xbf16>, %wu: tensor<96x32xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op hidden size mismatch: 'input' dimension 1 is 64 but 'w_gate' dimension 1 is 32}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x64xf32>, tensor<96x32xbf16>, tensor<96x32xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_hidden_down(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<32x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op hidden size mismatch: 'w_down' dimension 0 is 32 but 'input' dimension 1 is 64}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<32x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_intermediate(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x48xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op intermediate size mismatch: 'w_down' dimension 1 is 48 but 'w_gate' dimension 0 is 96}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x48xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_silu_beta(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op 'beta' and 'linear_beta' apply only to the situ activation}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd {beta = 4.0 : f64}
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_silu_linear_beta(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op 'beta' and 'linear_beta' apply only to the situ activation}}
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd {linear_beta = 25.0 : f64}
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_situ_no_beta(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op situ activation requires 'beta'}}
  %y = k3.glu_mlp situ %x, %wg, %wu, %wd {linear_beta = 25.0 : f64}
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_situ_beta_positive(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op expects 'beta' to be positive, got 0}}
  %y = k3.glu_mlp situ %x, %wg, %wu, %wd {beta = 0.0 : f64}
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @glu_situ_linear_beta_positive(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wu: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op expects 'linear_beta' to be positive, got -2}}
  %y = k3.glu_mlp situ %x, %wg, %wu, %wd {beta = 4.0 : f64, linear_beta = -2.0 : f64}
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @router_input_rank(%x: tensor<64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'input' to have rank 2, got 1}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_weight_rank(%x: tensor<?x64xf32>, %w: tensor<1x8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'weight' to have rank 2, got 3}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<1x8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_indices_rank(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'indices' to have rank 2, got 1}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_weights_shape(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op shape mismatch: 'indices' dimension 1 is 2 but 'weights' dimension 1 is 3}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x3xf32>)
  return
}

// -----

func.func @router_indices_type(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op result #0 must be ranked tensor of 32-bit signless integer values, but got 'tensor<?x2xi64>'}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi64>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_hidden(%x: tensor<?x64xf32>, %w: tensor<8x32xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op hidden size mismatch: 'input' dimension 1 is 64 but 'weight' dimension 1 is 32}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x32xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_tokens(%x: tensor<4x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op token count mismatch: 'input' dimension 0 is 4 but 'indices' dimension 0 is 5}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<4x64xf32>, tensor<8x64xbf16>) -> (tensor<5x2xi32>, tensor<5x2xf32>)
  return
}

// -----

func.func @router_top_k_dim(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'indices' dimension 1 (top_k) to be 2, got 4}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x4xi32>, tensor<?x4xf32>)
  return
}

// -----

func.func @router_top_k_zero(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'top_k' in [1, 8], got 0}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 0 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x?xi32>, tensor<?x?xf32>)
  return
}

// -----

func.func @router_top_k_too_large(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'top_k' in [1, 8], got 9}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 9 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x9xi32>, tensor<?x9xf32>)
  return
}

// -----

func.func @router_bias_rank(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>, %bias: tensor<1x8xf32>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'correction_bias' to have rank 1, got 2}}
  %i, %p = k3.moe_router sigmoid %x, %w bias(%bias) {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>, tensor<1x8xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_bias_experts(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>, %bias: tensor<16xf32>) {
  // expected-error @+1 {{'k3.moe_router' op expert count mismatch: 'correction_bias' dimension 0 is 16 but 'weight' dimension 0 is 8}}
  %i, %p = k3.moe_router sigmoid %x, %w bias(%bias) {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>, tensor<16xf32>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_bias_type(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>, %bias: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op operand #2 must be ranked tensor of 32-bit float values, but got 'tensor<8xbf16>'}}
  %i, %p = k3.moe_router sigmoid %x, %w bias(%bias) {top_k = 2 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>, tensor<8xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_scaling_factor(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op expects 'routed_scaling_factor' to be positive, got 0}}
  %i, %p = k3.moe_router sigmoid %x, %w {top_k = 2 : i64, routed_scaling_factor = 0.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @router_missing_top_k(%x: tensor<?x64xf32>, %w: tensor<8x64xbf16>) {
  // expected-error @+1 {{'k3.moe_router' op requires attribute 'top_k'}}
  %i, %p = k3.moe_router sigmoid %x, %w {routed_scaling_factor = 1.0 : f64}
      : (tensor<?x64xf32>, tensor<8x64xbf16>) -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return
}

// -----

func.func @experts_input_rank(%x: tensor<1x?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expects 'input' to have rank 2, got 3}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<1x?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<1x?x32xf32>
  return
}

// -----

func.func @experts_indices_rank(%x: tensor<?x32xf32>, %i: tensor<?xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expects 'indices' to have rank 2, got 1}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_weights_shape(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x4xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op shape mismatch: 'indices' dimension 1 is 2 but 'weights' dimension 1 is 4}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x4xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_w1_rank(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expects 'w1' to have rank 3, got 2}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_w2_rank(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expects 'w2' to have rank 3, got 2}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_w3_shape(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<4x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op shape mismatch: 'w1' dimension 0 is 8 but 'w3' dimension 0 is 4}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<4x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_result_shape(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op shape mismatch: 'input' dimension 1 is 32 but 'result' dimension 1 is 64}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @experts_tokens(%x: tensor<4x32xf32>, %i: tensor<3x2xi32>, %p: tensor<3x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op token count mismatch: 'input' dimension 0 is 4 but 'indices' dimension 0 is 3}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<4x32xf32>, tensor<3x2xi32>, tensor<3x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<4x32xf32>
  return
}

// -----

func.func @experts_input_width(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x64xbf16>, %w3: tensor<8x16x64xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expert input width mismatch: 'w1' dimension 2 is 64 but 'input' dimension 1 is 32}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x64xbf16>, tensor<8x16x64xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_count(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<4x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expert count mismatch: 'w2' dimension 0 is 4 but 'w1' dimension 0 is 8}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<4x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_output_width(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x64x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expert output width mismatch: 'w2' dimension 1 is 64 but 'input' dimension 1 is 32}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x64x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_intermediate(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x8xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expert intermediate size mismatch: 'w2' dimension 2 is 8 but 'w1' dimension 1 is 16}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x8xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_silu_beta(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op 'beta' and 'linear_beta' apply only to the situ activation}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2 {beta = 4.0 : f64}
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_situ_no_beta(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op situ activation requires 'beta'}}
  %y = k3.moe_experts situ %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @experts_situ_linear_beta(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) {
  // expected-error @+1 {{'k3.moe_experts' op expects 'linear_beta' to be positive, got 0}}
  %y = k3.moe_experts situ %x, %i, %p, %w1, %w3, %w2 {beta = 4.0 : f64, linear_beta = 0.0 : f64}
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xf32>
  return
}
