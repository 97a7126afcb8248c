// RUN: k3-opt %s -split-input-file --k3-outline-kernels -verify-diagnostics | FileCheck %s

// Each computing op becomes a k3.launch of a kernel in the nested module
// @k3_kernels; weights stay in the model function. Symbolic dims: -1 is
// num_tokens, -2 num_seqs, -3 num_seqs + 1 (k3.dims on the model and kernel
// arguments, k3.shapes on every tensor result). The two rms_norms are the
// same op on the same shapes, so they share one kernel.

// CHECK-LABEL: func.func @forward
// CHECK-SAME:    %[[IDS:[^:]*]]: tensor<?xi32> {k3.dims = array<i64: -1>, k3.name = "token_ids"}
// CHECK-SAME:    %{{[^:]*}}: tensor<?xi32> {k3.dims = array<i64: -3>, k3.name = "cu_seqlens"}
// CHECK:         %[[E:.*]] = k3.weight "embed" {k3.shapes = [array<i64: 16, 8>]}
// CHECK:         %[[X:.*]] = k3.launch @k3_kernels::@embedding_0(%[[IDS]], %[[E]]) {k3.shapes = [array<i64: -1, 8>]}
// CHECK:         %[[N1:.*]] = k3.weight "norm1"
// CHECK:         %[[A:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[X]], %[[N1]])
// CHECK:         %[[N2:.*]] = k3.weight "norm2"
// CHECK:         %[[B:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[A]], %[[N2]])
// CHECK:         %[[H:.*]] = k3.weight "head"
// CHECK:         %[[L:.*]] = k3.launch @k3_kernels::@linear_2(%[[B]], %[[H]]) {k3.shapes = [array<i64: -1, 16>]}
// CHECK:         return %[[L]]
// CHECK:       module @k3_kernels attributes {k3.target = #k3.cpu_target}
// CHECK:         func.func @embedding_0(%{{.*}}: memref<i32> {k3.dims = array<i64: -1>}, %{{.*}}: memref<bf16> {k3.dims = array<i64: 16, 8>}, %{{.*}}: memref<f32> {k3.dims = array<i64: -1, 8>}, %{{.*}}: i64, %{{.*}}: i64) attributes {k3.kernel, k3.kernel_config = #k3.kernel_config<kernel = loop_nest>, k3.key = "{{[^"]*}}"}
// CHECK:           scf.parallel
// CHECK:         func.func @rms_norm_1(%{{.*}}: memref<f32> {k3.dims = array<i64: -1, 8>}, %{{.*}}: memref<bf16> {k3.dims = array<i64: 8>}, %{{.*}}: memref<f32> {k3.dims = array<i64: -1, 8>}, %{{.*}}: i64, %{{.*}}: i64) attributes {k3.kernel, k3.kernel_config = #k3.kernel_config<kernel = loop_nest>, k3.key = "{{[^"]*}}"}
// CHECK:         func.func @linear_2(
// CHECK-NOT:     func.func
module attributes {k3.vocab_size = 16 : i64} {
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %n1 = k3.weight "norm1" : tensor<8xbf16>
  %a = k3.rms_norm %x, %n1 {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %n2 = k3.weight "norm2" : tensor<8xbf16>
  %b = k3.rms_norm %a, %n2 {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %b, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}

// -----

// Different attributes (epsilon) mean different kernels.

// CHECK-LABEL: func.func @forward
// CHECK:         k3.launch @k3_kernels::@rms_norm_0
// CHECK:         k3.launch @k3_kernels::@rms_norm_1
// CHECK:       module @k3_kernels
// CHECK-COUNT-2: func.func @rms_norm_
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %x: tensor<4x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %n = k3.weight "norm" : tensor<8xbf16>
  %a = k3.rms_norm %x, %n {epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xbf16>) -> tensor<4x8xf32>
  %b = k3.rms_norm %x, %n {epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<8xbf16>) -> tensor<4x8xf32>
  return %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A state write takes its value from a dedicated copy launch (one copy
// kernel per shape, whatever the state's name), so the planner can keep
// every other value in the arena.

// CHECK-LABEL: func.func @forward
// CHECK:         %[[S:.*]] = k3.state.read "a_state" {k3.shapes = [array<i64: -2, 4, 3>]}
// CHECK:         %[[C0:.*]] = k3.launch @k3_kernels::@copy_0(%[[S]]) {k3.shapes = [array<i64: -2, 4, 3>]}
// CHECK:         k3.state.write "a_state", %[[C0]]
// CHECK:         %[[T:.*]] = k3.state.read "b_state"
// CHECK:         %[[C1:.*]] = k3.launch @k3_kernels::@copy_0(%[[T]])
// CHECK:         k3.state.write "b_state", %[[C1]]
// CHECK:       module @k3_kernels
// CHECK:         func.func @copy_0(%{{.*}}: memref<f32> {k3.dims = array<i64: -2, 4, 3>}, %{{.*}}: memref<f32> {k3.dims = array<i64: -2, 4, 3>}, %{{.*}}: i64, %{{.*}}: i64)
// CHECK-NOT:     func.func
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %ctx: tensor<?xi32> {k3.name = "context_lens"}) {
  %s = k3.state.read "a_state" : tensor<?x4x3xf32>
  k3.state.write "a_state", %s : tensor<?x4x3xf32>
  %t = k3.state.read "b_state" : tensor<?x4x3xf32>
  k3.state.write "b_state", %t : tensor<?x4x3xf32>
  return
}

// -----

// The model function must be straight-line code: k3.layer templates are
// inlined first (k3-inline-layers).

// expected-error @+1 {{'func.func' op model function must be a single block (run --k3-inline-layers first)}}
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}) {
  cf.br ^bb1
^bb1:
  return
}

// -----

// expected-error @+1 {{no model function 'forward'}}
module {
  func.func @model() {
    return
  }
}

// -----

func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'arith.addf' op is not supported in a K3 model function}}
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Dynamic sizes are num_tokens or num_seqs, known through the argument names.

// expected-error @+1 {{'func.func' op dynamic model argument 1 needs k3.name = "token_ids", "cu_seqlens" or "context_lens"}}
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %x: tensor<?x8xf32>) {
  return
}
