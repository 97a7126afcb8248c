// RUN: k3-opt %s -split-input-file --k3-inline-layers -verify-diagnostics | FileCheck %s

// Each k3.layer is replaced by a copy of its template's body in which every
// k3.weight, k3.state.read and k3.state.write name carries the instance's
// prefix; templates that nothing instantiates any more are erased.

// CHECK-LABEL: func.func @two_instances
// CHECK-SAME:    (%[[X:.*]]: tensor<?x4xf32>)
// CHECK-NOT:     k3.layer
// CHECK:         %[[W0:.*]] = k3.weight "model.layers.0.mlp.weight" : tensor<4x4xf32>
// CHECK:         %[[S0:.*]] = k3.state.read "model.layers.0.conv_state" : tensor<?x4x3xf32>
// CHECK:         k3.state.write "model.layers.0.conv_state", %[[S0]] : tensor<?x4x3xf32>
// CHECK:         %[[Y0:.*]] = k3.linear %[[X]], %[[W0]]
// CHECK:         %[[W1:.*]] = k3.weight "model.layers.1.mlp.weight" : tensor<4x4xf32>
// CHECK:         %[[S1:.*]] = k3.state.read "model.layers.1.conv_state" : tensor<?x4x3xf32>
// CHECK:         k3.state.write "model.layers.1.conv_state", %[[S1]] : tensor<?x4x3xf32>
// CHECK:         %[[Y1:.*]] = k3.linear %[[Y0]], %[[W1]]
// CHECK:         return %[[Y1]], %[[Y0]] : tensor<?x4xf32>, tensor<?x4xf32>
// CHECK-NOT:     func.func private @block
// CHECK-NOT:     "mlp.weight"
func.func private @block(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %w = k3.weight "mlp.weight" : tensor<4x4xf32>
  %s = k3.state.read "conv_state" : tensor<?x4x3xf32>
  k3.state.write "conv_state", %s : tensor<?x4x3xf32>
  %y = k3.linear %x, %w : (tensor<?x4xf32>, tensor<4x4xf32>) -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}
func.func @two_instances(%x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %a = k3.layer @block("model.layers.0.")(%x) : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %b = k3.layer @block("model.layers.1.")(%a) : (tensor<?x4xf32>) -> tensor<?x4xf32>
  return %b, %a : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// Templates instantiating templates: prefixes compose outermost first, and
// every template in the chain is erased. (Templates are listed after their
// users here; for the other order see inline-layers-erase-order.mlir.) A template may return one of its
// arguments unchanged and may have no results at all.

// CHECK-LABEL: module
// CHECK-NOT:     func.func private
// CHECK-LABEL: func.func @nested
// CHECK-SAME:    (%[[X:.*]]: tensor<1x4xf32>)
// CHECK-NOT:     k3.layer
// CHECK:         k3.weight "model.layers.3.self_attn.norm.weight"
// CHECK:         k3.weight "model.layers.3.self_attn.inner.kv_b_proj.weight"
// CHECK:         k3.state.write "model.layers.3.self_attn.inner.cache", %[[X]]
// CHECK:         k3.weight "model.layers.3.mlp.inner.kv_b_proj.weight"
// CHECK:         k3.state.write "model.layers.3.mlp.inner.cache", %[[X]]
// CHECK:         %[[N:.*]] = k3.weight "model.norm.weight"
// CHECK:         return %[[N]], %[[X]]
// CHECK-NOT:     func.func
func.func @nested(%x: tensor<1x4xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>) {
  %n = k3.layer @top("model.")(%x) : (tensor<1x4xf32>) -> tensor<1x4xf32>
  return %n, %x : tensor<1x4xf32>, tensor<1x4xf32>
}
func.func private @top(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  k3.layer @decoder("layers.3.")(%x) : (tensor<1x4xf32>) -> ()
  %n = k3.weight "norm.weight" : tensor<1x4xf32>
  return %n : tensor<1x4xf32>
}
func.func private @decoder(%x: tensor<1x4xf32>) {
  %a = k3.layer @mixer("self_attn.")(%x) : (tensor<1x4xf32>) -> tensor<1x4xf32>
  %b:2 = k3.layer @leaf("mlp.inner.")(%a) : (tensor<1x4xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
  return
}
func.func private @mixer(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %n = k3.weight "norm.weight" : tensor<1x4xf32>
  %a:2 = k3.layer @leaf("inner.")(%x) : (tensor<1x4xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>)
  return %a#1 : tensor<1x4xf32>
}
func.func private @leaf(%x: tensor<1x4xf32>) -> (tensor<1x4xf32>, tensor<1x4xf32>) {
  %w = k3.weight "kv_b_proj.weight" : tensor<1x4xf32>
  k3.state.write "cache", %x : tensor<1x4xf32>
  return %w, %x : tensor<1x4xf32>, tensor<1x4xf32>
}

// -----

// A template that is also the callee of a func.call is still referenced
// after the expansion and so is kept; its own names stay relative.

// CHECK-LABEL: func.func private @shared
// CHECK:         k3.weight "w" : tensor<4xf32>
// CHECK-LABEL: func.func @kept
// CHECK:         k3.weight "p.w" : tensor<4xf32>
// CHECK:         call @shared()
func.func private @shared() -> tensor<4xf32> {
  %w = k3.weight "w" : tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func @kept() -> (tensor<4xf32>, tensor<4xf32>) {
  %a = k3.layer @shared("p.")() : () -> tensor<4xf32>
  %b = func.call @shared() : () -> tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// -----

// A module without k3.layer is left alone (functions included).

// CHECK-LABEL: func.func private @unused_template
// CHECK:         k3.weight "w"
// CHECK-LABEL: func.func @no_layers
func.func private @unused_template() -> tensor<4xf32> {
  %w = k3.weight "w" : tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func @no_layers() {
  return
}

// -----

// A declaration has no body to copy.

func.func private @external(%x: tensor<4xf32>) -> tensor<4xf32>
func.func @external_template(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'k3.layer' op layer template 'external' has no body}}
  %y = k3.layer @external("model.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A missing template is caught by the k3.layer verifier before the pass runs.

func.func @missing_template(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'k3.layer' op 'nowhere' does not name a func.func layer template}}
  %y = k3.layer @nowhere("model.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Templates are straight-line code.

// expected-error @+1 {{'func.func' op layer template must have a single block}}
func.func private @branchy(%x: tensor<4xf32>) -> tensor<4xf32> {
  cf.br ^bb1
^bb1:
  return %x : tensor<4xf32>
}
func.func @multi_block_template(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = k3.layer @branchy("model.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A self-instantiating template would expand forever: the cycle is reported
// at the outermost instance that reaches it, with the chain of templates.

func.func private @recursive(%x: tensor<4xf32>) -> tensor<4xf32> {
  %w = k3.weight "w" : tensor<4xf32>
  %y = k3.layer @recursive("again.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @self_cycle(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'k3.layer' op layer template 'recursive' instantiates itself: recursive -> recursive}}
  %y = k3.layer @recursive("model.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// The same through two templates that instantiate each other, reached
// through a third one.

func.func private @ping(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = k3.layer @pong("b.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func private @pong(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = k3.layer @ping("a.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func private @wrapper(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = k3.layer @ping("w.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @mutual_cycle(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'k3.layer' op layer template 'ping' instantiates itself: wrapper -> ping -> pong -> ping}}
  %y = k3.layer @wrapper("model.")(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Deep but acyclic nesting (more than the old depth bound of 16) expands.

// CHECK-LABEL: func.func @deep
// CHECK:         k3.weight "m.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.w"
// CHECK-NOT:     func.func private
func.func @deep() -> tensor<4xf32> {
  %w = k3.layer @t18("m.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t18() -> tensor<4xf32> {
  %w = k3.layer @t17("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t17() -> tensor<4xf32> {
  %w = k3.layer @t16("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t16() -> tensor<4xf32> {
  %w = k3.layer @t15("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t15() -> tensor<4xf32> {
  %w = k3.layer @t14("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t14() -> tensor<4xf32> {
  %w = k3.layer @t13("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t13() -> tensor<4xf32> {
  %w = k3.layer @t12("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t12() -> tensor<4xf32> {
  %w = k3.layer @t11("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t11() -> tensor<4xf32> {
  %w = k3.layer @t10("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t10() -> tensor<4xf32> {
  %w = k3.layer @t9("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t9() -> tensor<4xf32> {
  %w = k3.layer @t8("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t8() -> tensor<4xf32> {
  %w = k3.layer @t7("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t7() -> tensor<4xf32> {
  %w = k3.layer @t6("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t6() -> tensor<4xf32> {
  %w = k3.layer @t5("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t5() -> tensor<4xf32> {
  %w = k3.layer @t4("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t4() -> tensor<4xf32> {
  %w = k3.layer @t3("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t3() -> tensor<4xf32> {
  %w = k3.layer @t2("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t2() -> tensor<4xf32> {
  %w = k3.layer @t1("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t1() -> tensor<4xf32> {
  %w = k3.layer @t0("a.")() : () -> tensor<4xf32>
  return %w : tensor<4xf32>
}
func.func private @t0() -> tensor<4xf32> {
  %w = k3.weight "w" : tensor<4xf32>
  return %w : tensor<4xf32>
}
