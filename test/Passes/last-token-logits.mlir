// RUN: not k3-opt %s -split-input-file --k3-last-token-logits 2>/dev/null | FileCheck %s
// RUN: not k3-opt %s -split-input-file --k3-last-token-logits 2>&1 >/dev/null | FileCheck %s --check-prefix=ERR
// RUN: not k3-opt %s -split-input-file --k3-last-token-logits=entry=missing 2>&1 >/dev/null | FileCheck %s --check-prefix=MISSING
// RUN: k3-opt %s -split-input-file --k3-last-token-logits="entry=missing require-entry=0" 2>&1 | FileCheck %s --check-prefix=OPTIONAL

// The final norm and the head move after k3.last_tokens; next_tokens follows
// the new logits; the other output (a hidden state) keeps its T rows.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME:    %[[IDS:[a-z0-9]+]]: tensor<?xi32> {k3.name = "token_ids"}, %[[CU:[a-z0-9]+]]: tensor<?xi32> {k3.name = "cu_seqlens"}
// CHECK:         %[[H:.*]] = k3.embedding
// CHECK:         %[[LAST:.*]] = k3.last_tokens %[[H]], %[[CU]] : (tensor<?x8xf32>, tensor<?xi32>) -> tensor<?x8xf32>
// CHECK:         %[[N:.*]] = k3.rms_norm %[[LAST]]
// CHECK:         %[[L:.*]] = k3.linear %[[N]]
// CHECK:         %[[A:.*]] = k3.argmax %[[L]]
// CHECK:         return %[[L]], %[[A]], %[[H]]
// CHECK-NOT:     k3.rms_norm
// MISSING: error: k3-last-token-logits: no model function 'missing'
// A model without the function (k3-compile on a model without a decode entry):
// left alone.
// OPTIONAL-NOT: error
// OPTIONAL-NOT: k3.last_tokens
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}, tensor<?xi32> {k3.name = "next_tokens"},
        tensor<?x8xf32> {k3.name = "hidden"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %h = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %nw = k3.weight "norm" : tensor<8xbf16>
  %n = k3.rms_norm %h, %nw {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %w = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %n, %w : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  %a = k3.argmax %l : (tensor<?x16xf32>) -> tensor<?xi32>
  return %l, %a, %h : tensor<?x16xf32>, tensor<?xi32>, tensor<?x8xf32>
}

// -----

// A model without outputs named logits is left alone.
// CHECK-LABEL: func.func @forward(
// CHECK-NOT:     k3.last_tokens
func.func @forward(%x: tensor<?x8xf32> {k3.name = "token_ids"}) -> tensor<?x8xf32> {
  return %x : tensor<?x8xf32>
}

// -----

// Without cu_seqlens the last tokens are unknown: a clear error.
// ERR: error: 'func.func' op k3-last-token-logits: the model function has no 'cu_seqlens' argument to find each sequence's last token (compile with logits=all)
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x16xbf16>
  %h = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x16xbf16>) -> tensor<?x16xf32>
  return %h : tensor<?x16xf32>
}

// -----

// A vocabulary-split head (k3-partition vocab-split=1): the all-gather of
// the logits is row-wise too, and moves after the selection with the head.
// CHECK-LABEL: func.func @forward(
// CHECK:         %[[LAST:.*]] = k3.last_tokens
// CHECK:         %[[L:.*]] = k3.linear %[[LAST]]
// CHECK:         %[[G:.*]] = k3.all_gather %[[L]] {dim = 1 : i64, group = "tp", group_size = 2 : i64} : (tensor<?x8xf32>) -> tensor<?x16xf32>
// CHECK:         return %[[G]]
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"}, %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %h = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %w = k3.weight "head" : tensor<8x8xbf16>
  %l = k3.linear %h, %w : (tensor<?x8xf32>, tensor<8x8xbf16>) -> tensor<?x8xf32>
  %g = k3.all_gather %l {group = "tp", group_size = 2 : i64, dim = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x16xf32>
  return %g : tensor<?x16xf32>
}
