// RUN: k3-opt %s -split-input-file --k3-split-glu-mlp | FileCheck %s

// A GLU MLP becomes its activated gate/up projection (h in the input's
// element type) and a k3.linear for the down projection, which takes over
// the result's type.

// CHECK-LABEL: func.func @silu
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x32xbf16>, %[[G:[^:]*]]: tensor<48x32xbf16>, %[[U:[^:]*]]: tensor<48x32xbf16>, %[[D:[^:]*]]: tensor<32x48xbf16>)
// CHECK-NOT:     k3.glu_mlp
// CHECK:         %[[H:.*]] = k3.glu_gate_up silu %[[X]], %[[G]], %[[U]] : {{.*}} -> tensor<?x48xbf16>
// CHECK:         %[[Y:.*]] = k3.linear %[[H]], %[[D]] : (tensor<?x48xbf16>, tensor<32x48xbf16>) -> tensor<?x32xf32>
// CHECK:         return %[[Y]]
func.func @silu(%x: tensor<?x32xbf16>, %g: tensor<48x32xbf16>, %u: tensor<48x32xbf16>, %d: tensor<32x48xbf16>) -> tensor<?x32xf32> {
  %y = k3.glu_mlp silu %x, %g, %u, %d : (tensor<?x32xbf16>, tensor<48x32xbf16>, tensor<48x32xbf16>, tensor<32x48xbf16>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

// SiTU's parameters stay on the gate/up op.

// CHECK-LABEL: func.func @situ
// CHECK:         k3.glu_gate_up situ {{.*}} {beta = 2.000000e+00 : f64}
// CHECK:         k3.linear
func.func @situ(%x: tensor<?x32xf32>, %g: tensor<48x32xf32>, %u: tensor<48x32xf32>, %d: tensor<32x48xf32>) -> tensor<?x32xf32> {
  %y = k3.glu_mlp situ %x, %g, %u, %d {beta = 2.0 : f64} : (tensor<?x32xf32>, tensor<48x32xf32>, tensor<48x32xf32>, tensor<32x48xf32>) -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}
