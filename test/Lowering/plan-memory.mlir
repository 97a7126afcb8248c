// RUN: k3-opt %s -split-input-file --k3-outline-kernels '--k3-plan-memory=max-tokens=8 max-seqs=2 report=1' 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=REPORT < %t.err
// RUN: not k3-opt %s -split-input-file --k3-outline-kernels --k3-plan-memory=max-tokens=0 2>&1 | FileCheck %s --check-prefix=BADOPT
// RUN: not k3-opt %s -split-input-file --k3-outline-kernels --k3-plan-memory=max-seqs=-1 2>&1 | FileCheck %s --check-prefix=BADOPT
// RUN: not k3-opt %s -split-input-file --k3-outline-kernels '--k3-plan-memory=entry=nope' 2>&1 | FileCheck %s --check-prefix=NOENTRY

// BADOPT: error: max-tokens and max-seqs must be positive
// NOENTRY: error: no model function 'nope'

// A chain x -> a -> b -> c -> d of [num_tokens, 8] f32 activations (256
// bytes each at 8 tokens). Each is last read by the next launch, whose
// output therefore never overlaps it: offsets alternate 0, 256, 0, 256. The
// returned value has its own output buffer, not an arena offset.

// REPORT: k3-plan-memory: 4 activation buffers, arena 512 bytes (without reuse 1024 bytes) at 8 tokens, 2 sequences
// CHECK-LABEL: module attributes {k3.arena_bytes = 512 : i64, k3.max_seqs = 2 : i64, k3.max_tokens = 8 : i64}
// CHECK:         %[[X:.*]] = k3.launch @k3_kernels::@embedding_0({{.*}}) {k3.buffer = [0],
// CHECK:         %[[N:.*]] = k3.weight "norm"
// CHECK-NOT:     k3.buffer
// CHECK:         %[[A:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[X]], %[[N]]) {k3.buffer = [256],
// CHECK:         %[[B:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[A]], %[[N]]) {k3.buffer = [0],
// CHECK:         %[[C:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[B]], %[[N]]) {k3.buffer = [256],
// CHECK:         %[[D:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[C]], %[[N]]) {k3.shapes
// CHECK:         return %[[D]]
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"})
    -> (tensor<?x8xf32> {k3.name = "out"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %n = k3.weight "norm" : tensor<8xbf16>
  %a = k3.rms_norm %x, %n {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %b = k3.rms_norm %a, %n {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %c = k3.rms_norm %b, %n {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %d = k3.rms_norm %c, %n {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  return %d : tensor<?x8xf32>
}

// -----

// Overlapping lifetimes: x and a stay live until the adds at the end, so
// x, a, b and c need four distinct offsets; the first sum y reuses b's
// offset (b died at c's launch) but none of its inputs' (c and a). The
// state copy has its own state buffer, not an arena offset.

// REPORT: k3-plan-memory: 5 activation buffers, arena 1024 bytes (without reuse 1280 bytes) at 8 tokens, 2 sequences
// CHECK-LABEL: module attributes {k3.arena_bytes = 1024 : i64
// CHECK:         %[[X:.*]] = k3.launch @k3_kernels::@embedding_0({{.*}}) {k3.buffer = [0],
// CHECK:         %[[A:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[X]], {{.*}}) {k3.buffer = [256],
// CHECK:         %[[B:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[A]], {{.*}}) {k3.buffer = [512],
// CHECK:         %[[C:.*]] = k3.launch @k3_kernels::@rms_norm_1(%[[B]], {{.*}}) {k3.buffer = [768],
// CHECK:         %[[S:.*]] = k3.state.read "s"
// CHECK:         %[[COPY:.*]] = k3.launch @k3_kernels::@copy_2(%[[S]]) {k3.shapes
// CHECK:         k3.state.write "s", %[[COPY]]
// CHECK:         %[[Y:.*]] = k3.launch @k3_kernels::@add_3(%[[C]], %[[A]]) {k3.buffer = [512],
// CHECK:         %[[Z:.*]] = k3.launch @k3_kernels::@add_3(%[[Y]], %[[X]]) {k3.shapes
// CHECK:         return %[[Z]]
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %ctx: tensor<?xi32> {k3.name = "context_lens"})
    -> (tensor<?x8xf32> {k3.name = "out"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %n = k3.weight "norm" : tensor<8xbf16>
  %a = k3.rms_norm %x, %n {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %b = k3.rms_norm %a, %n {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %c = k3.rms_norm %b, %n {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %s = k3.state.read "s" : tensor<?x4xf32>
  k3.state.write "s", %s : tensor<?x4xf32>
  %y = k3.add %c, %a : tensor<?x8xf32>
  %z = k3.add %y, %x : tensor<?x8xf32>
  return %z : tensor<?x8xf32>
}
