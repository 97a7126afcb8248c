// RUN: k3-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// k3.reduce_scatter (K3CollectiveOps.td): the reduction over the ranks,
// cut along `dim` into group_size shards (a static dim must divide), rank
// r keeping shard r.

// CHECK-LABEL: func.func @tp_shards
// CHECK: k3.reduce_scatter sum %{{.*}} {dim = 1 : i64, group = "tp", group_size = 4 : i64} : (tensor<?x2304xf32>) -> tensor<?x576xf32>
// CHECK: k3.reduce_scatter sum %{{.*}} {dim = 0 : i64, group = "tp", group_size = 2 : i64} : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
func.func @tp_shards(%x: tensor<?x2304xf32>, %r: tensor<?x64xbf16>) -> (tensor<?x576xf32>, tensor<?x64xbf16>) {
  %y = k3.reduce_scatter sum %x {group = "tp", group_size = 4 : i64, dim = 1 : i64} : (tensor<?x2304xf32>) -> tensor<?x576xf32>
  %z = k3.reduce_scatter sum %r {group = "tp", group_size = 2 : i64, dim = 0 : i64} : (tensor<?x64xbf16>) -> tensor<?x64xbf16>
  return %y, %z : tensor<?x576xf32>, tensor<?x64xbf16>
}

// -----

func.func @not_divisible(%x: tensor<4x10xf32>) {
  // expected-error @+1 {{'k3.reduce_scatter' op input dimension 1 (dim) has size 10, not a multiple of group_size 4}}
  %y = k3.reduce_scatter sum %x {group = "tp", group_size = 4 : i64, dim = 1 : i64} : (tensor<4x10xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @wrong_shard(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'k3.reduce_scatter' op result dimension 1 must be 4, got 8}}
  %y = k3.reduce_scatter sum %x {group = "tp", group_size = 2 : i64, dim = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @integer_sum(%x: tensor<8xi32>) {
  // expected-error @+1 {{'k3.reduce_scatter' op reduces float elements, got 'i32'}}
  %y = k3.reduce_scatter sum %x {group = "tp", group_size = 2 : i64, dim = 0 : i64} : (tensor<8xi32>) -> tensor<4xi32>
  return
}
