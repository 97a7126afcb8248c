// RUN: k3-opt %s -split-input-file --k3-kda-chunkwise | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-kda-chunkwise="chunk-size=32 num-segments=3" | FileCheck %s --check-prefix=SEG
// RUN: k3-opt %s -split-input-file --k3-kda-chunkwise="decay-form=pairwise" | FileCheck %s --check-prefix=PAIR
// RUN: not k3-opt %s -split-input-file --k3-kda-chunkwise="decay-form=tile-factored" 2>&1 | FileCheck %s --check-prefix=FACT
// RUN: not k3-opt %s --k3-kda-chunkwise="chunk-size=24" 2>&1 | FileCheck %s --check-prefix=BADCHUNK
// RUN: not k3-opt %s --k3-kda-chunkwise="tile-size=12 chunk-size=48" 2>&1 | FileCheck %s --check-prefix=BADTILE

// BADCHUNK: chunk-size must be a positive multiple of 16 (the tile size), got 24
// BADTILE: tile-size must be a power of two dividing chunk-size 48, got 12

// The lower-bounded in-op gate: the Gram ops carry gate_lower_bound (the
// tile-factored exponent); the chain is prepare -> gram(I + BL) -> two
// tri_solves (U, W) -> gram(M) -> state -> output, all token-indexed.

// CHECK-LABEL: func.func @lower_bounded
// CHECK-NOT:     k3.kda %
// CHECK:         %[[QS:.*]], %[[KN:.*]], %[[G:.*]], %[[KG:.*]], %[[B:.*]] = k3.kda_chunk_prepare %{{.*}} cu_seqlens(%[[CU:.*]]) gate_params(
// CHECK-SAME:      chunk_size = 64 : i64, gate_kind = #k3<decay_gate lower_bounded_sigmoid>
// CHECK:         %[[A:.*]] = k3.kda_chunk_gram %[[KN]], %[[KN]], %[[G]] row_scale(%[[B]]) cu_seqlens(%[[CU]])
// CHECK-SAME:      gate_lower_bound = -5.000000e+00 : f64, strict, tile_size = 16 : i64, unit_diagonal
// CHECK-SAME:      -> tensor<1x?x2x64xf32>
// CHECK:         %[[U:.*]] = k3.tri_solve %[[A]], %{{.*}} row_scale(%[[B]]) cu_seqlens(%[[CU]]) {chunk_size = 64 : i64, mode = "forward"}
// CHECK:         %[[W:.*]] = k3.tri_solve %[[A]], %[[KG]] row_scale(%[[B]])
// CHECK:         %[[M:.*]] = k3.kda_chunk_gram %[[QS]], %[[KN]], %[[G]] cu_seqlens(%[[CU]]) {chunk_size = 64 : i64, gate_lower_bound = -5.000000e+00 : f64, tile_size = 16 : i64}
// CHECK:         %[[VN:.*]], %[[OI:.*]], %[[FS:.*]] = k3.kda_chunk_state %[[U]], %[[W]], %[[KN]], %[[QS]], %[[G]] initial_state(%{{.*}}) cu_seqlens(%[[CU]])
// CHECK:         %[[O:.*]] = k3.kda_chunk_output %[[M]], %[[VN]], %[[OI]] cu_seqlens(%[[CU]])
// CHECK:         return %[[O]], %[[FS]]

// SEG-LABEL: func.func @lower_bounded
// SEG:         k3.kda_chunk_gram {{.*}}chunk_size = 32
// SEG:         %[[TR:.*]], %[[CO:.*]] = k3.kda_segment_summary %{{.*}} {chunk_size = 32 : i64, num_segments = 3 : i64} : {{.*}} -> (tensor<?x3x2x16x16xf32>, tensor<?x3x2x16x32xf32>)
// SEG:         %[[S:.*]] = k3.kda_segment_scan %[[TR]], %[[CO]] initial_state(%{{.*}})
// SEG:         k3.kda_chunk_state {{.*}} segment_starts(%[[S]]) {{.*}}num_segments = 3 : i64

// PAIR-LABEL: func.func @lower_bounded
// PAIR-NOT:     gate_lower_bound
// PAIR:         k3.kda_chunk_output
func.func @lower_bounded(%q: tensor<1x?x2x16xf32>, %v: tensor<1x?x2x32xbf16>,
    %z: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %s0: tensor<?x2x16x32xf32>,
    %alog: tensor<2xf32>, %dtb: tensor<32xf32>, %cu: tensor<?xi32>)
    -> (tensor<1x?x2x32xbf16>, tensor<?x2x16x32xf32>) {
  %o, %s = k3.kda %q, %q, %v, %z, %beta initial_state(%s0) cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.25 : f64, use_qk_l2norm, use_beta_sigmoid,
       gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x32xbf16>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?x2x16x32xf32>, tensor<?xi32>, tensor<2xf32>, tensor<32xf32>)
      -> (tensor<1x?x2x32xbf16>, tensor<?x2x16x32xf32>)
  return %o, %s : tensor<1x?x2x32xbf16>, tensor<?x2x16x32xf32>
}

// -----

// The softplus gate is unbounded: auto picks the pairwise form (no
// gate_lower_bound); decay-form=tile-factored is a diagnostic.

// CHECK-LABEL: func.func @softplus
// CHECK:         k3.kda_chunk_prepare {{.*}}gate_kind = #k3<decay_gate neg_softplus>
// CHECK-NOT:     gate_lower_bound
// CHECK:         k3.kda_chunk_output
// FACT: error: 'k3.kda' op has an unbounded decay gate (neg_softplus, or a log-decay not produced by a lower_bounded_sigmoid gate): the tile-factored decay form needs a lower-bounded gate; use decay-form=pairwise (or auto)
func.func @softplus(%q: tensor<2x5x2x16xf32>, %z: tensor<2x5x2x16xf32>, %beta: tensor<2x5x2xf32>,
    %alog: tensor<2xf32>, %dtb: tensor<32xf32>) -> (tensor<2x5x2x16xf32>, tensor<2x2x16x16xf32>) {
  %o, %s = k3.kda %q, %q, %q, %z, %beta gate_params(%alog, %dtb)
      {scale = 0.25 : f64, gate_kind = #k3<decay_gate neg_softplus>}
      : (tensor<2x5x2x16xf32>, tensor<2x5x2x16xf32>, tensor<2x5x2x16xf32>, tensor<2x5x2x16xf32>,
         tensor<2x5x2xf32>, tensor<2xf32>, tensor<32xf32>) -> (tensor<2x5x2x16xf32>, tensor<2x2x16x16xf32>)
  return %o, %s : tensor<2x5x2x16xf32>, tensor<2x2x16x16xf32>
}

// -----

// A separate log-decay produced by a lower-bounded k3.kda_gate: the bound is
// read off the producer, so the factored form applies.

// CHECK-LABEL: func.func @separate_gate
// CHECK:         k3.kda_gate
// CHECK:         k3.kda_chunk_gram {{.*}}gate_lower_bound = -4.000000e+00 : f64
func.func @separate_gate(%q: tensor<1x8x1x16xf32>, %z: tensor<8x1x16xf32>, %beta: tensor<1x8x1xf32>,
    %alog: tensor<1xf32>, %dtb: tensor<16xf32>) -> (tensor<1x8x1x16xf32>, tensor<1x1x16x16xf32>) {
  %g = k3.kda_gate lower_bounded_sigmoid %z, %alog, %dtb {lower_bound = -4.0 : f64}
      : (tensor<8x1x16xf32>, tensor<1xf32>, tensor<16xf32>) -> tensor<8x1x16xf32>
  %g4 = tensor.expand_shape %g [[0, 1], [2], [3]] output_shape [1, 8, 1, 16]
      : tensor<8x1x16xf32> into tensor<1x8x1x16xf32>
  %o, %s = k3.kda %q, %q, %q, %g4, %beta {scale = 0.25 : f64}
      : (tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>, tensor<1x8x1x16xf32>,
         tensor<1x8x1xf32>) -> (tensor<1x8x1x16xf32>, tensor<1x1x16x16xf32>)
  return %o, %s : tensor<1x8x1x16xf32>, tensor<1x1x16x16xf32>
}
