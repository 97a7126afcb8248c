// RUN: k3-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// Context parallelism's ops (K3ContextOps.td) round-trip; the verifiers
// name the operand and dimension that is wrong.

// CHECK-LABEL: func.func @round_trip
// CHECK: k3.kda_context_inputs %{{.*}}, %{{.*}} {key_dim = 4 : i64}
// CHECK: k3.kda_context_fold {{.*}} initial_state(%{{.*}}) cu_seqlens(%{{.*}}) {group_size = 2 : i64}
// CHECK: k3.short_conv_context_fold {{.*}} state(%{{.*}}) {group_size = 2 : i64}
// CHECK: k3.short_conv_tail %{{.*}} cu_seqlens(%{{.*}}) {kernel_size = 4 : i64}
func.func @round_trip(%q: tensor<1x?x2x4xf32>, %b: tensor<1x?x2xf32>, %cu: tensor<?xi32>, %rank: tensor<1xi32>,
                      %all: tensor<2x?x2x4x8xf32>, %s0: tensor<?x2x4x4xf32>, %tails: tensor<2x?x8x3xf32>,
                      %cus: tensor<2x?xi32>, %c0: tensor<?x8x3xf32>) {
  %o, %s = k3.kda_context_inputs %q, %cu {key_dim = 4 : i64}
      : (tensor<1x?x2x4xf32>, tensor<?xi32>) -> (tensor<1x?x2x8xf32>, tensor<?x2x4x8xf32>)
  %fo, %fs = k3.kda_context_fold %o, %all, %rank initial_state(%s0) cu_seqlens(%cu) {group_size = 2 : i64}
      : (tensor<1x?x2x8xf32>, tensor<2x?x2x4x8xf32>, tensor<1xi32>, tensor<?x2x4x4xf32>, tensor<?xi32>)
      -> (tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>)
  %in, %cf = k3.short_conv_context_fold %tails, %cus, %rank state(%c0) {group_size = 2 : i64}
      : (tensor<2x?x8x3xf32>, tensor<2x?xi32>, tensor<1xi32>, tensor<?x8x3xf32>) -> (tensor<?x8x3xf32>, tensor<?x8x3xf32>)
  %x = tensor.collapse_shape %tails [[0, 1], [2, 3]] : tensor<2x?x8x3xf32> into tensor<?x24xf32>
  %t = k3.short_conv_tail %x cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x24xf32>, tensor<?xi32>) -> tensor<?x24x3xf32>
  return
}

// -----

func.func @inputs_width(%v: tensor<1x?x2x4xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{expects 'values' dimension 3 (values and key) to be 8, got 4}}
  %o, %s = k3.kda_context_inputs %v, %cu {key_dim = 4 : i64}
      : (tensor<1x?x2x4xf32>, tensor<?xi32>) -> (tensor<1x?x2x4xf32>, tensor<?x2x4x8xf32>)
  return
}

// -----

func.func @inputs_state(%v: tensor<1x?x2x4xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{expects 'initial_state' dimension 2 (key dimension) to be 4, got 8}}
  %o, %s = k3.kda_context_inputs %v, %cu {key_dim = 4 : i64}
      : (tensor<1x?x2x4xf32>, tensor<?xi32>) -> (tensor<1x?x2x8xf32>, tensor<?x2x8x8xf32>)
  return
}

// -----

func.func @fold_ranks(%o: tensor<1x?x2x8xf32>, %all: tensor<3x?x2x4x8xf32>, %rank: tensor<1xi32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{expects 'segments' dimension 0 (one entry per rank) to be 2, got 3}}
  %fo, %fs = k3.kda_context_fold %o, %all, %rank cu_seqlens(%cu) {group_size = 2 : i64}
      : (tensor<1x?x2x8xf32>, tensor<3x?x2x4x8xf32>, tensor<1xi32>, tensor<?xi32>)
      -> (tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>)
  return
}

// -----

func.func @fold_rank_shape(%o: tensor<1x?x2x8xf32>, %all: tensor<2x?x2x4x8xf32>, %rank: tensor<2xi32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{expects 'rank' dimension 0 (a rank's coordinate) to be 1, got 2}}
  %fo, %fs = k3.kda_context_fold %o, %all, %rank cu_seqlens(%cu) {group_size = 2 : i64}
      : (tensor<1x?x2x8xf32>, tensor<2x?x2x4x8xf32>, tensor<2xi32>, tensor<?xi32>)
      -> (tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>)
  return
}

// -----

func.func @fold_key_columns(%o: tensor<1x?x2x6xf32>, %all: tensor<2x?x2x4x8xf32>, %rank: tensor<1xi32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{expects 'segment_output' dimension 3 (value and key dimensions) to be 8, got 6}}
  %fo, %fs = k3.kda_context_fold %o, %all, %rank cu_seqlens(%cu) {group_size = 2 : i64}
      : (tensor<1x?x2x6xf32>, tensor<2x?x2x4x8xf32>, tensor<1xi32>, tensor<?xi32>)
      -> (tensor<1x?x2x4xf32>, tensor<?x2x4x4xf32>)
  return
}

// -----

func.func @conv_cu_ranks(%tails: tensor<2x?x8x3xf32>, %cus: tensor<4x?xi32>, %rank: tensor<1xi32>) {
  // expected-error @+1 {{expects 'cu_seqlens' dimension 0 (one entry per rank) to be 2, got 4}}
  %in, %cf = k3.short_conv_context_fold %tails, %cus, %rank {group_size = 2 : i64}
      : (tensor<2x?x8x3xf32>, tensor<4x?xi32>, tensor<1xi32>) -> (tensor<?x8x3xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @conv_channels(%tails: tensor<2x?x4x3xf32>, %cus: tensor<2x?xi32>, %rank: tensor<1xi32>) {
  // expected-error @+1 {{entry dimension mismatch: 'tails' dimension 2 is 4 but 'final_state' dimension 1 is 8}}
  %in, %cf = k3.short_conv_context_fold %tails, %cus, %rank {group_size = 2 : i64}
      : (tensor<2x?x4x3xf32>, tensor<2x?xi32>, tensor<1xi32>) -> (tensor<?x8x3xf32>, tensor<?x8x3xf32>)
  return
}

// -----

func.func @tail_rows(%x: tensor<?x8xf32>, %cu: tensor<?xi32>) {
  // expected-error @+1 {{expects 'result' dimension 2 (kernel size minus one) to be 3, got 4}}
  %t = k3.short_conv_tail %x cu_seqlens(%cu) {kernel_size = 4 : i64} : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8x4xf32>
  return
}
