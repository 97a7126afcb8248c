// RUN: k3-opt %s -split-input-file --k3-kda-state-precision=kda-state-dtype=bf16 -verify-diagnostics | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-kda-state-precision | FileCheck %s --check-prefix=F32
// RUN: not k3-opt %s -split-input-file --k3-kda-state-precision=kda-state-dtype=f16 2>&1 | FileCheck %s --check-prefix=BAD

// The KDA state kept between calls becomes bf16: its read, the k3.kda's
// initial and final state and its write; the convolution state and the
// activations keep their types. With the default (f32) nothing changes.

// CHECK-LABEL: func.func @layer
// CHECK:       %[[S0:.*]] = k3.state.read "layers.0.recurrent_state" : tensor<?x2x16x16xbf16>
// CHECK:       %{{.*}}, %[[S:.*]] = k3.kda {{.*}} initial_state(%[[S0]])
// CHECK-SAME:    -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xbf16>)
// CHECK:       k3.state.write "layers.0.recurrent_state", %[[S]] : tensor<?x2x16x16xbf16>
// CHECK:       k3.state.write "layers.0.conv_state", %{{.*}} : tensor<?x32x3xf32>
// F32-LABEL:   func.func @layer
// F32:         k3.state.read "layers.0.recurrent_state" : tensor<?x2x16x16xf32>
// F32-NOT:     bf16
// BAD: kda-state-dtype must be f32 or bf16, got 'f16'
func.func @layer(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %cu: tensor<?xi32>,
                 %conv: tensor<?x32x3xf32>) -> tensor<1x?x2x16xf32> {
  %s0 = k3.state.read "layers.0.recurrent_state" : tensor<?x2x16x16xf32>
  %o, %s = k3.kda %q, %q, %q, %q, %beta initial_state(%s0) cu_seqlens(%cu)
      {scale = 2.500000e-01 : f64, use_beta_sigmoid, use_qk_l2norm}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?x2x16x16xf32>, tensor<?xi32>)
      -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
  k3.state.write "layers.0.recurrent_state", %s : tensor<?x2x16x16xf32>
  k3.state.write "layers.0.conv_state", %conv : tensor<?x32x3xf32>
  return %o : tensor<1x?x2x16xf32>
}

// -----

// A prefill without an initial state writes it: the final state alone.
// CHECK-LABEL: func.func @fresh
// CHECK:       -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xbf16>)
// CHECK:       k3.state.write "layers.1.recurrent_state", %{{.*}} : tensor<?x2x16x16xbf16>
func.func @fresh(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %cu: tensor<?xi32>)
    -> tensor<1x?x2x16xf32> {
  %o, %s = k3.kda %q, %q, %q, %q, %beta cu_seqlens(%cu)
      {scale = 2.500000e-01 : f64, use_beta_sigmoid, use_qk_l2norm}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?xi32>)
      -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
  k3.state.write "layers.1.recurrent_state", %s : tensor<?x2x16x16xf32>
  return %o : tensor<1x?x2x16xf32>
}

// -----

// A KDA state that something else reads too would see bf16: an error that
// names it, not a silent f32 state.
func.func @shared_read(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %cu: tensor<?xi32>)
    -> tensor<?x2x16x16xf32> {
  %s0 = k3.state.read "layers.2.recurrent_state" : tensor<?x2x16x16xf32>
  %o, %s = k3.kda %q, %q, %q, %q, %beta initial_state(%s0) cu_seqlens(%cu)
      {scale = 2.500000e-01 : f64, use_beta_sigmoid, use_qk_l2norm}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?x2x16x16xf32>, tensor<?xi32>)
      -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
  // expected-error @below {{reads the KDA state 'layers.2.recurrent_state', which kda-state-dtype=bf16 stores in bf16; only k3.kda takes a bf16 state}}
  return %s0 : tensor<?x2x16x16xf32>
}

// -----

// A write from elsewhere (a model input) of a state a k3.kda reads.
func.func @foreign_write(%q: tensor<1x?x2x16xf32>, %beta: tensor<1x?x2xf32>, %cu: tensor<?xi32>,
                         %init: tensor<?x2x16x16xf32>) -> tensor<1x?x2x16xf32> {
  %s0 = k3.state.read "layers.3.recurrent_state" : tensor<?x2x16x16xf32>
  %o, %s = k3.kda %q, %q, %q, %q, %beta initial_state(%s0) cu_seqlens(%cu)
      {scale = 2.500000e-01 : f64, use_beta_sigmoid, use_qk_l2norm}
      : (tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>, tensor<1x?x2x16xf32>,
         tensor<1x?x2xf32>, tensor<?x2x16x16xf32>, tensor<?xi32>)
      -> (tensor<1x?x2x16xf32>, tensor<?x2x16x16xf32>)
  // expected-error @below {{writes the KDA state 'layers.3.recurrent_state' from another op than k3.kda}}
  k3.state.write "layers.3.recurrent_state", %init : tensor<?x2x16x16xf32>
  return %o : tensor<1x?x2x16xf32>
}
