// RUN: k3-opt %s -split-input-file --k3-group-short-convs | FileCheck %s

// In the decode entry (k3.decode) the short convs whose inputs come from
// one op (here a k3.linear_group), with the same sequences and kernel
// size, become one k3.short_conv_group at the last of them; results and
// final states keep their uses. A conv of another op's result stays.

// CHECK-LABEL: func.func @forward_decode
// CHECK:         %[[G:.*]]:3 = k3.linear_group
// CHECK-NOT:     k3.short_conv %[[G]]
// CHECK:         %[[R:.*]]:3, %[[F:.*]]:3 = k3.short_conv_group(%[[G]]#0, %[[G]]#1, %[[G]]#2) weights(%{{.*}}, %{{.*}}, %{{.*}}) state(%{{.*}}, %{{.*}}, %{{.*}}) cu_seqlens(%{{.*}}) {kernel_size = 4 : i64}
// CHECK-SAME:      -> (tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x64x3xf32>, tensor<?x64x3xf32>, tensor<?x32x3xf32>)
// CHECK:         k3.state.write "q", %[[F]]#0
// CHECK:         k3.state.write "k", %[[F]]#1
// CHECK:         k3.state.write "v", %[[F]]#2
// CHECK:         k3.short_conv %{{.*}}, %{{.*}} state
// CHECK:         return %[[R]]#0, %[[R]]#1, %[[R]]#2
func.func @forward_decode(%x: tensor<?x16xbf16>, %cu: tensor<?xi32>)
    -> (tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>)
    attributes {k3.decode} {
  %wq = k3.weight "wq" : tensor<64x16xbf16>
  %wk = k3.weight "wk" : tensor<64x16xbf16>
  %wv = k3.weight "wv" : tensor<32x16xbf16>
  %g:3 = k3.linear_group %x, %wq, %wk, %wv : (tensor<?x16xbf16>, tensor<64x16xbf16>, tensor<64x16xbf16>, tensor<32x16xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x32xbf16>)
  %cq = k3.weight "cq" : tensor<64x1x4xf32>
  %ck = k3.weight "ck" : tensor<64x1x4xf32>
  %cv = k3.weight "cv" : tensor<32x1x4xf32>
  %sq = k3.state.read "q" : tensor<?x64x3xf32>
  %sk = k3.state.read "k" : tensor<?x64x3xf32>
  %sv = k3.state.read "v" : tensor<?x32x3xf32>
  %q, %fq = k3.short_conv %g#0, %cq state(%sq) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  %k, %fk = k3.short_conv %g#1, %ck state(%sk) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  %v, %fv = k3.short_conv %g#2, %cv state(%sv) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x32xbf16>, tensor<32x1x4xf32>, tensor<?x32x3xf32>, tensor<?xi32>) -> (tensor<?x32xbf16>, tensor<?x32x3xf32>)
  k3.state.write "q", %fq : tensor<?x64x3xf32>
  k3.state.write "k", %fk : tensor<?x64x3xf32>
  k3.state.write "v", %fv : tensor<?x32x3xf32>
  %sw = k3.state.read "w" : tensor<?x32x3xf32>
  %x2 = k3.linear %x, %wv : (tensor<?x16xbf16>, tensor<32x16xbf16>) -> tensor<?x32xbf16>
  %w, %fw = k3.short_conv %x2, %cv state(%sw) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x32xbf16>, tensor<32x1x4xf32>, tensor<?x32x3xf32>, tensor<?xi32>) -> (tensor<?x32xbf16>, tensor<?x32x3xf32>)
  k3.state.write "w", %fw : tensor<?x32x3xf32>
  return %q, %k, %v, %w : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>
}

// -----

// A member used before the last conv stays a k3.short_conv; the other two
// form the group.
// CHECK-LABEL: func.func @forward_decode
// CHECK:         %[[Q:.*]], %{{.*}} = k3.short_conv
// CHECK:         k3.add %[[Q]], %[[Q]]
// CHECK:         k3.short_conv_group(%{{.*}}#1, %{{.*}}#2)
func.func @forward_decode(%x: tensor<?x16xbf16>, %cu: tensor<?xi32>, %s: tensor<?x64x3xf32>)
    -> (tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>)
    attributes {k3.decode} {
  %wq = k3.weight "wq" : tensor<64x16xbf16>
  %c = k3.weight "c" : tensor<64x1x4xf32>
  %g:3 = k3.linear_group %x, %wq, %wq, %wq : (tensor<?x16xbf16>, tensor<64x16xbf16>, tensor<64x16xbf16>, tensor<64x16xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>)
  %q, %fq = k3.short_conv %g#0, %c state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  %q2 = k3.add %q, %q : tensor<?x64xbf16>
  %k, %fk = k3.short_conv %g#1, %c state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  %v, %fv = k3.short_conv %g#2, %c state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  return %q2, %k, %v : tensor<?x64xbf16>, tensor<?x64xbf16>, tensor<?x64xbf16>
}

// -----

// The prefill entry keeps its convs.
// CHECK-LABEL: func.func @forward
// CHECK-NOT:     k3.short_conv_group
// CHECK-COUNT-2: k3.short_conv %
func.func @forward(%x: tensor<?x16xbf16>, %cu: tensor<?xi32>, %s: tensor<?x64x3xf32>)
    -> (tensor<?x64xbf16>, tensor<?x64xbf16>) {
  %wq = k3.weight "wq" : tensor<64x16xbf16>
  %c = k3.weight "c" : tensor<64x1x4xf32>
  %g:2 = k3.linear_group %x, %wq, %wq : (tensor<?x16xbf16>, tensor<64x16xbf16>, tensor<64x16xbf16>) -> (tensor<?x64xbf16>, tensor<?x64xbf16>)
  %q, %fq = k3.short_conv %g#0, %c state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  %k, %fk = k3.short_conv %g#1, %c state(%s) cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x64xbf16>, tensor<64x1x4xf32>, tensor<?x64x3xf32>, tensor<?xi32>) -> (tensor<?x64xbf16>, tensor<?x64x3xf32>)
  return %q, %k : tensor<?x64xbf16>, tensor<?x64xbf16>
}
