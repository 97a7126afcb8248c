// RUN: k3-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// Expert parallelism's buckets (k3.moe_bucket, k3.moe_unbucket) round-trip;
// the verifiers name what is wrong.

// CHECK-LABEL: func.func @round_trip
// CHECK: k3.moe_bucket %{{.*}} {experts_per_rank = 2 : i64}
// CHECK: k3.moe_unbucket
func.func @round_trip(%x: tensor<?x32xf32>, %idx: tensor<?x2xi32>, %w: tensor<?x2xf32>) -> tensor<?x32xf32> {
  %rows, %ids, %rw, %slots = k3.moe_bucket %x, %idx, %w {experts_per_rank = 2 : i64}
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>)
      -> (tensor<2x16x32xf32>, tensor<2x16x1xi32>, tensor<2x16x1xf32>, tensor<?x2xi32>)
  %y = k3.moe_unbucket %rows, %slots : (tensor<2x16x32xf32>, tensor<?x2xi32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

func.func @dynamic_capacity(%x: tensor<?x32xf32>, %idx: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{'rows'}}
  %rows, %ids, %rw, %slots = k3.moe_bucket %x, %idx, %w {experts_per_rank = 2 : i64}
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>)
      -> (tensor<2x?x32xf32>, tensor<2x16x1xi32>, tensor<2x16x1xf32>, tensor<?x2xi32>)
  return
}

// -----

func.func @ids_capacity(%x: tensor<?x32xf32>, %idx: tensor<?x2xi32>, %w: tensor<?x2xf32>) {
  // expected-error @+1 {{bucket capacity mismatch: 'rows' dimension 1 is 16 but 'ids' dimension 1 is 8}}
  %rows, %ids, %rw, %slots = k3.moe_bucket %x, %idx, %w {experts_per_rank = 2 : i64}
      : (tensor<?x32xf32>, tensor<?x2xi32>, tensor<?x2xf32>)
      -> (tensor<2x16x32xf32>, tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<?x2xi32>)
  return
}

// -----

func.func @unbucket_width(%b: tensor<2x16x32xf32>, %slots: tensor<?x2xi32>) {
  // expected-error @+1 {{hidden size mismatch: 'returned' dimension 2 is 32 but 'result' dimension 1 is 16}}
  %y = k3.moe_unbucket %b, %slots : (tensor<2x16x32xf32>, tensor<?x2xi32>) -> tensor<?x16xf32>
  return
}
