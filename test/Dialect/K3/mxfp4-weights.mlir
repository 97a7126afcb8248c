// RUN: k3-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// MXFP4 weights (f4E2M1FN): k3.weight and the routed expert ops take them;
// the last dimension holds whole 32-element scale blocks; gate and up share
// one storage type; ops without an MXFP4 reader refuse them by type.

// CHECK-LABEL: func.func @experts_mxfp4
// CHECK: k3.weight "model.layers.1.mlp.experts.{expert}.w1.weight" : tensor<8x32x64xf4E2M1FN>
// CHECK: k3.moe_experts silu {{.*}} tensor<8x32x64xf4E2M1FN>, tensor<8x32x64xf4E2M1FN>, tensor<8x64x32xf4E2M1FN>) -> tensor<?x64xbf16>
func.func @experts_mxfp4(%x: tensor<?x64xbf16>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>) -> tensor<?x64xbf16> {
  %w1 = k3.weight "model.layers.1.mlp.experts.{expert}.w1.weight" : tensor<8x32x64xf4E2M1FN>
  %w3 = k3.weight "model.layers.1.mlp.experts.{expert}.w3.weight" : tensor<8x32x64xf4E2M1FN>
  %w2 = k3.weight "model.layers.1.mlp.experts.{expert}.w2.weight" : tensor<8x64x32xf4E2M1FN>
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x32x64xf4E2M1FN>, tensor<8x32x64xf4E2M1FN>, tensor<8x64x32xf4E2M1FN>) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

func.func @weight_partial_block() {
  // expected-error @+1 {{'k3.weight' op expects the last dimension of MXFP4 weight 'result' to be a static multiple of 32 (one E8M0 scale per 32 elements), got 'tensor<8x32x48xf4E2M1FN>'}}
  %w1 = k3.weight "model.layers.1.mlp.experts.{expert}.w1.weight" : tensor<8x32x48xf4E2M1FN>
  return
}

// -----

func.func @experts_mixed_gate_up(%x: tensor<?x64xbf16>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x32x64xf4E2M1FN>, %w3: tensor<8x32x64xbf16>, %w2: tensor<8x64x32xf4E2M1FN>) {
  // expected-error @+1 {{'k3.moe_experts' op expects 'w1' and 'w3' to have the same element type, got 'f4E2M1FN' and 'bf16'}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x32x64xf4E2M1FN>, tensor<8x32x64xbf16>, tensor<8x64x32xf4E2M1FN>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @experts_down_partial_block(%x: tensor<?x64xbf16>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>, %w1: tensor<8x48x64xf4E2M1FN>, %w2: tensor<8x64x48xf4E2M1FN>) {
  // expected-error @+1 {{'k3.moe_experts' op expects the last dimension of MXFP4 weight 'w2' to be a static multiple of 32}}
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w1, %w2
      : (tensor<?x64xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x48x64xf4E2M1FN>, tensor<8x48x64xf4E2M1FN>, tensor<8x64x48xf4E2M1FN>) -> tensor<?x64xbf16>
  return
}

// -----

func.func @linear_refuses_mxfp4(%x: tensor<?x64xbf16>, %w: tensor<32x64xf4E2M1FN>) {
  // expected-error @+1 {{'k3.linear' op operand #1 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %y = k3.linear %x, %w : (tensor<?x64xbf16>, tensor<32x64xf4E2M1FN>) -> tensor<?x32xbf16>
  return
}
