// RUN: k3-opt %s -split-input-file -verify-diagnostics --k3-partition=tp=2 | FileCheck %s
// RUN: not k3-opt %s -split-input-file --k3-partition=tp=65 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: k3-opt %s -split-input-file -verify-diagnostics --k3-partition="tp=2 vocab-split=1" | FileCheck %s --check-prefix=VOCAB
// RANGE: k3-partition: tp must be in [1, 64], got 65

// An MLP block keeps half of its intermediate width on each rank: the gate
// and up weights' rows, the down weight's columns (k3.shard, sliced by the
// runtime at load); its partial output is summed over the ranks.

// CHECK-LABEL: func.func @mlp
// CHECK:         %[[G:.*]] = k3.weight "mlp.gate_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<24x32xf32>
// CHECK:         %[[U:.*]] = k3.weight "mlp.up_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<24x32xf32>
// CHECK:         %[[D:.*]] = k3.weight "mlp.down_proj.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 1>} : tensor<32x24xf32>
// CHECK:         %[[P:.*]] = k3.glu_mlp silu %{{.*}}, %[[G]], %[[U]], %[[D]] : (tensor<?x32xf32>, tensor<24x32xf32>, tensor<24x32xf32>, tensor<32x24xf32>) -> tensor<?x32xf32>
// CHECK:         %[[S:.*]] = k3.all_reduce sum %[[P]] {group = "tp", group_size = 2 : i64}
// CHECK:         %[[Y:.*]] = k3.add %[[S]], %{{.*}}
// CHECK:         return %[[Y]]
func.func @mlp(%x: tensor<?x32xf32>) -> tensor<?x32xf32> {
  %g = k3.weight "mlp.gate_proj.weight" : tensor<48x32xf32>
  %u = k3.weight "mlp.up_proj.weight" : tensor<48x32xf32>
  %d = k3.weight "mlp.down_proj.weight" : tensor<32x48xf32>
  %m = k3.glu_mlp silu %x, %g, %u, %d : (tensor<?x32xf32>, tensor<48x32xf32>, tensor<48x32xf32>, tensor<32x48xf32>) -> tensor<?x32xf32>
  %y = k3.add %m, %x : tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// Routed experts: every expert's intermediate width is split ([E, I, D]
// along I, [E, D, I] along its last dim); the router stays whole.

// CHECK-LABEL: func.func @experts
// CHECK:         k3.weight "e.{expert}.w1.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 1>} : tensor<4x8x32xbf16>
// CHECK:         k3.weight "e.{expert}.w3.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 1>} : tensor<4x8x32xbf16>
// CHECK:         k3.weight "e.{expert}.w2.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 2>} : tensor<4x32x8xbf16>
// CHECK:         %[[R:.*]] = k3.moe_experts silu
// CHECK-SAME:      -> tensor<?x32xf32>
// CHECK-NEXT:    %[[S:.*]] = k3.all_reduce sum %[[R]] {group = "tp", group_size = 2 : i64}
// CHECK-NEXT:    return %[[S]]
func.func @experts(%x: tensor<?x32xf32>, %idx: tensor<?x2xi32>, %wts: tensor<?x2xf32>) -> tensor<?x32xf32> {
  %w1 = k3.weight "e.{expert}.w1.weight" : tensor<4x16x32xbf16>
  %w3 = k3.weight "e.{expert}.w3.weight" : tensor<4x16x32xbf16>
  %w2 = k3.weight "e.{expert}.w2.weight" : tensor<4x32x16xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<4x16x32xbf16>, tensor<4x16x32xbf16>, tensor<4x32x16xbf16>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// An intermediate width that the ranks cannot share evenly.

func.func @indivisible(%x: tensor<?x32xf32>) -> tensor<?x32xf32> {
  // expected-error @below {{dimension 0 (3) is not divisible by tp = 2}}
  %g = k3.weight "g" : tensor<3x32xf32>
  %u = k3.weight "u" : tensor<3x32xf32>
  %d = k3.weight "d" : tensor<32x3xf32>
  %y = k3.glu_mlp silu %x, %g, %u, %d : (tensor<?x32xf32>, tensor<3x32xf32>, tensor<3x32xf32>, tensor<32x3xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// A weight the block shares with an op that is not split (a tied weight):
// slicing it would change the other op.

func.func @shared_weight(%x: tensor<?x32xf32>) -> tensor<?x48xf32> {
  // expected-error @below {{is split for tensor parallelism but also read by k3.linear, which is not split}}
  %g = k3.weight "g" : tensor<48x32xf32>
  %u = k3.weight "u" : tensor<48x32xf32>
  %d = k3.weight "d" : tensor<32x48xf32>
  %y = k3.glu_mlp silu %x, %g, %u, %d : (tensor<?x32xf32>, tensor<48x32xf32>, tensor<48x32xf32>, tensor<32x48xf32>) -> tensor<?x32xf32>
  %z = k3.linear %y, %g : (tensor<?x32xf32>, tensor<48x32xf32>) -> tensor<?x48xf32>
  return %z : tensor<?x48xf32>
}

// -----

// The LM head (the linear that makes the result named logits) stays whole
// by default; with vocab-split=1 each rank keeps half of its vocabulary
// rows and an all-gather along the vocabulary completes the logits.

// CHECK-LABEL: func.func @head
// CHECK:         k3.weight "lm_head.weight" : tensor<64x32xf32>
// CHECK-NOT:     k3.all_gather
// VOCAB-LABEL: func.func @head
// VOCAB:         %[[W:.*]] = k3.weight "lm_head.weight" {k3.shard = #k3.weight_shard<group = "tp", parts = 2, dim = 0>} : tensor<32x32xf32>
// VOCAB:         %[[L:.*]] = k3.linear %{{.*}}, %[[W]] : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
// VOCAB:         %[[G:.*]] = k3.all_gather %[[L]] {dim = 1 : i64, group = "tp", group_size = 2 : i64} : (tensor<?x32xf32>) -> tensor<?x64xf32>
// VOCAB:         return %[[G]]
func.func @head(%x: tensor<?x32xf32>) -> (tensor<?x64xf32> {k3.name = "logits"}) {
  %w = k3.weight "lm_head.weight" : tensor<64x32xf32>
  %l = k3.linear %x, %w : (tensor<?x32xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}

// -----

// A tied LM head (the embedding reads the same weight) and a vocabulary
// that tp does not divide keep the head whole.

// VOCAB-LABEL: func.func @tied
// VOCAB:         k3.weight "model.embed_tokens.weight" : tensor<64x32xf32>
// VOCAB-NOT:     k3.all_gather
// VOCAB-LABEL: func.func @odd
// VOCAB:         k3.weight "lm_head.weight" : tensor<61x32xf32>
// VOCAB-NOT:     k3.all_gather
func.func @tied(%ids: tensor<?xi32>) -> (tensor<?x64xf32> {k3.name = "logits"}) {
  %w = k3.weight "model.embed_tokens.weight" : tensor<64x32xf32>
  %x = k3.embedding %ids, %w : (tensor<?xi32>, tensor<64x32xf32>) -> tensor<?x32xf32>
  %l = k3.linear %x, %w : (tensor<?x32xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}
func.func @odd(%x: tensor<?x32xf32>) -> (tensor<?x61xf32> {k3.name = "logits"}) {
  %w = k3.weight "lm_head.weight" : tensor<61x32xf32>
  %l = k3.linear %x, %w : (tensor<?x32xf32>, tensor<61x32xf32>) -> tensor<?x61xf32>
  return %l : tensor<?x61xf32>
}
