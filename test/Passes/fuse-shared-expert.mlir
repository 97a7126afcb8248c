// RUN: k3-opt %s -split-input-file --k3-fuse-shared-expert | FileCheck %s

// In the decode entry the shared expert (k3.glu_gate_up + k3.linear of the
// routed experts' input, added to their combine) becomes rows T K + t of
// the grouped ops: one slot more in h and y, the combine adds it last, and
// the shared weights (defined later here) move before the grouped GLU.

// CHECK-LABEL: func.func @forward_decode
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x32xbf16>, %[[IDX:[^:]*]]: tensor<?x2xi32>, %[[WTS:[^:]*]]: tensor<?x2xf32>)
// CHECK:         %[[SRC:.*]], %[[POS:.*]], %[[OFF:.*]], %[[TILES:.*]] = k3.moe_dispatch
// CHECK-DAG:     %[[SG:.*]] = k3.weight "shared.gate"
// CHECK-DAG:     %[[SU:.*]] = k3.weight "shared.up"
// CHECK-DAG:     %[[SD:.*]] = k3.weight "shared.down"
// CHECK:         %[[H:.*]] = k3.moe_grouped_glu silu %[[X]], %[[IDX]], %[[SRC]], %[[OFF]], %[[TILES]], %{{.*}}, %{{.*}} shared(%[[SG]], %[[SU]])
// CHECK-SAME:      -> tensor<?x3x16xbf16>
// CHECK:         %[[Y:.*]] = k3.moe_grouped_down %[[H]], %[[IDX]], %[[SRC]], %[[OFF]], %[[TILES]], %[[WTS]], %{{.*}} shared(%[[SD]])
// CHECK-SAME:      : (tensor<?x3x16xbf16>, {{.*}}) -> tensor<?x3x32xf32>
// CHECK:         %[[R:.*]] = k3.moe_combine %[[Y]], %[[POS]] : (tensor<?x3x32xf32>, tensor<?x2xi32>) -> tensor<?x32xbf16>
// CHECK-NOT:     k3.glu_gate_up
// CHECK-NOT:     k3.linear
// CHECK-NOT:     k3.add
// CHECK:         return %[[R]]
func.func @forward_decode(%x: tensor<?x32xbf16>, %idx: tensor<?x2xi32>, %wts: tensor<?x2xf32>)
    -> tensor<?x32xbf16> attributes {k3.decode} {
  %w1 = k3.weight "experts.w1" : tensor<4x16x32xbf16>
  %w3 = k3.weight "experts.w3" : tensor<4x16x32xbf16>
  %w2 = k3.weight "experts.w2" : tensor<4x32x16xbf16>
  %src, %pos, %off, %tiles = k3.moe_dispatch %idx {num_experts = 4 : i64, tile_rows = 4 : i64}
      : (tensor<?x2xi32>) -> (tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>)
  %h = k3.moe_grouped_glu silu %x, %idx, %src, %off, %tiles, %w1, %w3
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<4x16x32xbf16>, tensor<4x16x32xbf16>) -> tensor<?x2x16xbf16>
  %y = k3.moe_grouped_down %h, %idx, %src, %off, %tiles, %wts, %w2
      : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<?x2xf32>, tensor<4x32x16xbf16>) -> tensor<?x2x32xf32>
  %r = k3.moe_combine %y, %pos : (tensor<?x2x32xf32>, tensor<?x2xi32>) -> tensor<?x32xbf16>
  %sg = k3.weight "shared.gate" : tensor<16x32xbf16>
  %su = k3.weight "shared.up" : tensor<16x32xbf16>
  %sd = k3.weight "shared.down" : tensor<32x16xbf16>
  %sh = k3.glu_gate_up silu %x, %sg, %su : (tensor<?x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %so = k3.linear %sh, %sd : (tensor<?x16xbf16>, tensor<32x16xbf16>) -> tensor<?x32xbf16>
  %out = k3.add %so, %r : tensor<?x32xbf16>
  return %out : tensor<?x32xbf16>
}

// -----

// The prefill entry keeps its shared expert: a dense GEMM that fills the
// GPU on its own.
// CHECK-LABEL: func.func @forward
// CHECK-NOT:     shared(
// CHECK:         k3.glu_gate_up
// CHECK:         k3.add
func.func @forward(%x: tensor<?x32xbf16>, %idx: tensor<?x2xi32>, %wts: tensor<?x2xf32>,
    %w1: tensor<4x16x32xbf16>, %w2: tensor<4x32x16xbf16>, %sg: tensor<16x32xbf16>,
    %sd: tensor<32x16xbf16>) -> tensor<?x32xbf16> {
  %src, %pos, %off, %tiles = k3.moe_dispatch %idx {num_experts = 4 : i64, tile_rows = 128 : i64}
      : (tensor<?x2xi32>) -> (tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>)
  %h = k3.moe_grouped_glu silu %x, %idx, %src, %off, %tiles, %w1, %w1
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<4x16x32xbf16>, tensor<4x16x32xbf16>) -> tensor<?x2x16xbf16>
  %y = k3.moe_grouped_down %h, %idx, %src, %off, %tiles, %wts, %w2
      : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<?x2xf32>, tensor<4x32x16xbf16>) -> tensor<?x2x32xf32>
  %r = k3.moe_combine %y, %pos : (tensor<?x2x32xf32>, tensor<?x2xi32>) -> tensor<?x32xbf16>
  %sh = k3.glu_gate_up silu %x, %sg, %sg : (tensor<?x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %so = k3.linear %sh, %sd : (tensor<?x16xbf16>, tensor<32x16xbf16>) -> tensor<?x32xbf16>
  %out = k3.add %r, %so : tensor<?x32xbf16>
  return %out : tensor<?x32xbf16>
}

// -----

// Not fused: the shared expert reads another input (K3's latent MoE
// routes a projection of the hidden state), or its output has another use.
// CHECK-LABEL: func.func @other_input
// CHECK-NOT:     shared(
// CHECK:         k3.glu_gate_up
// CHECK-LABEL: func.func @shared_output_used
// CHECK-NOT:     shared(
// CHECK:         k3.glu_gate_up
func.func @other_input(%x: tensor<?x32xbf16>, %z: tensor<?x32xbf16>, %idx: tensor<?x2xi32>,
    %wts: tensor<?x2xf32>, %w1: tensor<4x16x32xbf16>, %w2: tensor<4x32x16xbf16>,
    %sg: tensor<16x32xbf16>, %sd: tensor<32x16xbf16>) -> tensor<?x32xbf16> attributes {k3.decode} {
  %src, %pos, %off, %tiles = k3.moe_dispatch %idx {num_experts = 4 : i64, tile_rows = 4 : i64}
      : (tensor<?x2xi32>) -> (tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>)
  %h = k3.moe_grouped_glu silu %x, %idx, %src, %off, %tiles, %w1, %w1
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<4x16x32xbf16>, tensor<4x16x32xbf16>) -> tensor<?x2x16xbf16>
  %y = k3.moe_grouped_down %h, %idx, %src, %off, %tiles, %wts, %w2
      : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<?x2xf32>, tensor<4x32x16xbf16>) -> tensor<?x2x32xf32>
  %r = k3.moe_combine %y, %pos : (tensor<?x2x32xf32>, tensor<?x2xi32>) -> tensor<?x32xbf16>
  %sh = k3.glu_gate_up silu %z, %sg, %sg : (tensor<?x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %so = k3.linear %sh, %sd : (tensor<?x16xbf16>, tensor<32x16xbf16>) -> tensor<?x32xbf16>
  %out = k3.add %r, %so : tensor<?x32xbf16>
  return %out : tensor<?x32xbf16>
}

func.func @shared_output_used(%x: tensor<?x32xbf16>, %idx: tensor<?x2xi32>,
    %wts: tensor<?x2xf32>, %w1: tensor<4x16x32xbf16>, %w2: tensor<4x32x16xbf16>,
    %sg: tensor<16x32xbf16>, %sd: tensor<32x16xbf16>) -> (tensor<?x32xbf16>, tensor<?x32xbf16>) attributes {k3.decode} {
  %src, %pos, %off, %tiles = k3.moe_dispatch %idx {num_experts = 4 : i64, tile_rows = 4 : i64}
      : (tensor<?x2xi32>) -> (tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>)
  %h = k3.moe_grouped_glu silu %x, %idx, %src, %off, %tiles, %w1, %w1
      : (tensor<?x32xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<4x16x32xbf16>, tensor<4x16x32xbf16>) -> tensor<?x2x16xbf16>
  %y = k3.moe_grouped_down %h, %idx, %src, %off, %tiles, %wts, %w2
      : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x2xi32>, tensor<5xi32>, tensor<5xi32>, tensor<?x2xf32>, tensor<4x32x16xbf16>) -> tensor<?x2x32xf32>
  %r = k3.moe_combine %y, %pos : (tensor<?x2x32xf32>, tensor<?x2xi32>) -> tensor<?x32xbf16>
  %sh = k3.glu_gate_up silu %x, %sg, %sg : (tensor<?x32xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %so = k3.linear %sh, %sd : (tensor<?x16xbf16>, tensor<32x16xbf16>) -> tensor<?x32xbf16>
  %out = k3.add %r, %so : tensor<?x32xbf16>
  return %out, %so : tensor<?x32xbf16>, tensor<?x32xbf16>
}
