//===- KDAStatePrecision.cpp - the KDA state stored in bf16 -----*- C++ -*-===//
//
// A decode step reads and writes each KDA layer's whole state, H K V f32
// values a sequence: the largest operand of its KDA kernel. Stored in bf16
// between calls it is half the bytes; every kernel that takes the state
// widens it on load and computes in f32 (KernelBuilder::load, store), so
// the state is rounded once per call, where it is written. The rounding
// accumulates across decode steps; docs/precision.md bounds it.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3KDASTATEPRECISION
#include "passes/Passes.h.inc"

namespace {

void setElementType(Value v, Type elt) {
  v.setType(cast<RankedTensorType>(v.getType()).clone(elt));
}

/// Whether `use` is a k3.kda op's initial state.
bool isKDAInitialState(OpOperand &use) {
  auto kda = dyn_cast<KDAOp>(use.getOwner());
  return kda && kda.getInitialState() == use.get();
}

/// The k3.kda op whose final state `v` is, if any.
KDAOp finalStateOf(Value v) {
  auto res = dyn_cast<OpResult>(v);
  auto kda = res ? dyn_cast<KDAOp>(res.getOwner()) : nullptr;
  return kda && kda.getFinalState() == v ? kda : nullptr;
}

struct K3KDAStatePrecisionPass
    : impl::K3KDAStatePrecisionBase<K3KDAStatePrecisionPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    if (stateDType == "f32")
      return success();
    if (stateDType != "bf16")
      return module.emitError()
             << "k3-kda-state-precision: kda-state-dtype must be f32 or "
                "bf16, got '"
             << stateDType << "'";
    // The KDA states: the names written from, or read into, a k3.kda.
    llvm::StringMap<SmallVector<StateReadOp>> reads;
    llvm::StringMap<SmallVector<StateWriteOp>> writes;
    llvm::StringSet<> kdaStates;
    module.walk([&](Operation *op) {
      if (auto r = dyn_cast<StateReadOp>(op)) {
        reads[r.getName()].push_back(r);
        if (llvm::any_of(r.getResult().getUses(), isKDAInitialState))
          kdaStates.insert(r.getName());
      } else if (auto w = dyn_cast<StateWriteOp>(op)) {
        writes[w.getName()].push_back(w);
        if (finalStateOf(w.getValue()))
          kdaStates.insert(w.getName());
      }
    });
    // Every read and write of such a state must be a k3.kda's: anything
    // else would see bf16 where it expects the f32 state.
    for (const auto &entry : kdaStates) {
      StringRef name = entry.getKey();
      for (StateReadOp r : reads.lookup(name))
        for (OpOperand &use : r.getResult().getUses())
          if (!isKDAInitialState(use))
            return use.getOwner()->emitOpError()
                   << "reads the KDA state '" << name
                   << "', which kda-state-dtype=bf16 stores in bf16; only "
                      "k3.kda takes a bf16 state (docs/precision.md)";
      for (StateWriteOp w : writes.lookup(name))
        if (!finalStateOf(w.getValue()))
          return w.emitOpError()
                 << "writes the KDA state '" << name
                 << "' from another op than k3.kda; kda-state-dtype=bf16 "
                    "needs every write to be a k3.kda's final state";
    }
    Type bf16 = BFloat16Type::get(module.getContext());
    for (const auto &entry : kdaStates) {
      StringRef name = entry.getKey();
      for (StateReadOp r : reads.lookup(name))
        setElementType(r.getResult(), bf16);
      for (StateWriteOp w : writes.lookup(name))
        setElementType(finalStateOf(w.getValue()).getFinalState(), bf16);
    }
    // A k3.kda whose state is read but never written back (or the reverse)
    // keeps one type for both (its verifier).
    WalkResult check = module.walk([&](KDAOp op) {
      return failed(op.verify()) ? WalkResult::interrupt()
                                 : WalkResult::advance();
    });
    return failure(check.wasInterrupted());
  }
};

} // namespace
} // namespace mlir::k3
