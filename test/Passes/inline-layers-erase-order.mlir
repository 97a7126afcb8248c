// RUN: k3-opt %s --k3-inline-layers | FileCheck %s --implicit-check-not="func.func private"

// Regression: templates used to be erased in the order their first k3.layer
// was met, so a template defined before the template that instantiates it
// (as here) still had a use when its turn came and survived as dead code.
// Dead templates are now erased to a fixed point.

// CHECK-LABEL: func.func @model
// CHECK:         k3.weight "model.outer.inner.w"
func.func private @inner() -> tensor<4xf32> {
  %w = k3.weight "inner.w" : tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @outer() -> tensor<4xf32> {
  %w = k3.layer @inner("outer.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func @model() -> tensor<4xf32> {
  %w = k3.layer @outer("model.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
