// RUN: not k3-opt %s -split-input-file --k3-decode-entry > %t.out 2> %t.err
// RUN: FileCheck %s --input-file=%t.out
// RUN: FileCheck %s --check-prefix=EXISTS --input-file=%t.err
// RUN: not k3-opt %s -split-input-file --k3-decode-entry --k3-kda-chunkwise | FileCheck %s --check-prefix=CHUNK
// RUN: not k3-opt %s -split-input-file --k3-decode-entry=entry=missing 2>&1 | FileCheck %s --check-prefix=MISSING

// A model with k3.kda gets a second entry, forward_decode, marked k3.decode;
// the chunkwise rewrite leaves that entry's k3.kda in the recurrent form.

// CHECK-LABEL: func.func @forward(
// CHECK:         k3.kda
// CHECK-LABEL: func.func @forward_decode(
// CHECK-SAME:    attributes {k3.decode}
// CHECK:         k3.kda

// CHUNK-LABEL: func.func @forward(
// CHUNK-NOT:     k3.kda %
// CHUNK:         k3.kda_chunk_state
// CHUNK-LABEL: func.func @forward_decode(
// CHUNK-NOT:     k3.kda_chunk
// CHUNK:         k3.kda %

// MISSING: error: k3-decode-entry: no model function 'missing'
func.func @forward(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %cu: tensor<?xi32>)
    -> tensor<1x?x2x16xf32> {
  %o, %s = k3.kda %q, %q, %q, %q, %beta cu_seqlens(%cu) {scale = 0.25 : f64}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?xi32>) -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
  return %o : tensor<1x?x2x16xf32>
}

// -----

// Without KDA both forms are the same: no second entry.

// CHECK-LABEL: func.func @forward(
// CHECK-NOT:   func.func @forward_decode
func.func @forward(%x: tensor<?x8xf32>, %w: tensor<8x8xbf16>) -> tensor<?x8xf32> {
  %y = k3.linear %x, %w : (tensor<?x8xf32>, tensor<8x8xbf16>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// A function already named like the decode entry is an error, not replaced
// (this split prints nothing, hence the `not` on the RUN lines).

// EXISTS: error: k3-decode-entry: 'forward_decode' already exists
func.func @forward(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %cu: tensor<?xi32>)
    -> tensor<1x?x2x16xf32> {
  %o, %s = k3.kda %q, %q, %q, %q, %beta cu_seqlens(%cu) {scale = 0.25 : f64}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?xi32>) -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
  return %o : tensor<1x?x2x16xf32>
}
func.func @forward_decode() {
  return
}
