// RUN: k3-opt %s --k3-compile='output=%t.k3bin max-tokens=16 max-seqs=2 report=1' -o /dev/null 2>&1 | FileCheck %s --check-prefix=PLAN
// RUN: k3-run %t.k3bin --random-weights 1 --prompt 1,2,3 --max-new-tokens 4 | FileCheck %s --check-prefix=GEN
// RUN: k3-run %t.k3bin --random-weights 1 --prompt 1,2,3 --max-new-tokens 4 --quiet > %t.ids
// RUN: k3-run %t.k3bin --random-weights 1 --prompt 1,2,3 --max-new-tokens 4 --quiet | diff - %t.ids
// RUN: not k3-run %t.k3bin --random-weights 1 --prompt 1,16 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not k3-run %t.k3bin --random-weights 1 --prompt 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,1,2 2>&1 | FileCheck %s --check-prefix=TOOMANY
//
// Errors: the emitter needs an outlined and planned module, and a writable
// output path.
// RUN: not k3-opt %s --k3-emit-artifact='output=%t.unplanned.k3bin' -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNPLANNED
// RUN: not k3-opt %s --k3-outline-kernels --k3-emit-artifact='output=%t.unplanned.k3bin' -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNPLANNED
// RUN: not k3-opt %s --k3-compile='output=%t.missing/dir/x.k3bin' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOWRITE

// A tiny model: embedding, two norms (one shared kernel), the head.
// PLAN: k3-plan-memory: {{[0-9]+}} activation buffers, arena {{[0-9]+}} bytes (without reuse {{[0-9]+}} bytes) at 16 tokens, 2 sequences
// The weights once for the module (every entry shares them).
// PLAN: k3-plan-memory: weights 544 bytes per device (1 device), of which MXFP4 0 bytes
// PLAN-NOT: k3-plan-memory: weights
// GEN: device: cpu
// GEN: generated: {{[0-9]+}},{{[0-9]+}},{{[0-9]+}},{{[0-9]+}}{{$}}
// GEN: prefill: 3 tokens
// GEN: decode: 3 tokens
// RANGE: prompt token 1 = 16 is out of range for vocab_size 16
// TOOMANY: prompt has 17 tokens but the artifact was compiled for max_tokens 16
// UNPLANNED: error: expects an outlined and planned model function 'forward' (run --k3-outline-kernels and --k3-plan-memory)
// NOWRITE: error: cannot write artifact:

module attributes {k3.model = "lit-tiny", k3.vocab_size = 16 : i64} {
func.func @forward(%ids: tensor<?xi32> {k3.name = "token_ids"},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x16xf32> {k3.name = "logits"}) {
  %e = k3.weight "embed" : tensor<16x8xbf16>
  %x = k3.embedding %ids, %e : (tensor<?xi32>, tensor<16x8xbf16>) -> tensor<?x8xf32>
  %n1 = k3.weight "norm1" : tensor<8xbf16>
  %a = k3.rms_norm %x, %n1 {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %n2 = k3.weight "norm2" : tensor<8xbf16>
  %b = k3.rms_norm %a, %n2 {epsilon = 1.0e-5 : f64} : (tensor<?x8xf32>, tensor<8xbf16>) -> tensor<?x8xf32>
  %h = k3.weight "head" : tensor<16x8xbf16>
  %l = k3.linear %b, %h : (tensor<?x8xf32>, tensor<16x8xbf16>) -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
}
