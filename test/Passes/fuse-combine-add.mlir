// RUN: k3-opt %s -split-input-file --k3-fuse-combine-add | FileCheck %s

// An add of a combine (either operand order) becomes the combine's addend;
// the add and the old combine go.
// CHECK-LABEL: func.func @forward
// CHECK-SAME:    (%[[ROWS:[^:]*]]: tensor<?x2x16xf32>, %[[POS:[^:]*]]: tensor<?x2xi32>, %[[S:[^:]*]]: tensor<?x16xbf16>)
// CHECK-NOT:     k3.add
// CHECK:         %[[C:.*]] = k3.moe_combine %[[ROWS]], %[[POS]] addend(%[[S]]) : (tensor<?x2x16xf32>, tensor<?x2xi32>, tensor<?x16xbf16>) -> tensor<?x16xbf16>
// CHECK-NEXT:    return %[[C]]
func.func @forward(%rows: tensor<?x2x16xf32>, %pos: tensor<?x2xi32>, %s: tensor<?x16xbf16>) -> tensor<?x16xbf16> {
  %c = k3.moe_combine %rows, %pos : (tensor<?x2x16xf32>, tensor<?x2xi32>) -> tensor<?x16xbf16>
  %y = k3.add %s, %c : tensor<?x16xbf16>
  return %y : tensor<?x16xbf16>
}

// -----

// A combine read elsewhere too stays, and so does its add.
// CHECK-LABEL: func.func @forward
// CHECK:         %[[C:.*]] = k3.moe_combine %{{[^ ]*}}, %{{[^ ]*}} :
// CHECK:         k3.add %[[C]], %{{.*}}
func.func @forward(%rows: tensor<?x2x16xf32>, %pos: tensor<?x2xi32>, %s: tensor<?x16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>) {
  %c = k3.moe_combine %rows, %pos : (tensor<?x2x16xf32>, tensor<?x2xi32>) -> tensor<?x16xbf16>
  %y = k3.add %c, %s : tensor<?x16xbf16>
  return %y, %c : tensor<?x16xbf16>, tensor<?x16xbf16>
}
