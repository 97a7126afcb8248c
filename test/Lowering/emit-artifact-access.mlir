// Section ANED's access byte: each launch's operands are read and its
// results written, as `k3-run --describe` prints them; launch graphs run
// launches that share no written bytes side by side (K3_LAUNCH_LANES).
// RUN: k3-opt %s --k3-compile='output=%t.k3bin max-tokens=16 max-seqs=2 decode-entry=0' -o /dev/null
// RUN: k3-run %t.k3bin --describe | FileCheck %s

// CHECK-LABEL: launch 0: embedding
// CHECK-NEXT: arg 0: buffer 'token_ids' (kernel reads <= 4*num_tokens bytes)
// CHECK-NEXT: arg 1: weight 'embed' (kernel touches <= 256 bytes)
// CHECK-NEXT: arg 2: buffer '[[X:act[0-9]+]]' (kernel writes <= 32*num_tokens bytes)
// CHECK-LABEL: launch 1: last_tokens
// CHECK-NEXT: arg 0: buffer '[[X]]' (kernel reads <= 32*num_tokens bytes)
// CHECK-NEXT: arg 1: buffer 'cu_seqlens' (kernel reads <= 4*num_seqs+4 bytes)
// CHECK-NEXT: arg 2: buffer '[[L:act[0-9]+]]' (kernel writes <= 32*num_seqs bytes)
// CHECK-LABEL: launch 2: rms_norm
// CHECK-NEXT: arg 0: buffer '[[L]]' (kernel reads <= 32*num_seqs bytes)
// CHECK-NEXT: arg 1: weight 'norm'
// CHECK-NEXT: arg 2: buffer '[[N:act[0-9]+]]' (kernel writes <= 32*num_seqs bytes)
// CHECK-LABEL: launch 3: linear
// CHECK-NEXT: arg 0: buffer '[[N]]' (kernel reads <= 32*num_seqs bytes)
// CHECK-NEXT: arg 1: weight 'head'
// CHECK-NEXT: arg 2: buffer 'logits' (kernel writes <= 64*num_seqs bytes)
// CHECK-NEXT: arg 3: symbol num_tokens{{$}}

module attributes {k3.model = "lit-access", k3.vocab_size = 16 : i64} {
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"},
                   %ctx: tensor<?xi32> {k3.name = "context_lens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %w = k3.weight "norm" : tensor<8xf32>
  %n = k3.rms_norm %x, %w {epsilon = 1.0e-6 : f64} : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %n, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}
