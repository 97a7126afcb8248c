// RUN: k3-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// k3.all_to_all (K3CollectiveOps.td): shard j of each rank's input (cut
// along split_dim) to rank j, the received shards concatenated along
// concat_dim in rank order.

// CHECK-LABEL: func.func @ep_rows
// CHECK: k3.all_to_all %{{.*}} {concat_dim = 0 : i64, group = "ep", group_size = 2 : i64, split_dim = 0 : i64} : (tensor<256x3584xbf16>) -> tensor<256x3584xbf16>
// CHECK: k3.all_to_all %{{.*}} {concat_dim = 1 : i64, group = "ep", group_size = 4 : i64, split_dim = 0 : i64} : (tensor<64x16xf32>) -> tensor<16x64xf32>
// CHECK: k3.all_to_all %{{.*}} {concat_dim = 0 : i64, group = "ep", group_size = 2 : i64, split_dim = 0 : i64} : (tensor<?x8xi32>) -> tensor<?x8xi32>
func.func @ep_rows(%r: tensor<256x3584xbf16>, %t: tensor<64x16xf32>, %i: tensor<?x8xi32>)
    -> (tensor<256x3584xbf16>, tensor<16x64xf32>, tensor<?x8xi32>) {
  %a = k3.all_to_all %r {group = "ep", group_size = 2 : i64, split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<256x3584xbf16>) -> tensor<256x3584xbf16>
  %b = k3.all_to_all %t {group = "ep", group_size = 4 : i64, split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<64x16xf32>) -> tensor<16x64xf32>
  %c = k3.all_to_all %i {group = "ep", group_size = 2 : i64, split_dim = 0 : i64, concat_dim = 0 : i64} : (tensor<?x8xi32>) -> tensor<?x8xi32>
  return %a, %b, %c : tensor<256x3584xbf16>, tensor<16x64xf32>, tensor<?x8xi32>
}

// -----

func.func @not_divisible(%x: tensor<6x8xf32>) {
  // expected-error @+1 {{'k3.all_to_all' op input dimension 0 (split_dim) has size 6, not a multiple of group_size 4}}
  %y = k3.all_to_all %x {group = "ep", group_size = 4 : i64, split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<6x8xf32>) -> tensor<1x32xf32>
  return
}

// -----

func.func @wrong_concat(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{'k3.all_to_all' op result dimension 1 must be 16, got 8}}
  %y = k3.all_to_all %x {group = "ep", group_size = 2 : i64, split_dim = 0 : i64, concat_dim = 1 : i64} : (tensor<8x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @no_such_dim(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{'k3.all_to_all' op concat_dim = -1 is not a dimension of the rank-2 input}}
  %y = k3.all_to_all %x {group = "ep", group_size = 2 : i64, split_dim = 0 : i64, concat_dim = -1 : i64} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  return
}
