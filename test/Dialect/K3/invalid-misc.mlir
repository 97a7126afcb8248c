// RUN: k3-opt %s -split-input-file -verify-diagnostics

// Verifier diagnostics of k3.attn_res_mix, k3.attn_res_push and k3.layer
// (whose callee is checked against the template's function type).

func.func @mix_blocks_rank(%b: tensor<?x64xf32>, %p: tensor<?x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<1x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op expects 'blocks' to have rank 3, got 2}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mix_partial_rank(%b: tensor<?x?x64xf32>, %p: tensor<1x?x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<1x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op expects 'partial' to have rank 2, got 3}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<1x?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mix_norm_weight_rank(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>, %nw: tensor<1x64xbf16>, %pw: tensor<1x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op expects 'norm_weight' to have rank 1, got 2}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<1x64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mix_proj_weight_rank(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op expects 'proj_weight' to have rank 2, got 1}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mix_result_shape(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<1x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op shape mismatch: 'partial' dimension 1 is 64 but 'result' dimension 1 is 32}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x32xf32>
  return
}

// -----

func.func @mix_tokens(%b: tensor<2x3x64xf32>, %p: tensor<4x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<1x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op token count mismatch: 'blocks' dimension 1 is 3 but 'partial' dimension 0 is 4}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<2x3x64xf32>, tensor<4x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<4x64xf32>
  return
}

// -----

func.func @mix_blocks_hidden(%b: tensor<?x?x32xf32>, %p: tensor<?x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<1x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op hidden size mismatch: 'blocks' dimension 2 is 32 but 'partial' dimension 1 is 64}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x32xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mix_norm_hidden(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>, %nw: tensor<32xbf16>, %pw: tensor<1x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op hidden size mismatch: 'norm_weight' dimension 0 is 32 but 'partial' dimension 1 is 64}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<32xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mix_pseudo_queries(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<2x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op expects 'proj_weight' dimension 0 (pseudo-query count) to be 1, got 2}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<2x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mix_proj_hidden(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<1x32xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op hidden size mismatch: 'proj_weight' dimension 1 is 32 but 'partial' dimension 1 is 64}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x32xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @mix_epsilon(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>, %nw: tensor<64xbf16>, %pw: tensor<1x64xbf16>) {
  // expected-error @+1 {{'k3.attn_res_mix' op expects 'epsilon' to be positive, got 0}}
  %y = k3.attn_res_mix %b, %p, %nw, %pw {epsilon = 0.0 : f64}
      : (tensor<?x?x64xf32>, tensor<?x64xf32>, tensor<64xbf16>, tensor<1x64xbf16>) -> tensor<?x64xf32>
  return
}

// -----

func.func @push_blocks_rank(%b: tensor<?x64xf32>, %p: tensor<?x64xf32>) {
  // expected-error @+1 {{'k3.attn_res_push' op expects 'blocks' to have rank 3, got 2}}
  %y = k3.attn_res_push %b, %p : (tensor<?x64xf32>, tensor<?x64xf32>) -> tensor<?x?x64xf32>
  return
}

// -----

func.func @push_partial_rank(%b: tensor<?x?x64xf32>, %p: tensor<1x?x64xf32>) {
  // expected-error @+1 {{'k3.attn_res_push' op expects 'partial' to have rank 2, got 3}}
  %y = k3.attn_res_push %b, %p : (tensor<?x?x64xf32>, tensor<1x?x64xf32>) -> tensor<?x?x64xf32>
  return
}

// -----

func.func @push_result_rank(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>) {
  // expected-error @+1 {{'k3.attn_res_push' op expects 'result' to have rank 3, got 2}}
  %y = k3.attn_res_push %b, %p : (tensor<?x?x64xf32>, tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

func.func @push_tokens(%b: tensor<1x3x64xf32>, %p: tensor<4x64xf32>) {
  // expected-error @+1 {{'k3.attn_res_push' op token count mismatch: 'blocks' dimension 1 is 3 but 'partial' dimension 0 is 4}}
  %y = k3.attn_res_push %b, %p : (tensor<1x3x64xf32>, tensor<4x64xf32>) -> tensor<?x?x64xf32>
  return
}

// -----

func.func @push_hidden(%b: tensor<1x?x32xf32>, %p: tensor<?x64xf32>) {
  // expected-error @+1 {{'k3.attn_res_push' op hidden size mismatch: 'blocks' dimension 2 is 32 but 'partial' dimension 1 is 64}}
  %y = k3.attn_res_push %b, %p : (tensor<1x?x32xf32>, tensor<?x64xf32>) -> tensor<?x?x64xf32>
  return
}

// -----

func.func @push_result_tokens(%b: tensor<?x?x64xf32>, %p: tensor<4x64xf32>) {
  // expected-error @+1 {{'k3.attn_res_push' op token count mismatch: 'result' dimension 1 is 5 but 'partial' dimension 0 is 4}}
  %y = k3.attn_res_push %b, %p : (tensor<?x?x64xf32>, tensor<4x64xf32>) -> tensor<?x5x64xf32>
  return
}

// -----

func.func @push_result_hidden(%b: tensor<?x?x64xf32>, %p: tensor<?x64xf32>) {
  // expected-error @+1 {{'k3.attn_res_push' op hidden size mismatch: 'result' dimension 2 is 32 but 'partial' dimension 1 is 64}}
  %y = k3.attn_res_push %b, %p : (tensor<?x?x64xf32>, tensor<?x64xf32>) -> tensor<?x?x32xf32>
  return
}

// -----

func.func @push_block_count(%b: tensor<2x?x64xf32>, %p: tensor<?x64xf32>) {
  // expected-error @+1 {{'k3.attn_res_push' op expects the result to hold 3 blocks, got 2}}
  %y = k3.attn_res_push %b, %p : (tensor<2x?x64xf32>, tensor<?x64xf32>) -> tensor<2x?x64xf32>
  return
}

// -----

func.func private @tpl(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  return %x, %x : tensor<?x64xf32>, tensor<?x64xf32>
}

func.func @layer_missing_template(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.layer' op 'nowhere' does not name a func.func layer template}}
  %a:2 = k3.layer @nowhere("model.layers.0.")(%x, %cu) : (tensor<?x64xf32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  return
}

// -----

memref.global "private" @g : memref<4xf32>

func.func private @tpl(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  return %x, %x : tensor<?x64xf32>, tensor<?x64xf32>
}

func.func @layer_not_a_func(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.layer' op 'g' does not name a func.func layer template}}
  %a:2 = k3.layer @g("model.layers.0.")(%x, %cu) : (tensor<?x64xf32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  return
}

// -----

func.func private @tpl(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  return %x, %x : tensor<?x64xf32>, tensor<?x64xf32>
}

func.func @layer_arg_count(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.layer' op passes 1 arguments to 'tpl', which takes 2}}
  %a:2 = k3.layer @tpl("model.layers.0.")(%x) : (tensor<?x64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  return
}

// -----

func.func private @tpl(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  return %x, %x : tensor<?x64xf32>, tensor<?x64xf32>
}

func.func @layer_arg_type(%x: tensor<?x64xf32>, %cu: tensor<3xi32>) {
  // expected-error @+1 {{'k3.layer' op argument 1 has type 'tensor<3xi32>' but 'tpl' expects 'tensor<?xi32>'}}
  %a:2 = k3.layer @tpl("model.layers.0.")(%x, %cu) : (tensor<?x64xf32>, tensor<3xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>)
  return
}

// -----

func.func private @tpl(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  return %x, %x : tensor<?x64xf32>, tensor<?x64xf32>
}

func.func @layer_result_count(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.layer' op expects 1 results but 'tpl' returns 2}}
  %a = k3.layer @tpl("model.layers.0.")(%x, %cu) : (tensor<?x64xf32>, tensor<?xi32>) -> tensor<?x64xf32>
  return
}

// -----

func.func private @tpl(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  return %x, %x : tensor<?x64xf32>, tensor<?x64xf32>
}

func.func @layer_result_type(%x: tensor<?x64xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{'k3.layer' op result 1 has type 'tensor<4x64xf32>' but 'tpl' returns 'tensor<?x64xf32>'}}
  %a:2 = k3.layer @tpl("model.layers.0.")(%x, %cu) : (tensor<?x64xf32>, tensor<?xi32>) -> (tensor<?x64xf32>, tensor<4x64xf32>)
  return
}
