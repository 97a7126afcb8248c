//===- Passes.h - K3 graph-level passes -------------------------*- C++ -*-===//
#ifndef K3_PASSES_PASSES_H
#define K3_PASSES_PASSES_H

#include "dialects/K3/K3Dialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"

namespace mlir::k3 {

/// Whether weight `w` is available before `at`, or can be made so by
/// hoistWeightBefore: a block argument, a value defined before `at`, or a
/// k3.weight (no operands), which may move anywhere in its block.
inline bool weightMovableBefore(Value w, Operation *at) {
  Operation *def = w.getDefiningOp();
  return !def || isa<WeightOp>(def) || def->isBeforeInBlock(at);
}

/// Moves `w`'s definition (a k3.weight) before `at` where it comes later in
/// the same block.
inline void hoistWeightBefore(Value w, Operation *at) {
  Operation *def = w.getDefiningOp();
  if (def && def->getBlock() == at->getBlock() && !def->isBeforeInBlock(at))
    def->moveBefore(at);
}

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::k3

#endif // K3_PASSES_PASSES_H
