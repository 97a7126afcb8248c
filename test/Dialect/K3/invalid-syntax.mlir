// RUN: not k3-opt %s -split-input-file 2>&1 | FileCheck %s

// Malformed IR and unknown ops are rejected with a located diagnostic
// (file:line:col) and a non-zero exit status, not a crash or silent output.
// Each chunk below is parsed on its own; `not` checks the exit status.

// Missing `:` before the result type of k3.weight.
func.func @missing_colon() {
  // CHECK: invalid-syntax.mlir:[[@LINE+1]]:34: error: expected ':'
  %w = k3.weight "lm_head.weight"  tensor<4x4xf32>
  return
}

// -----

// The weight name must be a string literal.
func.func @unquoted_name() {
  // CHECK: invalid-syntax.mlir:[[@LINE+1]]:17: error: expected attribute value
  %w = k3.weight lm_head.weight : tensor<4x4xf32>
  return
}

// -----

// An unknown enum case of k3.glu_mlp.
func.func @bad_activation(%x: tensor<?x64xf32>, %wg: tensor<96x64xbf16>, %wd: tensor<64x96xbf16>) {
  // CHECK: invalid-syntax.mlir:[[@LINE+2]]:19: error: custom op 'k3.glu_mlp' expected ::mlir::k3::GLUActivation to be one of: silu, situ
  // CHECK: invalid-syntax.mlir:[[@LINE+1]]:24: error: custom op 'k3.glu_mlp' failed to parse K3_GLUActivationAttr
  %y = k3.glu_mlp gelu %x, %wg, %wg, %wd
      : (tensor<?x64xf32>, tensor<96x64xbf16>, tensor<96x64xbf16>, tensor<64x96xbf16>) -> tensor<?x64xf32>
  return
}

// -----

// gate_params takes two operands.
func.func @gate_params_arity(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %a: tensor<2xf32>) {
  // CHECK: invalid-syntax.mlir:[[@LINE+1]]:55: error: expected ','
  %o, %s = k3.kda %q, %q, %q, %q, %beta gate_params(%a) {scale = 0.25 : f64}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<2xf32>) -> (tensor<1x?x2x16xf32>, tensor<1x2x16x16xf32>)
  return
}

// -----

// An op the k3 dialect does not define.
func.func @unknown_op(%x: tensor<?x64xf32>) {
  // CHECK: invalid-syntax.mlir:[[@LINE+1]]:8: error: custom op 'k3.softmax' is unknown
  %y = k3.softmax %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

// The same in generic form: unregistered ops are refused too.
func.func @unknown_op_generic(%x: tensor<?x64xf32>) {
  // CHECK: invalid-syntax.mlir:[[@LINE+1]]:8: error: unregistered operation 'k3.softmax' found in dialect ('k3') that does not allow unknown operations
  %y = "k3.softmax"(%x) : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return
}

// -----

// A valid chunk is still processed after the bad ones.
// CHECK-LABEL: func.func @valid
// CHECK: k3.weight "lm_head.weight" : tensor<4x4xf32>
func.func @valid() -> tensor<4x4xf32> {
  %w = k3.weight "lm_head.weight" : tensor<4x4xf32>
  return %w : tensor<4x4xf32>
}
