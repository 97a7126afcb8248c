// RUN: k3-opt %s -split-input-file --k3-fuse-add-rms-norm | FileCheck %s
// RUN: k3-opt %s -split-input-file --k3-fuse-add-rms-norm --k3-fuse-add-rms-norm | FileCheck %s

// The pre-norm residual of a plain decoder layer (what k3-import emits for
// Kimi Linear, after k3-inline-layers): the add and the norm of its sum
// become one k3.add_rms_norm; the next residual add takes the fused sum.
// The norm's weight, defined after the add, moves up. The second RUN line
// checks that the rewrite is idempotent.

// CHECK-LABEL: func.func @layer
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x8xf32>, %[[A:[^:]*]]: tensor<?x8xf32>, %[[M:[^:]*]]: tensor<?x8xf32>)
// CHECK:         %[[W:.*]] = k3.weight "post_attention_layernorm.weight"
// CHECK-NEXT:    %[[H:.*]], %[[Y:.*]] = k3.add_rms_norm %[[X]], %[[A]], %[[W]] {epsilon = 1.000000e-05 : f64} : (tensor<?x8xf32>, tensor<?x8xf32>, tensor<8xbf16>) -> (tensor<?x8xf32>, tensor<?x8xf32>)
// CHECK-NOT:     k3.rms_norm
// CHECK:         %[[O:.*]] = k3.add %[[H]], %[[M]]
// CHECK:         return %[[O]], %[[Y]]
func.func @layer(%x: tensor<?x8xf32>, %a: tensor<?x8xf32>, %m: tensor<?x8xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %h = k3.add %x, %a : tensor<?x8xf32>
  %w = k3.weight "post_attention_layernorm.weight" : tensor<8xbf16>
  %y = k3.rms_norm %h, %w {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %o = k3.add %h, %m : tensor<?x8xf32>
  return %o, %y : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// Block AttnRes: the norm reads k3.attn_res_mix, not the add: no fusion.
// CHECK-LABEL: func.func @attn_res
// CHECK:         k3.add %
// CHECK:         k3.attn_res_mix
// CHECK:         k3.rms_norm
// CHECK-NOT:     k3.add_rms_norm
func.func @attn_res(%b: tensor<1x?x8xf32>, %p: tensor<?x8xf32>, %a: tensor<?x8xf32>,
    %nw: tensor<8xbf16>, %pw: tensor<1x8xbf16>) -> tensor<?x8xf32> {
  %p1 = k3.add %p, %a : tensor<?x8xf32>
  %y = k3.attn_res_mix %b, %p1, %nw, %pw {epsilon = 1.0e-5 : f64}
      : (tensor<1x?x8xf32>, tensor<?x8xf32>, tensor<8xbf16>, tensor<1x8xbf16>) -> tensor<?x8xf32>
  %w = k3.weight "post_attention_layernorm.weight" : tensor<8xbf16>
  %yn = k3.rms_norm %y, %w {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  return %yn : tensor<?x8xf32>
}

// -----

// Two norms of one sum: the first is fused, the second reads the fused sum.
// CHECK-LABEL: func.func @two_norms
// CHECK:         %[[H:.*]], %[[Y:.*]] = k3.add_rms_norm
// CHECK-SAME:      epsilon = 1.000000e-05
// CHECK:         %[[Z:.*]] = k3.rms_norm %[[H]]
// CHECK-SAME:      epsilon = 9.9999999999999995E-7
// CHECK:         return %[[Y]], %[[Z]]
func.func @two_norms(%x: tensor<?x8xf32>, %a: tensor<?x8xf32>, %w: tensor<8xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %h = k3.add %x, %a : tensor<?x8xf32>
  %y = k3.rms_norm %h, %w {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %z = k3.rms_norm %h, %w {epsilon = 1.0e-6 : f64} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  return %y, %z : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// An add whose sum no norm reads stays an add.
// CHECK-LABEL: func.func @no_norm
// CHECK:         k3.add
// CHECK-NOT:     k3.add_rms_norm
func.func @no_norm(%x: tensor<?x8xf32>, %a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %h = k3.add %x, %a : tensor<?x8xf32>
  return %h : tensor<?x8xf32>
}
