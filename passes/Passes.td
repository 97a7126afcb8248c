//===- Passes.td - K3 graph-level passes -------------------*- tablegen -*-===//
//
// Passes that rewrite the K3 dialect into K3 (fusions, the chunkwise KDA
// form). Lowerings out of the dialect live in lowering/.
//
//===----------------------------------------------------------------------===//

#ifndef K3_PASSES_TD
#define K3_PASSES_TD

include "mlir/Pass/PassBase.td"

def K3FuseKDAGate : Pass<"k3-fuse-kda-gate"> {
  let summary = "Fold k3.kda_gate into the in-op gate of k3.kda";
  let description = [{
    Rewrites `k3.kda(..., g = k3.kda_gate(z, A_log, dt_bias), ...)` into a
    `k3.kda` that takes the raw `z` with `gate_params(A_log, dt_bias)` and
    computes the log-decay itself. Kernels can then compute the gate in registers
    instead of reading and writing an f32 `[T, H, K]` tensor: the anchors
    (fla `chunk_kda`, FlashKDA) fuse the gate the same way.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect", "::mlir::tensor::TensorDialect"];
}

def K3InlineLayers : Pass<"k3-inline-layers", "::mlir::ModuleOp"> {
  let summary = "Expand k3.layer instances into their templates";
  let description = [{
    Replaces every `k3.layer @template("prefix")(...)` by a copy of the
    template's body in which each `k3.weight`, `k3.state.read` and
    `k3.state.write` name is prefixed (nested instances compose their
    prefixes), then erases the templates nothing refers to any more. After
    it every resource name is absolute: the weight manifest and the decode
    state of the artifact are read off the IR.
  }];
  let dependentDialects = ["::mlir::k3::K3Dialect", "::mlir::func::FuncDialect"];
}

#endif // K3_PASSES_TD
