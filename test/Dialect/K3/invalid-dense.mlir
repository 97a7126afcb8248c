// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of the dense building blocks: k3.embedding,
// k3.rms_norm, k3.gated_rms_norm, k3.linear, k3.add, k3.sigmoid_gate,
// k3.short_conv and k3.argmax.

func.func @embedding_ids_rank(%ids: tensor<2x?xi32>, %t: tensor<256x64xbf16>) {
  // expected-error @+1 {{'k3.embedding' op expects 'ids' to have rank 1, got 2}}
  %e = k3.embedding %ids, %t : (tensor<2x?xi32>, tensor<256x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @embedding_ids_type(%ids: tensor<?xi64>, %t: tensor<256x64xbf16>) {
  // expected-error @+1 {{'k3.embedding' op operand #0 must be ranked tensor of 32-bit signless integer values, but got 'tensor<?xi64>'}}
  %e = k3.embedding %ids, %t : (tensor<?xi64>, tensor<256x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @embedding_table_rank(%ids: tensor<?xi32>, %t: tensor<256xbf16>) {
  // expected-error @+1 {{'k3.embedding' op expects 'table' to have rank 2, got 1}}
  %e = k3.embedding %ids, %t : (tensor<?xi32>, tensor<256xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @embedding_result_rank(%ids: tensor<?xi32>, %t: tensor<256x64xbf16>) {
  // expected-error @+1 {{'k3.embedding' op expects 'result' to have rank 2, got 3}}
  %e = k3.embedding %ids, %t : (tensor<?xi32>, tensor<256x64xbf16>) -> tensor<1x?x64xf32>
  return
}

// -----

func.func @embedding_token_count(%ids: tensor<5xi32>, %t: tensor<256x64xbf16>) {
  // expected-error @+1 {{'k3.embedding' op token count mismatch: 'ids' dimension 0 is 5 but 'result' dimension 0 is 6}}
  %e = k3.embedding %ids, %t : (tensor<5xi32>, tensor<256x64xbf16>) -> tensor<6x64xf32>
  return
}

// -----

func.func @embedding_hidden_size(%ids: tensor<?xi32>, %t: tensor<256x64xbf16>) {
  // expected-error @+1 {{'k3.embedding' op hidden size mismatch: 'table' dimension 1 is 64 but 'result' dimension 1 is 32}}
  %e = k3.embedding %ids, %t : (tensor<?xi32>, tensor<256x64xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @rms_norm_scalar(%x: tensor<f32>, %w: tensor<1xf32>) {
  // expected-error @+1 {{'k3.rms_norm' op expects 'input' to have rank at least 1, got 0}}
  %n = k3.rms_norm %x, %w {epsilon = 1.0e-5 : f64} : (tensor<f32>, tensor<1xf32>) -> tensor<f32>
  return
}

// -----

func.func @rms_norm_weight_rank(%x: tensor<?x64xf32>, %w: tensor<1x64xf32>) {
  // expected-error @+1 {{'k3.rms_norm' op expects 'weight' to have rank 1, got 2}}
  %n = k3.rms_norm %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<1x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rms_norm_result_rank(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'k3.rms_norm' op expects 'input' and 'result' to have the same rank, got 2 and 3}}
  %n = k3.rms_norm %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<1x?x64xf32>
  return
}

// -----

func.func @rms_norm_result_shape(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'k3.rms_norm' op shape mismatch: 'input' dimension 1 is 64 but 'result' dimension 1 is 32}}
  %n = k3.rms_norm %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @rms_norm_weight_size(%x: tensor<?x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{'k3.rms_norm' op normalised size mismatch: 'input' dimension 1 is 64 but 'weight' dimension 0 is 32}}
  %n = k3.rms_norm %x, %w {epsilon = 1.0e-5 : f64} : (tensor<?x64xf32>, tensor<32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rms_norm_epsilon(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'k3.rms_norm' op expects 'epsilon' to be positive, got 0}}
  %n = k3.rms_norm %x, %w {epsilon = 0.0 : f64} : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @rms_norm_missing_epsilon(%x: tensor<?x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{'k3.rms_norm' op requires attribute 'epsilon'}}
  %n = k3.rms_norm %x, %w : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @gated_rms_norm_input_rank(%x: tensor<?x32xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op expects 'input' to have rank 3, got 2}}
  %n = k3.gated_rms_norm %x, %x, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x32xf32>, tensor<?x32xf32>, tensor<16xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @gated_rms_norm_weight_rank(%x: tensor<?x2x16xf32>, %w: tensor<2x16xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op expects 'weight' to have rank 1, got 2}}
  %n = k3.gated_rms_norm %x, %x, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<2x16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gated_rms_norm_gate_shape(%x: tensor<?x2x16xf32>, %z: tensor<?x4x8xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op shape mismatch: 'input' dimension 1 is 2 but 'gate' dimension 1 is 4}}
  %n = k3.gated_rms_norm %x, %z, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x2x16xf32>, tensor<?x4x8xf32>, tensor<16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gated_rms_norm_result_shape(%x: tensor<?x2x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op expects 'input' and 'result' to have the same rank, got 3 and 2}}
  %n = k3.gated_rms_norm %x, %x, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<16xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @gated_rms_norm_head_dim(%x: tensor<?x2x16xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op head dimension mismatch: 'input' dimension 2 is 16 but 'weight' dimension 0 is 32}}
  %n = k3.gated_rms_norm %x, %x, %w {epsilon = 1.0e-5 : f64}
      : (tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @gated_rms_norm_epsilon(%x: tensor<?x2x16xf32>, %w: tensor<16xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op expects 'epsilon' to be positive, got -1}}
  %n = k3.gated_rms_norm %x, %x, %w {epsilon = -1.0 : f64}
      : (tensor<?x2x16xf32>, tensor<?x2x16xf32>, tensor<16xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @linear_scalar_input(%x: tensor<f32>, %w: tensor<4x4xf32>) {
  // expected-error @+1 {{'k3.linear' op expects 'input' to have rank at least 1, got 0}}
  %y = k3.linear %x, %w : (tensor<f32>, tensor<4x4xf32>) -> tensor<f32>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<?x64xf32>, %w: tensor<2x32x64xf32>) {
  // expected-error @+1 {{'k3.linear' op expects 'weight' to have rank 2, got 3}}
  %y = k3.linear %x, %w : (tensor<?x64xf32>, tensor<2x32x64xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @linear_result_rank(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{'k3.linear' op expects the result to have the rank of 'input' (2), got 1}}
  %y = k3.linear %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<32xf32>
  return
}

// -----

func.func @linear_batch_dim(%x: tensor<2x3x64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{'k3.linear' op batch dimension mismatch: 'input' dimension 1 is 3 but 'result' dimension 1 is 4}}
  %y = k3.linear %x, %w : (tensor<2x3x64xf32>, tensor<32x64xf32>) -> tensor<2x4x32xf32>
  return
}

// -----

func.func @linear_input_features(%x: tensor<?x64xf32>, %w: tensor<64x32xf32>) {
  // expected-error @+1 {{'k3.linear' op input features mismatch: 'input' dimension 1 is 64 but 'weight' dimension 1 is 32}}
  %y = k3.linear %x, %w : (tensor<?x64xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @linear_output_features(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) {
  // expected-error @+1 {{'k3.linear' op output features mismatch: 'weight' dimension 0 is 32 but 'result' dimension 1 is 16}}
  %y = k3.linear %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x16xf32>
  return
}

// -----

func.func @add_types(%a: tensor<?x64xf32>, %b: tensor<?x64xbf16>) {
  // expected-note @-1 {{prior use here}}
  // expected-error @+1 {{use of value '%b' expects different type than prior uses: 'tensor<?x64xf32>' vs 'tensor<?x64xbf16>'}}
  %y = k3.add %a, %b : tensor<?x64xf32>
  return
}

// -----

func.func @add_types_generic(%a: tensor<?x64xf32>, %b: tensor<?x64xbf16>) {
  // expected-error @+1 {{'k3.add' op requires the same type for all operands and results}}
  %y = "k3.add"(%a, %b) : (tensor<?x64xf32>, tensor<?x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @sigmoid_gate_gate_shape(%x: tensor<?x32xf32>, %z: tensor<?x16xf32>) {
  // expected-error @+1 {{'k3.sigmoid_gate' op shape mismatch: 'input' dimension 1 is 32 but 'gate' dimension 1 is 16}}
  %y = k3.sigmoid_gate %x, %z : (tensor<?x32xf32>, tensor<?x16xf32>) -> tensor<?x32xf32>
  return
}

// -----

func.func @sigmoid_gate_result_rank(%x: tensor<?x32xf32>) {
  // expected-error @+1 {{'k3.sigmoid_gate' op expects 'input' and 'result' to have the same rank, got 2 and 3}}
  %y = k3.sigmoid_gate %x, %x : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x2x16xf32>
  return
}

// -----

func.func @short_conv_kernel_size_zero(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'kernel_size' in [1, 16], got 0}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 0 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @short_conv_kernel_size_large(%x: tensor<?x8xf32>, %w: tensor<8x1x17xf32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'kernel_size' in [1, 16], got 17}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 17 : i64}
      : (tensor<?x8xf32>, tensor<8x1x17xf32>) -> (tensor<?x8xf32>, tensor<?x8x16xf32>)
  return
}

// -----

func.func @short_conv_input_rank(%x: tensor<1x?x8xf32>, %w: tensor<8x1x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'input' to have rank 2, got 3}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<1x?x8xf32>, tensor<8x1x4xf32>) -> (tensor<1x?x8xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @short_conv_weight_rank(%x: tensor<?x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'weight' to have rank 3, got 2}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x4xf32>) -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @short_conv_state_rank(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'final_state' to have rank 3, got 2}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<8x3xf32>)
  return
}

// -----

func.func @short_conv_result_shape(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op shape mismatch: 'input' dimension 1 is 8 but 'result' dimension 1 is 4}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x4xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @short_conv_weight_channels(%x: tensor<?x8xf32>, %w: tensor<4x1x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op channel count mismatch: 'input' dimension 1 is 8 but 'weight' dimension 0 is 4}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<4x1x4xf32>) -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @short_conv_not_depthwise(%x: tensor<?x8xf32>, %w: tensor<8x2x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'weight' dimension 1 (depthwise group) to be 1, got 2}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x2x4xf32>) -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @short_conv_weight_kernel(%x: tensor<?x8xf32>, %w: tensor<8x1x3xf32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'weight' dimension 2 (kernel size) to be 4, got 3}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x3xf32>) -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @short_conv_state_channels(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op channel count mismatch: 'input' dimension 1 is 8 but 'final_state' dimension 1 is 16}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<?x16x3xf32>)
  return
}

// -----

func.func @short_conv_state_history(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'final_state' dimension 2 (kernel size - 1) to be 3, got 4}}
  %y, %s = k3.short_conv %x, %w {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>) -> (tensor<?x8xf32>, tensor<?x8x4xf32>)
  return
}

// -----

func.func @short_conv_conv_state_shape(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>, %s0: tensor<3x8x3xf32>) {
  // expected-error @+1 {{'k3.short_conv' op shape mismatch: 'conv_state' dimension 0 is 3 but 'final_state' dimension 0 is 2}}
  %y, %s = k3.short_conv %x, %w state(%s0) {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<3x8x3xf32>) -> (tensor<?x8xf32>, tensor<2x8x3xf32>)
  return
}

// -----

func.func @short_conv_cu_seqlens_rank(%x: tensor<?x8xf32>, %w: tensor<8x1x4xf32>, %cu: tensor<1x3xi32>) {
  // expected-error @+1 {{'k3.short_conv' op expects 'cu_seqlens' to have rank 1, got 2}}
  %y, %s = k3.short_conv %x, %w cu_seqlens(%cu) {kernel_size = 4 : i64}
      : (tensor<?x8xf32>, tensor<8x1x4xf32>, tensor<1x3xi32>) -> (tensor<?x8xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @argmax_logits_rank(%l: tensor<?xf32>) {
  // expected-error @+1 {{'k3.argmax' op expects 'logits' to have rank 2, got 1}}
  %i = k3.argmax %l : (tensor<?xf32>) -> tensor<?xi32>
  return
}

// -----

func.func @argmax_result_rank(%l: tensor<?x256xf32>) {
  // expected-error @+1 {{'k3.argmax' op expects 'result' to have rank 1, got 2}}
  %i = k3.argmax %l : (tensor<?x256xf32>) -> tensor<?x1xi32>
  return
}

// -----

func.func @argmax_token_count(%l: tensor<4x256xf32>) {
  // expected-error @+1 {{'k3.argmax' op token count mismatch: 'logits' dimension 0 is 4 but 'result' dimension 0 is 5}}
  %i = k3.argmax %l : (tensor<4x256xf32>) -> tensor<5xi32>
  return
}
