//===- Passes.h - K3 graph-level passes -------------------------*- C++ -*-===//
#ifndef K3_PASSES_PASSES_H
#define K3_PASSES_PASSES_H

#include "dialects/K3/K3Dialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace mlir::k3 {

/// Whether `op` lies in a decode entry (`k3.decode`, k3-decode-entry: a copy
/// of the model function called with one token per sequence, compiled with
/// the token-by-token KDA form), where the KDA rewrites to chunk forms do
/// not apply.
inline bool inDecodeEntry(Operation *op) {
  auto fn = op->getParentOfType<func::FuncOp>();
  return fn && K3Dialect::DecodeAttrHelper(op->getContext()).isAttrPresent(fn);
}

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::k3

#endif // K3_PASSES_PASSES_H
