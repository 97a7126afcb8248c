//===- ExposeRouting.cpp - return the MoE routers' choices ------*- C++ -*-===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3EXPOSEROUTING
#include "passes/Passes.h.inc"

namespace {

struct K3ExposeRoutingPass : impl::K3ExposeRoutingBase<K3ExposeRoutingPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>(entry);
    if (!fn) {
      module.emitError() << "no model function '" << entry << "'";
      return signalPassFailure();
    }
    if (!fn.getBody().hasOneBlock()) {
      fn.emitOpError() << "model function must be a single block (run "
                          "--k3-inline-layers first)";
      return signalPassFailure();
    }
    SmallVector<std::pair<Value, std::string>> exposed;
    WalkResult walk = fn.walk([&](MoERouterOp router) {
      auto weight = router.getWeight().getDefiningOp<WeightOp>();
      StringRef name = weight ? weight.getName() : StringRef();
      if (!name.consume_back("gate.weight")) {
        router.emitOpError() << "router weight must be a k3.weight named "
                                "'<prefix>gate.weight' to name its choice";
        return WalkResult::interrupt();
      }
      exposed.push_back({router.getIndices(), (name + "router_indices").str()});
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();
    if (exposed.empty())
      return;

    Builder b(module.getContext());
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    for (auto &[v, name] : exposed) {
      // insertResult keeps the per-result attributes in step with the type.
      unsigned index = fn.getNumResults();
      if (failed(fn.insertResult(
              index, v.getType(),
              b.getDictionaryAttr(b.getNamedAttr(
                  K3Dialect::NameAttrHelper(b.getContext()).getName(),
                  b.getStringAttr(name)))))) {
        fn.emitOpError() << "cannot add result '" << name << "'";
        return signalPassFailure();
      }
      ret->insertOperands(ret->getNumOperands(), v);
    }
  }
};

} // namespace
} // namespace mlir::k3
