// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of the ops graph passes create (K3FusedOps.td):
// k3.last_tokens, k3.last_token_context, k3.linear_group, k3.add_rms_norm and
// k3.partial_rms_norm.

func.func @last_tokens_rows(%x: tensor<?x8xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{'k3.last_tokens' op expects one result row per sequence: 'cu_seqlens' has 3 offsets (2 sequences) but 'result' has 3 rows}}
  %r = k3.last_tokens %x, %cu : (tensor<?x8xf32>, tensor<3xi32>) -> tensor<3x8xf32>
  return
}

// -----

func.func @last_tokens_width(%x: tensor<?x8xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.last_tokens' op row size mismatch: 'input' dimension 1 is 8 but 'result' dimension 1 is 4}}
  %r = k3.last_tokens %x, %cu : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @last_tokens_rank(%x: tensor<?x2x8xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.last_tokens' op expects 'input' to have rank 2, got 3}}
  %r = k3.last_tokens %x, %cu : (tensor<?x2x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
  return
}

// -----

func.func @last_token_context_seqs(%cu: tensor<3xi32>, %ctx: tensor<3xi32>) {
  // expected-error @+1 {{'k3.last_token_context' op expects 'cu_seqlens' to hold one offset more than 'context_lens' has sequences, got 3 and 3}}
  %l, %c = k3.last_token_context %cu, %ctx : (tensor<3xi32>, tensor<3xi32>) -> (tensor<3xi32>, tensor<3xi32>)
  return
}

// -----

func.func @last_token_context_rank(%cu: tensor<?x2xi32>, %ctx: tensor<?xi32>) {
  // expected-error @+1 {{'k3.last_token_context' op expects 'cu_seqlens' to have rank 1, got 2}}
  %l, %c = k3.last_token_context %cu, %ctx : (tensor<?x2xi32>, tensor<?xi32>) -> (tensor<?xi32>, tensor<?x2xi32>)
  return
}

// -----

func.func @last_token_context_offsets(%cu: tensor<3xi32>, %ctx: tensor<2xi32>) {
  // expected-error @+1 {{'k3.last_token_context' op shape mismatch: 'cu_seqlens' dimension 0 is 3 but 'last_cu_seqlens' dimension 0 is 2}}
  %l, %c = k3.last_token_context %cu, %ctx : (tensor<3xi32>, tensor<2xi32>) -> (tensor<2xi32>, tensor<2xi32>)
  return
}

// -----

func.func @last_tokens_dtype(%x: tensor<?x8xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.last_tokens' op expects 'result' to have the element type of 'input' ('f32'), got 'bf16'}}
  %r = k3.last_tokens %x, %cu : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xbf16>
  return
}

// -----

func.func @add_rms_norm_residual(%x: tensor<?x8xf32>, %r: tensor<?x4xf32>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.add_rms_norm' op shape mismatch: 'input' dimension 1 is 8 but 'residual' dimension 1 is 4}}
  %h, %y = k3.add_rms_norm %x, %r, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x8xf32>, tensor<?x4xf32>, tensor<8xbf16>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

func.func @add_rms_norm_weight(%x: tensor<?x8xf32>, %w: tensor<4xbf16>) {
  // expected-error @+1 {{'k3.add_rms_norm' op normalised size mismatch: 'input' dimension 1 is 8 but 'weight' dimension 0 is 4}}
  %h, %y = k3.add_rms_norm %x, %x, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<4xbf16>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

func.func @add_rms_norm_eps(%x: tensor<?x8xf32>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.add_rms_norm' op expects 'epsilon' to be positive, got 0}}
  %h, %y = k3.add_rms_norm %x, %x, %w {epsilon = 0.0 : f64}
      : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<8xbf16>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
  return
}

// -----

func.func @add_rms_norm_sum(%x: tensor<?x8xf32>, %w: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.add_rms_norm' op shape mismatch: 'input' dimension 1 is 8 but 'sum' dimension 1 is 6}}
  %h, %y = k3.add_rms_norm %x, %x, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<8xbf16>) -> (tensor<?x6xf32>, tensor<?x8xf32>)
  return
}

// -----

func.func @linear_group_counts(%x: tensor<?x8xf32>, %a: tensor<4x8xf32>, %b: tensor<2x8xf32>) {
  // expected-error @+1 {{'k3.linear_group' op expects one result per weight, got 2 weights and 1 results}}
  %r = k3.linear_group %x, %a, %b : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<?x4xf32>
  return
}

// -----

func.func @linear_group_features(%x: tensor<?x8xf32>, %a: tensor<4x8xf32>, %b: tensor<2x6xf32>) {
  // expected-error @+1 {{'k3.linear_group' op input features mismatch: 'input' dimension 1 is 8 but 'weights[1]' dimension 1 is 6}}
  %r:2 = k3.linear_group %x, %a, %b : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<2x6xf32>) -> (tensor<?x4xf32>, tensor<?x2xf32>)
  return
}

// -----

func.func @linear_group_outputs(%x: tensor<?x8xf32>, %a: tensor<4x8xf32>, %b: tensor<2x8xf32>) {
  // expected-error @+1 {{'k3.linear_group' op output features mismatch: 'weights[1]' dimension 0 is 2 but 'results[1]' dimension 1 is 3}}
  %r:2 = k3.linear_group %x, %a, %b : (tensor<?x8xf32>, tensor<4x8xf32>, tensor<2x8xf32>) -> (tensor<?x4xf32>, tensor<?x3xf32>)
  return
}

// -----

func.func @linear_group_rows(%x: tensor<5x8xf32>, %a: tensor<4x8xf32>) {
  // expected-error @+1 {{'k3.linear_group' op batch dimension mismatch: 'input' dimension 0 is 5 but 'results[0]' dimension 0 is 6}}
  %r = k3.linear_group %x, %a : (tensor<5x8xf32>, tensor<4x8xf32>) -> tensor<6x4xf32>
  return
}

// -----

func.func @short_conv_group_channels(%x: tensor<?x64xbf16>, %y: tensor<?x32xbf16>, %w: tensor<64x1x4xf32>, %s: tensor<?x64x3xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.short_conv_group' op channel count mismatch: 'inputs[1]' dimension 1 is 32 but 'weights[1]' dimension 0 is 64}}
  %r:4 = k3.short_conv_group(%x, %y) weights(%w, %w) state(%s, %s) cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<64x1x4xf32>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?x64x3xf32>, tensor<?xi32>)
      -> (tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x64x3xf32>, tensor<?x64x3xf32>)
  return
}

// -----

func.func @short_conv_group_kernel_size(%x: tensor<?x64xbf16>, %w: tensor<64x1x1xf32>, %s: tensor<?x64x0xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.short_conv_group' op expects 'kernel_size' in [2, 16], got 1}}
  %r:2 = k3.short_conv_group(%x) weights(%w) state(%s) cu_seqlens(%cu) {kernel_size = 1 : i64}
      : (tensor<?x64xbf16>, tensor<64x1x1xf32>, tensor<?x64x0xf32>, tensor<?xi32>)
      -> (tensor<?x64xbf16>, tensor<?x64x0xf32>)
  return
}

// -----

func.func @partial_rms_norm_whole_row(%x: tensor<?x20xbf16>, %w: tensor<20xbf16>) {
  // expected-error @+1 {{'k3.partial_rms_norm' op expects a static 'weight' size R with 0 < R < the input's static last dimension, got R = 20 and 20}}
  %y = k3.partial_rms_norm %x, %w {epsilon = 1.0e-6 : f64} : (tensor<?x20xbf16>, tensor<20xbf16>) -> tensor<?x20xbf16>
  return
}

// -----

func.func @partial_rms_norm_result(%x: tensor<?x20xbf16>, %w: tensor<16xbf16>) {
  // expected-error @+1 {{'k3.partial_rms_norm' op shape mismatch: 'input' dimension 1 is 20 but 'result' dimension 1 is 16}}
  %y = k3.partial_rms_norm %x, %w {epsilon = 1.0e-6 : f64} : (tensor<?x20xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @partial_rms_norm_epsilon(%x: tensor<?x20xbf16>, %w: tensor<16xbf16>) {
  // expected-error @+1 {{'k3.partial_rms_norm' op expects 'epsilon' to be positive, got 0}}
  %y = k3.partial_rms_norm %x, %w {epsilon = 0.0 : f64} : (tensor<?x20xbf16>, tensor<16xbf16>) -> tensor<?x20xbf16>
  return
}
