// A bound on the values of an entry input: the argument attributes
// `k3.max_value` / `k3.max_value_reason` become the input's bound in the
// artifact (section IMAX), which k3-run prints and the runtime checks
// before any launch. Without a decode entry, decode steps go through
// `forward` with context_lens > 0: the prefill runs, the first decode step
// is refused.
// RUN: k3-opt %s --k3-compile='output=%t.k3bin max-tokens=16 max-seqs=2 decode-entry=0' -o /dev/null
// RUN: k3-run %t.k3bin --describe | FileCheck %s --check-prefix=DESC
// RUN: k3-run %t.k3bin --random-weights 1 --prompt 1,2,3 --max-new-tokens 1 | FileCheck %s --check-prefix=PREFILL
// RUN: not k3-run %t.k3bin --random-weights 1 --prompt 1,2,3 --max-new-tokens 2 2>&1 | FileCheck %s --check-prefix=DECODE
// Malformed attributes: emit-artifact-max-value-errors.mlir.

// DESC: k3bin 1.4
// DESC: entry forward: 3 inputs
// DESC-NEXT: input token_ids: i32 [num_tokens]{{$}}
// DESC-NEXT: input cu_seqlens: i32 [num_seqs+1]{{$}}
// DESC-NEXT: input context_lens: i32 [num_seqs], values <= 0: lit: sequences start empty{{$}}
// PREFILL: prefill: 3 tokens
// DECODE: entry 'forward' input 'context_lens': element 0 = 3 exceeds 0: lit: sequences start empty

module attributes {k3.model = "lit-bound", k3.vocab_size = 16 : i64} {
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %ctx: tensor<?xi32> {k3.name = "context_lens", k3.max_value = 0 : i64,
                                        k3.max_value_reason = "lit: sequences start empty"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %x, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}
