// RUN: k3-opt %s -split-input-file --k3-moe-grouped | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-moe-grouped="tile-rows=64" | FileCheck %s --check-prefix=TILE64
// RUN: k3-opt %s -split-input-file --k3-moe-grouped="decode-tile-rows=0" | FileCheck %s --check-prefix=FUSED
// RUN: not k3-opt %s -split-input-file --k3-moe-grouped="decode-tile-rows=-1" 2>&1 | FileCheck %s --check-prefix=BADDECODE

// A prefill k3.moe_experts (8 experts, top-2) becomes the dispatch, the two
// grouped GEMMs and the combine: h and the weighted rows in the
// activations' type, the combine typed as the op was.

// CHECK-LABEL: func.func @prefill
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x32xbf16>, %[[I:[^:]*]]: tensor<?x2xi32>, %[[P:[^:]*]]: tensor<?x2xf32>, %[[W1:[^:]*]]: tensor<8x16x32xbf16>, %[[W3:[^:]*]]: tensor<8x16x32xbf16>, %[[W2:[^:]*]]: tensor<8x32x16xbf16>)
// CHECK-NOT:     k3.moe_experts
// CHECK:         %[[SRC:.*]], %[[POS:.*]], %[[OFF:.*]], %[[TILES:.*]] = k3.moe_dispatch %[[I]] {num_experts = 8 : i64, tile_rows = 128 : i64}
// CHECK-SAME:      -> (tensor<?x2xi32>, tensor<?x2xi32>, tensor<9xi32>, tensor<9xi32>)
// CHECK:         %[[H:.*]] = k3.moe_grouped_glu silu %[[X]], %[[I]], %[[SRC]], %[[OFF]], %[[TILES]], %[[W1]], %[[W3]]
// CHECK-SAME:      -> tensor<?x2x16xbf16>
// CHECK:         %[[Y:.*]] = k3.moe_grouped_down %[[H]], %[[I]], %[[SRC]], %[[OFF]], %[[TILES]], %[[P]], %[[W2]]
// CHECK-SAME:      -> tensor<?x2x32xbf16>
// CHECK:         %[[R:.*]] = k3.moe_combine %[[Y]], %[[POS]]
// CHECK-SAME:      -> tensor<?x32xbf16>
// CHECK:         return %[[R]]
// TILE64-LABEL: func.func @prefill
// TILE64:         k3.moe_dispatch {{.*}}tile_rows = 64 : i64
func.func @prefill(%x: tensor<?x32xbf16>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>,
    %w1: tensor<8x16x32xbf16>, %w3: tensor<8x16x32xbf16>, %w2: tensor<8x32x16xbf16>) -> tensor<?x32xbf16> {
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xbf16>, tensor<8x16x32xbf16>, tensor<8x32x16xbf16>) -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}

// -----

// SiTU keeps its parameters on the gate/up GEMM.

// CHECK-LABEL: func.func @situ
// CHECK:         k3.moe_grouped_glu situ {{.*}} {beta = 2.000000e+00 : f64, linear_beta = 3.000000e+00 : f64}
func.func @situ(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>,
    %w1: tensor<8x16x32xf32>, %w3: tensor<8x16x32xf32>, %w2: tensor<8x32x16xf32>) -> tensor<?x32xf32> {
  %y = k3.moe_experts situ %x, %i, %p, %w1, %w3, %w2 {beta = 2.0 : f64, linear_beta = 3.0 : f64}
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xf32>, tensor<8x16x32xf32>, tensor<8x32x16xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// A decode step is grouped too, in tiles of decode-tile-rows (4) rows:
// each touched expert's weights are read once per 4 of its rows, not once
// per token that chose it. decode-tile-rows=0 keeps the fused op there.

// CHECK-LABEL: func.func @forward_decode
// CHECK-NOT:     k3.moe_experts
// CHECK:         k3.moe_dispatch {{.*}}{num_experts = 8 : i64, tile_rows = 4 : i64}
// CHECK:         k3.moe_grouped_glu
// CHECK:         k3.moe_grouped_down
// CHECK:         k3.moe_combine
// TILE64-LABEL: func.func @forward_decode
// TILE64:         k3.moe_dispatch {{.*}}tile_rows = 4 : i64
// FUSED-LABEL: func.func @forward_decode
// FUSED-NOT:     k3.moe_dispatch
// FUSED:         k3.moe_experts
// BADDECODE: error: k3-moe-grouped: decode-tile-rows must be >= 0, got -1
func.func @forward_decode(%x: tensor<?x32xf32>, %i: tensor<?x2xi32>, %p: tensor<?x2xf32>,
    %w1: tensor<8x16x32xf32>, %w3: tensor<8x16x32xf32>, %w2: tensor<8x32x16xf32>) -> tensor<?x32xf32> attributes {k3.decode} {
  %y = k3.moe_experts silu %x, %i, %p, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x16x32xf32>, tensor<8x16x32xf32>, tensor<8x32x16xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
