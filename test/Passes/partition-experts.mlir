// RUN: k3-opt %s -split-input-file -verify-diagnostics --k3-partition=ep=2 | FileCheck %s
// RUN: k3-opt %s -split-input-file -verify-diagnostics --k3-partition="tp=2 ep=2" | FileCheck %s --check-prefix=BOTH
// RUN: not k3-opt %s -split-input-file --k3-partition=ep=0 2>&1 | FileCheck %s --check-prefix=RANGE
// RANGE: k3-partition: ep must be in [1, 64], got 0

// Routed experts by expert: each rank keeps 2 of the 4 experts, its ids
// from the router's (k3.moe_local_ids reads the runtime-filled rank input),
// and an all-reduce over ep sums the layer. The shared expert (a
// k3.glu_mlp) is split by TP only.

// CHECK-LABEL: func.func @experts
// CHECK-SAME:    %[[IDX:[a-z0-9]+]]: tensor<?x2xi32>
// CHECK-SAME:    %[[RANK:[a-z0-9]+]]: tensor<1xi32> {k3.name = "k3.rank.ep"}
// CHECK:         k3.weight "e.{expert}.w1.weight" {k3.shard = #k3.weight_shard<group = "ep", parts = 2, dim = 0>} : tensor<2x16x32xbf16>
// CHECK:         k3.weight "e.{expert}.w3.weight" {k3.shard = #k3.weight_shard<group = "ep", parts = 2, dim = 0>} : tensor<2x16x32xbf16>
// CHECK:         k3.weight "e.{expert}.w2.weight" {k3.shard = #k3.weight_shard<group = "ep", parts = 2, dim = 0>} : tensor<2x32x16xbf16>
// CHECK:         %[[LOCAL:.*]] = k3.moe_local_ids %[[IDX]], %[[RANK]] {experts_per_rank = 2 : i64}
// CHECK:         %[[R:.*]] = k3.moe_experts silu %{{.*}}, %[[LOCAL]],
// CHECK-NEXT:    %[[S:.*]] = k3.all_reduce sum %[[R]] {group = "ep", group_size = 2 : i64}
// CHECK:         k3.glu_mlp
// CHECK-NOT:     k3.all_reduce
// CHECK:         return

// BOTH-LABEL: func.func @experts
// BOTH:         k3.weight "e.{expert}.w1.weight" {k3.shard = #k3.weight_shard<group = "ep", parts = 2, dim = 0>} : tensor<2x16x32xbf16>
// BOTH:         k3.all_reduce sum %{{.*}} {group = "ep", group_size = 2 : i64}
// BOTH:         k3.weight "s.up.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>}
// BOTH:         k3.glu_mlp
// BOTH-NEXT:    k3.all_reduce sum %{{.*}} {group = "tp", group_size = 2 : i64}
func.func @experts(%x: tensor<?x32xf32>, %idx: tensor<?x2xi32>, %wts: tensor<?x2xf32>) -> tensor<?x32xf32> {
  %w1 = k3.weight "e.{expert}.w1.weight" : tensor<4x16x32xbf16>
  %w3 = k3.weight "e.{expert}.w3.weight" : tensor<4x16x32xbf16>
  %w2 = k3.weight "e.{expert}.w2.weight" : tensor<4x32x16xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<4x16x32xbf16>, tensor<4x16x32xbf16>, tensor<4x32x16xbf16>) -> tensor<?x32xf32>
  %g = k3.weight "s.gate.weight" : tensor<8x32xbf16>
  %u = k3.weight "s.up.weight" : tensor<8x32xbf16>
  %d = k3.weight "s.down.weight" : tensor<32x8xbf16>
  %s = k3.glu_mlp silu %y, %g, %u, %d
      : (tensor<?x32xf32>, tensor<8x32xbf16>, tensor<8x32xbf16>, tensor<32x8xbf16>) -> tensor<?x32xf32>
  return %s : tensor<?x32xf32>
}

// -----

// Experts that the ranks cannot share evenly.

func.func @indivisible(%x: tensor<?x32xf32>, %idx: tensor<?x2xi32>, %wts: tensor<?x2xf32>) -> tensor<?x32xf32> {
  %w1 = k3.weight "e.{expert}.w1.weight" : tensor<3x16x32xbf16>
  %w3 = k3.weight "e.{expert}.w3.weight" : tensor<3x16x32xbf16>
  %w2 = k3.weight "e.{expert}.w2.weight" : tensor<3x32x16xbf16>
  // expected-error @below {{has 3 routed experts, not divisible by ep = 2}}
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<3x16x32xbf16>, tensor<3x16x32xbf16>, tensor<3x32x16xbf16>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
