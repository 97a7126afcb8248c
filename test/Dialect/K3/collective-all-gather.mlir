// RUN: k3-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// k3.all_gather (K3CollectiveOps.td): the ranks' inputs concatenated along
// `dim` in rank order: that dimension group_size times the input's.

// CHECK-LABEL: func.func @cp_states
// CHECK: k3.all_gather %{{.*}} {dim = 0 : i64, group = "cp", group_size = 2 : i64} : (tensor<32x128x128xf32>) -> tensor<64x128x128xf32>
// CHECK: k3.all_gather %{{.*}} {dim = 1 : i64, group = "tp", group_size = 4 : i64} : (tensor<?x576xbf16>) -> tensor<?x2304xbf16>
// CHECK: k3.all_gather %{{.*}} {dim = 0 : i64, group = "ep", group_size = 2 : i64} : (tensor<?xi32>) -> tensor<?xi32>
func.func @cp_states(%h: tensor<32x128x128xf32>, %x: tensor<?x576xbf16>, %i: tensor<?xi32>)
    -> (tensor<64x128x128xf32>, tensor<?x2304xbf16>, tensor<?xi32>) {
  %a = k3.all_gather %h {group = "cp", group_size = 2 : i64, dim = 0 : i64} : (tensor<32x128x128xf32>) -> tensor<64x128x128xf32>
  %b = k3.all_gather %x {group = "tp", group_size = 4 : i64, dim = 1 : i64} : (tensor<?x576xbf16>) -> tensor<?x2304xbf16>
  %c = k3.all_gather %i {group = "ep", group_size = 2 : i64, dim = 0 : i64} : (tensor<?xi32>) -> tensor<?xi32>
  return %a, %b, %c : tensor<64x128x128xf32>, tensor<?x2304xbf16>, tensor<?xi32>
}

// -----

func.func @wrong_size(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'k3.all_gather' op result dimension 1 must be 16, got 8}}
  %y = k3.all_gather %x {group = "tp", group_size = 2 : i64, dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @no_such_dim(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'k3.all_gather' op dim = 2 is not a dimension of the rank-2 input}}
  %y = k3.all_gather %x {group = "tp", group_size = 2 : i64, dim = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rank_change(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'k3.all_gather' op result rank 3 must be the input's, 2}}
  %y = k3.all_gather %x {group = "tp", group_size = 2 : i64, dim = 0 : i64} : (tensor<4x8xf32>) -> tensor<2x4x8xf32>
  return
}
