// RUN: k3-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// k3.all_reduce (K3CollectiveOps.td): the sum or max over a group's ranks,
// the operand's type kept; float elements only; a known group of at least
// one rank.

// CHECK-LABEL: func.func @row_split_sum
// CHECK: k3.all_reduce sum %{{.*}} {group = "tp", group_size = 2 : i64} : (tensor<?x2304xf32>) -> tensor<?x2304xf32>
// CHECK: k3.all_reduce max %{{.*}} {group = "ep", group_size = 4 : i64} : (tensor<8xbf16>) -> tensor<8xbf16>
func.func @row_split_sum(%x: tensor<?x2304xf32>, %m: tensor<8xbf16>) -> (tensor<?x2304xf32>, tensor<8xbf16>) {
  %y = k3.all_reduce sum %x {group = "tp", group_size = 2 : i64} : (tensor<?x2304xf32>) -> tensor<?x2304xf32>
  %z = k3.all_reduce max %m {group = "ep", group_size = 4 : i64} : (tensor<8xbf16>) -> tensor<8xbf16>
  return %y, %z : tensor<?x2304xf32>, tensor<8xbf16>
}

// -----

func.func @unknown_group(%x: tensor<4xf32>) {
  // expected-error @+1 {{'k3.all_reduce' op group must be "tp", "ep" or "cp", got "dp"}}
  %y = k3.all_reduce sum %x {group = "dp", group_size = 2 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @empty_group(%x: tensor<4xf32>) {
  // expected-error @+1 {{'k3.all_reduce' op group_size must be at least 1, got 0}}
  %y = k3.all_reduce sum %x {group = "tp", group_size = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @integer_sum(%x: tensor<4xi32>) {
  // expected-error @+1 {{'k3.all_reduce' op reduces float elements, got 'i32'}}
  %y = k3.all_reduce sum %x {group = "tp", group_size = 2 : i64} : (tensor<4xi32>) -> tensor<4xi32>
  return
}

// -----

func.func @changed_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{'k3.all_reduce' op result element type 'bf16' must be the input's, 'f32'}}
  %y = k3.all_reduce sum %x {group = "tp", group_size = 2 : i64} : (tensor<4xf32>) -> tensor<4xbf16>
  return
}

// -----

func.func @changed_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'k3.all_reduce' op result dimension 1 must be 8, got 4}}
  %y = k3.all_reduce sum %x {group = "tp", group_size = 2 : i64} : (tensor<4x8xf32>) -> tensor<4x4xf32>
  return
}
