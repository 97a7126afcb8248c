// RUN: k3-opt %s -split-input-file --k3-group-linears | FileCheck %s

// In the decode entry (k3.decode) the linears of one input become one
// k3.linear_group at the first of them, weights in block order; each
// result keeps its element type and its uses. A linear of another input
// stays; a weight defined after the first member moves before the group.

// CHECK-LABEL: func.func @forward_decode
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x32xbf16>, %[[Z:[^:]*]]: tensor<?x32xbf16>)
// CHECK-DAG:     %[[WQ:.*]] = k3.weight "q" : tensor<64x32xbf16>
// CHECK-DAG:     %[[WK:.*]] = k3.weight "k" : tensor<16x32xbf16>
// CHECK-DAG:     %[[WR:.*]] = k3.weight "r" : tensor<8x32xbf16>
// CHECK-NOT:     k3.linear %[[X]]
// CHECK:         %[[G:.*]]:3 = k3.linear_group %[[X]], %[[WQ]], %[[WK]], %[[WR]]
// CHECK-SAME:      : (tensor<?x32xbf16>, tensor<64x32xbf16>, tensor<16x32xbf16>, tensor<8x32xbf16>)
// CHECK-SAME:      -> (tensor<?x64xbf16>, tensor<?x16xbf16>, tensor<?x8xf32>)
// CHECK:         k3.add %[[G]]#0, %[[G]]#0
// CHECK:         %[[O:.*]] = k3.linear %[[Z]], %{{.*}} : (tensor<?x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
// CHECK:         return %{{.*}}, %[[G]]#1, %[[G]]#2, %[[O]]
func.func @forward_decode(%x: tensor<?x32xbf16>, %z: tensor<?x32xbf16>)
    -> (tensor<?x64xbf16>, tensor<?x16xbf16>, tensor<?x8xf32>, tensor<?x16xbf16>)
    attributes {k3.decode} {
  %wq = k3.weight "q" : tensor<64x32xbf16>
  %wk = k3.weight "k" : tensor<16x32xbf16>
  %q = k3.linear %x, %wq : (tensor<?x32xbf16>, tensor<64x32xbf16>) -> tensor<?x64xbf16>
  %q2 = k3.add %q, %q : tensor<?x64xbf16>
  %k = k3.linear %x, %wk : (tensor<?x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %o = k3.linear %z, %wk : (tensor<?x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %wr = k3.weight "r" : tensor<8x32xbf16>
  %r = k3.linear %x, %wr : (tensor<?x32xbf16>, tensor<8x32xbf16>) -> tensor<?x8xf32>
  return %q2, %k, %r, %o : tensor<?x64xbf16>, tensor<?x16xbf16>, tensor<?x8xf32>, tensor<?x16xbf16>
}

// -----

// The prefill entry keeps its linears: they run on the tensor-core GEMM.
// CHECK-LABEL: func.func @forward
// CHECK-NOT:     k3.linear_group
// CHECK-COUNT-2: k3.linear %
func.func @forward(%x: tensor<?x32xbf16>, %w1: tensor<64x32xbf16>, %w2: tensor<16x32xbf16>)
    -> (tensor<?x64xbf16>, tensor<?x16xbf16>) {
  %a = k3.linear %x, %w1 : (tensor<?x32xbf16>, tensor<64x32xbf16>) -> tensor<?x64xbf16>
  %b = k3.linear %x, %w2 : (tensor<?x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return %a, %b : tensor<?x64xbf16>, tensor<?x16xbf16>
}

// -----

// A lone linear stays a k3.linear.
// CHECK-LABEL: func.func @lone
// CHECK-NOT:     k3.linear_group
// CHECK:         k3.linear %
func.func @lone(%x: tensor<?x32xf32>, %w: tensor<64x32xf32>) -> tensor<?x64xf32>
    attributes {k3.decode} {
  %a = k3.linear %x, %w : (tensor<?x32xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}
