// Malformed value bounds on entry arguments (`k3.max_value`,
// `k3.max_value_reason`; emit-artifact-max-value.mlir has the valid one)
// are diagnosed at the argument's function.
// RUN: k3-opt %s -split-input-file -verify-diagnostics --k3-compile='output=%t.k3bin max-tokens=16 max-seqs=2 decode-entry=0' -o /dev/null

module attributes {k3.model = "lit-bound", k3.vocab_size = 16 : i64} {
// expected-error @+1 {{'func.func' op argument 2 ('context_lens'): k3.max_value must not be negative, got -1 : i64}}
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %ctx: tensor<?xi32> {k3.name = "context_lens", k3.max_value = -1 : i64})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %x, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}

// -----

module attributes {k3.model = "lit-bound", k3.vocab_size = 16 : i64} {
// expected-error @+1 {{'func.func' op argument 2 ('context_lens'): k3.max_value must be an integer, got "0"}}
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %ctx: tensor<?xi32> {k3.name = "context_lens", k3.max_value = "0"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %x, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}

// -----

module attributes {k3.model = "lit-bound", k3.vocab_size = 16 : i64} {
// expected-error @+1 {{'func.func' op argument 2 ('context_lens'): k3.max_value_reason without k3.max_value}}
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %ctx: tensor<?xi32> {k3.name = "context_lens", k3.max_value_reason = "why"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %x, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}

// -----

module attributes {k3.model = "lit-bound", k3.vocab_size = 16 : i64} {
// expected-error @+1 {{'func.func' op argument 2 ('context_lens'): k3.max_value_reason must be a string, got 7 : i64}}
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %ctx: tensor<?xi32> {k3.name = "context_lens", k3.max_value = 0 : i64, k3.max_value_reason = 7})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %x, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}

// -----

module attributes {k3.model = "lit-bound", k3.vocab_size = 16 : i64} {
// expected-error @+1 {{'func.func' op argument 2 ('scale'): k3.max_value needs an integer input, not f32}}
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %s: tensor<4xf32> {k3.name = "scale", k3.max_value = 0 : i64})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %x, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}
