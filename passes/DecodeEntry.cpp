//===- DecodeEntry.cpp - a second entry for one-token decode steps -*- C++
//-*-===//
//
// Prefill and decode want different KDA forms: chunks (tensor cores, the UT
// transform) for many tokens per sequence, the token-by-token recurrence for
// one. The artifact carries both entries; the caller picks by the call's
// shape (k3-run and python/k3: the prompt through `entry`, the steps after
// it through `<entry>_decode`).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/SymbolTable.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3DECODEENTRY
#include "passes/Passes.h.inc"

namespace {

struct K3DecodeEntryPass : impl::K3DecodeEntryBase<K3DecodeEntryPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>(entry);
    if (!fn) {
      module.emitError() << "k3-decode-entry: no model function '" << entry
                         << "'";
      return signalPassFailure();
    }
    std::string name = entry + "_decode";
    if (module.lookupSymbol(name)) {
      module.emitError() << "k3-decode-entry: '" << name << "' already exists";
      return signalPassFailure();
    }
    // Only the KDA lowering differs between the two forms.
    if (!fn.walk([](KDAOp) {
             return WalkResult::interrupt();
           }).wasInterrupted())
      return;
    OpBuilder b(fn);
    b.setInsertionPointAfter(fn);
    auto decode = cast<func::FuncOp>(b.clone(*fn));
    decode.setSymName(name);
    K3Dialect::DecodeAttrHelper(b.getContext())
        .setAttr(decode, b.getUnitAttr());
  }
};

} // namespace
} // namespace mlir::k3
