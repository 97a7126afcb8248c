// RUN: k3-opt %s -split-input-file --k3-fuse-combine-rms-norm | FileCheck %s

// A combine read only by the next add_rms_norm (either operand) becomes one
// k3.moe_combine_add_rms_norm with the combine's addend, the norm's other
// operand, weight and epsilon; both old ops go.
// CHECK-LABEL: func.func @forward
// CHECK-SAME:    (%[[ROWS:[^:]*]]: tensor<?x2x16xbf16>, %[[POS:[^:]*]]: tensor<?x2xi32>, %[[S:[^:]*]]: tensor<?x16xbf16>, %[[X:[^:]*]]: tensor<?x16xbf16>, %[[W:[^:]*]]: tensor<16xbf16>)
// CHECK-NOT:     k3.moe_combine %
// CHECK-NOT:     k3.add_rms_norm
// CHECK:         %[[H:.*]], %[[Y:.*]] = k3.moe_combine_add_rms_norm %[[ROWS]], %[[POS]], %[[X]], %[[W]] addend(%[[S]]) {epsilon = 1.000000e-05 : f64}
// CHECK-NEXT:    return %[[H]], %[[Y]]
func.func @forward(%rows: tensor<?x2x16xbf16>, %pos: tensor<?x2xi32>, %s: tensor<?x16xbf16>, %x: tensor<?x16xbf16>, %w: tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>) {
  %c = k3.moe_combine %rows, %pos addend(%s) : (tensor<?x2x16xbf16>, tensor<?x2xi32>, tensor<?x16xbf16>) -> tensor<?x16xbf16>
  %h, %y = k3.add_rms_norm %x, %c, %w {epsilon = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>)
  return %h, %y : tensor<?x16xbf16>, tensor<?x16xbf16>
}

// -----

// The combine as the norm's first operand, without an addend.
// CHECK-LABEL: func.func @forward
// CHECK-SAME:    (%[[ROWS:[^:]*]]: tensor<?x3x16xf32>, %[[POS:[^:]*]]: tensor<?x2xi32>, %[[X:[^:]*]]: tensor<?x16xf32>, %[[W:[^:]*]]: tensor<16xf32>)
// CHECK:         k3.moe_combine_add_rms_norm %[[ROWS]], %[[POS]], %[[X]], %[[W]] {epsilon = 2.500000e-01 : f64} : (tensor<?x3x16xf32>, tensor<?x2xi32>, tensor<?x16xf32>, tensor<16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>)
func.func @forward(%rows: tensor<?x3x16xf32>, %pos: tensor<?x2xi32>, %x: tensor<?x16xf32>, %w: tensor<16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>) {
  %c = k3.moe_combine %rows, %pos : (tensor<?x3x16xf32>, tensor<?x2xi32>) -> tensor<?x16xf32>
  %h, %y = k3.add_rms_norm %c, %x, %w {epsilon = 0.25 : f64} : (tensor<?x16xf32>, tensor<?x16xf32>, tensor<16xf32>) -> (tensor<?x16xf32>, tensor<?x16xf32>)
  return %h, %y : tensor<?x16xf32>, tensor<?x16xf32>
}

// -----

// A combine read elsewhere too stays, and so does the norm.
// CHECK-LABEL: func.func @forward
// CHECK:         %[[C:.*]] = k3.moe_combine %{{[^ ]*}}, %{{[^ ]*}} :
// CHECK:         k3.add_rms_norm %{{[^ ]*}}, %[[C]],
// CHECK-NOT:     k3.moe_combine_add_rms_norm
func.func @forward(%rows: tensor<?x2x16xbf16>, %pos: tensor<?x2xi32>, %x: tensor<?x16xbf16>, %w: tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>) {
  %c = k3.moe_combine %rows, %pos : (tensor<?x2x16xbf16>, tensor<?x2xi32>) -> tensor<?x16xbf16>
  %h, %y = k3.add_rms_norm %x, %c, %w {epsilon = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>)
  return %y, %c : tensor<?x16xbf16>, tensor<?x16xbf16>
}

// -----

// A combine of another type than the sum (f32 into a bf16 stream) stays:
// the fused op rounds the combine to the sum's type, as its kernel stores.
// CHECK-LABEL: func.func @forward
// CHECK:         k3.moe_combine %
// CHECK:         k3.add_rms_norm
// CHECK-NOT:     k3.moe_combine_add_rms_norm
func.func @forward(%rows: tensor<?x2x16xf32>, %pos: tensor<?x2xi32>, %x: tensor<?x16xbf16>, %w: tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>) {
  %c = k3.moe_combine %rows, %pos : (tensor<?x2x16xf32>, tensor<?x2xi32>) -> tensor<?x16xf32>
  %h, %y = k3.add_rms_norm %x, %c, %w {epsilon = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<?x16xf32>, tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>)
  return %h, %y : tensor<?x16xbf16>, tensor<?x16xbf16>
}
