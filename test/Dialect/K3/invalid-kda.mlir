// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of k3.kda_gate and k3.kda.

func.func @gate_input_rank(%z: tensor<?x32xf32>, %a: tensor<128xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op expects 'input' to have rank 3, got 2}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = -5.0 : f64}
      : (tensor<?x32xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @gate_alog_rank(%z: tensor<?x2x16xf32>, %a: tensor<1x128xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op expects 'A_log' to have rank 1, got 2}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<1x128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gate_dt_bias_rank(%z: tensor<?x2x16xf32>, %a: tensor<128xf32>, %b: tensor<2x16xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op expects 'dt_bias' to have rank 1, got 2}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<2x16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gate_result_shape(%z: tensor<?x2x16xf32>, %a: tensor<128xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op shape mismatch: 'input' dimension 2 is 16 but 'result' dimension 2 is 8}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x8xf32>
  return
}

// -----

func.func @gate_result_f16(%z: tensor<?x2x16xf32>, %a: tensor<128xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op result #0 must be ranked tensor of 32-bit float values, but got 'tensor<?x2x16xf16>'}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf16>
  return
}

// -----

func.func @gate_alog_short(%z: tensor<?x2x16xf32>, %a: tensor<1xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op expects 'A_log' to hold at least one entry per head (2), got 1}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<1xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gate_dt_bias_size(%z: tensor<?x2x16xf32>, %a: tensor<128xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op expects 'dt_bias' dimension 0 (heads * head_dim) to be 32, got 16}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gate_missing_lower_bound(%z: tensor<?x2x16xf32>, %a: tensor<128xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op lower_bounded_sigmoid gate requires 'lower_bound'}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gate_lower_bound_zero(%z: tensor<?x2x16xf32>, %a: tensor<128xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op expects 'lower_bound' in [-5, 0), got 0}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = 0.0 : f64}
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gate_lower_bound_too_low(%z: tensor<?x2x16xf32>, %a: tensor<128xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op expects 'lower_bound' in [-5, 0), got -6}}
  %g = k3.kda_gate lower_bounded_sigmoid %z, %a, %b {lower_bound = -6.0 : f64}
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gate_lower_bound_softplus(%z: tensor<?x2x16xf32>, %a: tensor<128xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda_gate' op 'lower_bound' applies only to the lower_bounded_sigmoid gate}}
  %g = k3.kda_gate neg_softplus %z, %a, %b {lower_bound = -5.0 : f64}
      : (tensor<?x2x16xf32>, tensor<128xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @kda_q_rank(%q: tensor<?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'q' to have rank 4, got 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_k_rank(%q: tensor<2x?x2x16xf32>, %k: tensor<?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'k' to have rank 4, got 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_v_rank(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'v' to have rank 4, got 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_g_rank(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'g' to have rank 4, got 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_output_rank(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'output' to have rank 4, got 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_beta_rank(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2x1xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'beta' to have rank 3, got 4}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x1xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_final_state_rank(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'final_state' to have rank 4, got 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x16x8xf32>)
  return
}

// -----

func.func @kda_qk_shape(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x32xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op shape mismatch: 'q' dimension 3 is 16 but 'k' dimension 3 is 32}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x32xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_qg_shape(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x4x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op shape mismatch: 'q' dimension 2 is 2 but 'g' dimension 2 is 4}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x4x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_vo_shape(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op shape mismatch: 'v' dimension 3 is 8 but 'output' dimension 3 is 16}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x16xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_v_batch(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<3x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op batch mismatch: 'q' dimension 0 is 2 but 'v' dimension 0 is 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<3x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<3x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_v_tokens(%q: tensor<2x5x2x16xf32>, %k: tensor<2x5x2x16xf32>, %v: tensor<2x6x2x8xf32>, %g: tensor<2x5x2x16xf32>, %beta: tensor<2x5x2xf32>) {
  // expected-error @+1 {{'k3.kda' op token count mismatch: 'q' dimension 1 is 5 but 'v' dimension 1 is 6}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x5x2x16xf32>, tensor<2x5x2x16xf32>, tensor<2x6x2x8xf32>, tensor<2x5x2x16xf32>, tensor<2x5x2xf32>)
      -> (tensor<2x6x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_v_heads(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x4x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op head count mismatch: 'q' dimension 2 is 2 but 'v' dimension 2 is 4}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x4x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x4x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_beta_batch(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<1x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op batch mismatch: 'q' dimension 0 is 2 but 'beta' dimension 0 is 1}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<1x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_beta_heads(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x3xf32>) {
  // expected-error @+1 {{'k3.kda' op head count mismatch: 'q' dimension 2 is 2 but 'beta' dimension 2 is 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x3xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_state_heads(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op head count mismatch: 'q' dimension 2 is 2 but 'final_state' dimension 1 is 4}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @kda_state_key_dim(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op key dimension mismatch: 'q' dimension 3 is 16 but 'final_state' dimension 2 is 8}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x8x8xf32>)
  return
}

// -----

func.func @kda_state_value_dim(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op value dimension mismatch: 'v' dimension 3 is 8 but 'final_state' dimension 3 is 16}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x16xf32>)
  return
}

// -----

func.func @kda_state_f16(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op result #1 must be ranked tensor of 32-bit float or bfloat16 type values, but got 'tensor<2x2x16x8xf16>'}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf16>)
  return
}

// -----

func.func @kda_state_sequences(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op sequence count mismatch: 'q' dimension 0 is 2 but 'final_state' dimension 0 is 3}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<3x2x16x8xf32>)
  return
}

// -----

func.func @kda_initial_state_shape(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %s0: tensor<2x2x16x16xf32>) {
  // expected-error @+1 {{'k3.kda' op shape mismatch: 'initial_state' dimension 3 is 16 but 'final_state' dimension 3 is 8}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2x2x16x16xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

// A bf16 state (kda-state-dtype=bf16) is stored in bf16 both ways: an f32
// final state from a bf16 initial one is an error.
func.func @kda_initial_state_bf16(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %s0: tensor<2x2x16x8xbf16>) {
  // expected-error @+1 {{'k3.kda' op expects 'initial_state' of the final state's element type}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2x2x16x8xbf16>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_cu_seqlens_rank(%q: tensor<1x?x2x16xf32>, %k: tensor<1x?x2x16xf32>, %v: tensor<1x?x2x8xf32>, %g: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %cu: tensor<1x?xi32>) {
  // expected-error @+1 {{'k3.kda' op expects 'cu_seqlens' to have rank 1, got 2}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta cu_seqlens(%cu) {scale = 0.25 : f64}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x8xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2xf32>, tensor<1x?xi32>)
      -> (tensor<1x?x2x8xf32>, tensor<?x2x16x8xf32>)
  return
}

// -----

func.func @kda_cu_seqlens_batch(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.kda' op expects 'q' dimension 0 (batch, which must be 1 with cu_seqlens) to be 1, got 2}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta cu_seqlens(%cu) {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<?xi32>)
      -> (tensor<2x?x2x8xf32>, tensor<?x2x16x8xf32>)
  return
}

// -----

func.func @kda_head_dim(%q: tensor<2x?x2x512xf32>, %k: tensor<2x?x2x512xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x512xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op supports head dimensions up to 256, got K = 512, V = 8}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x512xf32>, tensor<2x?x2x512xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x512xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x512x8xf32>)
  return
}

// -----

func.func @kda_scale(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'scale' to be positive, got 0}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.0 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_g_bf16(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xbf16>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects the log-decay 'g' in f32 (it is summed over a chunk), got 'bf16'}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xbf16>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_gate_kind_without_params(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op 'gate_kind' requires gate_params(A_log, dt_bias)}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64, gate_kind = #k3<decay_gate neg_softplus>}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_params_without_gate_kind(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %a: tensor<2xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda' op gate_params given without 'gate_kind'}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta gate_params(%a, %b) {scale = 0.25 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2xf32>, tensor<32xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_lower_bound_without_gate_kind(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>) {
  // expected-error @+1 {{'k3.kda' op 'lower_bound' given without 'gate_kind'}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta {scale = 0.25 : f64, lower_bound = -5.0 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_in_op_gate_missing_lower_bound(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %a: tensor<2xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda' op lower_bounded_sigmoid gate requires 'lower_bound'}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta gate_params(%a, %b) {scale = 0.25 : f64, gate_kind = #k3<decay_gate lower_bounded_sigmoid>}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2xf32>, tensor<32xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_in_op_gate_lower_bound_range(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %a: tensor<2xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'lower_bound' in [-5, 0), got -7.5}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta gate_params(%a, %b) {scale = 0.25 : f64, gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -7.5 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2xf32>, tensor<32xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_in_op_gate_softplus_lower_bound(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %a: tensor<2xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda' op 'lower_bound' applies only to the lower_bounded_sigmoid gate}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta gate_params(%a, %b) {scale = 0.25 : f64, gate_kind = #k3<decay_gate neg_softplus>, lower_bound = -5.0 : f64}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2xf32>, tensor<32xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_in_op_gate_alog_rank(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %a: tensor<1x2xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'A_log' to have rank 1, got 2}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta gate_params(%a, %b) {scale = 0.25 : f64, gate_kind = #k3<decay_gate neg_softplus>}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<1x2xf32>, tensor<32xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_in_op_gate_dt_bias_rank(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %a: tensor<2xf32>, %b: tensor<2x16xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'dt_bias' to have rank 1, got 2}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta gate_params(%a, %b) {scale = 0.25 : f64, gate_kind = #k3<decay_gate neg_softplus>}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2xf32>, tensor<2x16xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_in_op_gate_dt_bias_size(%q: tensor<2x?x2x16xf32>, %k: tensor<2x?x2x16xf32>, %v: tensor<2x?x2x8xf32>, %g: tensor<2x?x2x16xf32>, %beta: tensor<2x?x2xf32>, %a: tensor<2xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'k3.kda' op expects 'dt_bias' dimension 0 (heads * head_dim) to be 32, got 16}}
  %o, %s = k3.kda %q, %k, %v, %g, %beta gate_params(%a, %b) {scale = 0.25 : f64, gate_kind = #k3<decay_gate neg_softplus>}
      : (tensor<2x?x2x16xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2x8xf32>, tensor<2x?x2x16xf32>, tensor<2x?x2xf32>, tensor<2xf32>, tensor<16xf32>)
      -> (tensor<2x?x2x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @kda_gate_params_alog_only(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %a: tensor<2xf32>) {
  // expected-error @+1 {{'k3.kda' op expects gate_params to give both 'A_log' and 'dt_bias'}}
  %o:2 = "k3.kda"(%q, %q, %q, %q, %beta, %a)
      <{gate_kind = #k3<decay_gate neg_softplus>, scale = 2.500000e-01 : f64,
        operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 1, 0>}>
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<2xf32>) -> (tensor<1x?x2x16xf32>, tensor<1x2x16x16xf32>)
  return
}

// -----

func.func @kda_gate_params_dt_bias_only(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %b: tensor<32xf32>) {
  // expected-error @+1 {{'k3.kda' op expects gate_params to give both 'A_log' and 'dt_bias'}}
  %o:2 = "k3.kda"(%q, %q, %q, %q, %beta, %b)
      <{scale = 2.500000e-01 : f64,
        operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 0, 0, 1>}>
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<32xf32>) -> (tensor<1x?x2x16xf32>, tensor<1x2x16x16xf32>)
  return
}
