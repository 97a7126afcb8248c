// RUN: k3-opt %s -split-input-file --k3-group-linears | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-group-linears=prefill=1 | FileCheck %s --check-prefix=PREFILL

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

// The prefill entry keeps its linears by default. With prefill=1 (the CUDA
// pipeline) the ones with the wgmma GEMM's tiles (bf16, K % 64 = 0, N % 8
// = 0) become one group; K = 32 or an f32 input keeps its linears.
// CHECK-LABEL: func.func @forward
// CHECK-NOT:     k3.linear_group
// CHECK-COUNT-2: k3.linear %
// PREFILL-LABEL: func.func @forward
// PREFILL:         k3.linear %{{.*}} : (tensor<?x32xbf16>, tensor<64x32xbf16>)
// PREFILL:         k3.linear %{{.*}} : (tensor<?x32xbf16>, tensor<16x32xbf16>)
// PREFILL:         %[[G:.*]]:2 = k3.linear_group %{{.*}}, %{{.*}}, %{{.*}} : (tensor<?x64xbf16>, tensor<64x64xbf16>, tensor<16x64xbf16>)
// PREFILL-SAME:      -> (tensor<?x64xbf16>, tensor<?x16xf32>)
// PREFILL:         k3.linear %{{.*}} : (tensor<?x64xf32>, tensor<64x64xbf16>)
// PREFILL:         k3.linear %{{.*}} : (tensor<?x64xf32>, tensor<16x64xbf16>)
func.func @forward(%x: tensor<?x32xbf16>, %w1: tensor<64x32xbf16>, %w2: tensor<16x32xbf16>,
                   %y: tensor<?x64xbf16>, %w3: tensor<64x64xbf16>, %w4: tensor<16x64xbf16>,
                   %z: tensor<?x64xf32>)
    -> (tensor<?x64xbf16>, tensor<?x16xbf16>, tensor<?x64xbf16>, tensor<?x16xf32>,
        tensor<?x64xf32>, tensor<?x16xf32>) {
  %a = k3.linear %x, %w1 : (tensor<?x32xbf16>, tensor<64x32xbf16>) -> tensor<?x64xbf16>
  %b = k3.linear %x, %w2 : (tensor<?x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %c = k3.linear %y, %w3 : (tensor<?x64xbf16>, tensor<64x64xbf16>) -> tensor<?x64xbf16>
  %d = k3.linear %y, %w4 : (tensor<?x64xbf16>, tensor<16x64xbf16>) -> tensor<?x16xf32>
  %e = k3.linear %z, %w3 : (tensor<?x64xf32>, tensor<64x64xbf16>) -> tensor<?x64xf32>
  %f = k3.linear %z, %w4 : (tensor<?x64xf32>, tensor<16x64xbf16>) -> tensor<?x16xf32>
  return %a, %b, %c, %d, %e, %f : tensor<?x64xbf16>, tensor<?x16xbf16>, tensor<?x64xbf16>, tensor<?x16xf32>,
      tensor<?x64xf32>, tensor<?x16xf32>
}

// -----

// A lone linear stays a k3.linear.
// CHECK-LABEL: func.func @lone
// PREFILL-LABEL: func.func @lone
// CHECK-NOT:     k3.linear_group
// CHECK:         k3.linear %
func.func @lone(%x: tensor<?x32xf32>, %w: tensor<64x32xf32>) -> tensor<?x64xf32>
    attributes {k3.decode} {
  %a = k3.linear %x, %w : (tensor<?x32xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
  return %a : tensor<?x64xf32>
}
