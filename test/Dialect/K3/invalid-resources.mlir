// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of k3.weight, k3.state.read and k3.state.write.

func.func @weight_empty_name() {
  // expected-error @+1 {{'k3.weight' op expects a non-empty weight name}}
  %w = k3.weight "" : tensor<4xf32>
  return
}

// -----

func.func @weight_dynamic_shape() {
  // expected-error @+1 {{'k3.weight' op expects 'result' to have a static shape, got 'tensor<?x4xf32>'}}
  %w = k3.weight "lm_head.weight" : tensor<?x4xf32>
  return
}

// -----

func.func @weight_integer_type() {
  // expected-error @+1 {{'k3.weight' op result #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float or f4E2M1FN type values, but got 'tensor<4xi32>'}}
  %w = k3.weight "ids" : tensor<4xi32>
  return
}

// -----

func.func @weight_expert_stack_rank() {
  // expected-error @+1 {{'k3.weight' op expert stack 'experts.{expert}.bias' needs rank >= 2 (experts first), got rank 1}}
  %w = k3.weight "experts.{expert}.bias" : tensor<8xf32>
  return
}

// -----

func.func @weight_two_placeholders() {
  // expected-error @+1 {{'k3.weight' op expects one '{expert}' placeholder in 'experts.{expert}.{expert}.w1'}}
  %w = k3.weight "experts.{expert}.{expert}.w1" : tensor<8x4x4xf32>
  return
}

// -----

func.func @weight_unknown_placeholder() {
  // expected-error @+1 {{'k3.weight' op unknown placeholder in weight name 'layers.{layer}.w' (only {expert} is defined)}}
  %w = k3.weight "layers.{layer}.w" : tensor<4x4xf32>
  return
}

// -----

func.func @weight_stray_brace() {
  // expected-error @+1 {{'k3.weight' op unknown placeholder in weight name 'experts.{expert.w1'}}
  %w = k3.weight "experts.{expert.w1" : tensor<8x4x4xf32>
  return
}

// -----

func.func @state_read_empty_name() {
  // expected-error @+1 {{'k3.state.read' op expects a non-empty state name without spaces}}
  %s = k3.state.read "" : tensor<?x4xf32>
  return
}

// -----

func.func @state_read_space_in_name() {
  // expected-error @+1 {{'k3.state.read' op expects a non-empty state name without spaces}}
  %s = k3.state.read "conv state" : tensor<?x4xf32>
  return
}

// -----

func.func @state_read_rank() {
  // expected-error @+1 {{'k3.state.read' op expects 'result' to have rank at least 2, got 1}}
  %s = k3.state.read "conv_state" : tensor<?xf32>
  return
}

// -----

func.func @state_read_dynamic_inner_dim() {
  // expected-error @+1 {{'k3.state.read' op expects only the sequence dimension (0) of state 'conv_state' to be dynamic, got 'tensor<?x?x3xf32>'}}
  %s = k3.state.read "conv_state" : tensor<?x?x3xf32>
  return
}

// -----

func.func @state_write_bad_name(%v: tensor<?x4xf32>) {
  // expected-error @+1 {{'k3.state.write' op expects a non-empty state name without spaces}}
  k3.state.write "a\tb", %v : tensor<?x4xf32>
  return
}

// -----

func.func @state_write_rank(%v: tensor<4xf32>) {
  // expected-error @+1 {{'k3.state.write' op expects 'value' to have rank at least 2, got 1}}
  k3.state.write "conv_state", %v : tensor<4xf32>
  return
}
