//===- InlineLayers.cpp - expand k3.layer instances -------------*- C++ -*-===//
#include "passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3INLINELAYERS
#include "passes/Passes.h.inc"

namespace {

/// Prefixes the resource names of the ops just cloned from a template.
void prefixNames(Operation *op, StringRef prefix) {
  Builder b(op->getContext());
  auto prefixed = [&](StringRef name) {
    return b.getStringAttr(prefix + name);
  };
  if (auto w = dyn_cast<WeightOp>(op))
    w.setNameAttr(prefixed(w.getName()));
  else if (auto r = dyn_cast<StateReadOp>(op))
    r.setNameAttr(prefixed(r.getName()));
  else if (auto s = dyn_cast<StateWriteOp>(op))
    s.setNameAttr(prefixed(s.getName()));
  else if (auto l = dyn_cast<LayerOp>(op))
    l.setPrefixAttr(prefixed(l.getPrefix()));
}

LogicalResult expand(LayerOp layer, SymbolTable &symbols) {
  auto fn = symbols.lookup<func::FuncOp>(layer.getCallee());
  if (!fn || fn.isExternal())
    return layer.emitOpError() << "layer template '" << layer.getCallee()
                               << "' has no body";
  if (!fn.getBody().hasOneBlock())
    return fn.emitOpError() << "layer template must have a single block";
  if (fn == layer->getParentOfType<func::FuncOp>())
    return layer.emitOpError() << "layer template '" << layer.getCallee()
                               << "' instantiates itself";

  Block &body = fn.getBody().front();
  IRMapping map;
  map.map(body.getArguments(), layer.getArgs());
  OpBuilder builder(layer);
  for (Operation &op : body.without_terminator()) {
    Operation *copy = builder.clone(op, map);
    copy->walk([&](Operation *inner) { prefixNames(inner, layer.getPrefix()); });
  }
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> results;
  for (Value v : ret.getOperands())
    results.push_back(map.lookupOrDefault(v));
  layer.replaceAllUsesWith(results);
  layer.erase();
  return success();
}

struct K3InlineLayersPass : impl::K3InlineLayersBase<K3InlineLayersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    llvm::SetVector<StringAttr> templates;
    module.walk([&](LayerOp op) {
      templates.insert(op.getCalleeAttr().getAttr());
    });

    // Expand outermost instances first; their copies may hold further
    // instances, so repeat until none is left. A depth bound turns a
    // template cycle into a diagnostic instead of a hang.
    constexpr int kMaxDepth = 16;
    for (int depth = 0;; ++depth) {
      SmallVector<LayerOp> layers;
      module.walk([&](LayerOp op) {
        // Instances inside templates are expanded through their callers.
        auto parent = op->getParentOfType<func::FuncOp>();
        if (!parent || !templates.contains(parent.getSymNameAttr()))
          layers.push_back(op);
      });
      if (layers.empty())
        break;
      if (depth == kMaxDepth) {
        layers.front().emitOpError()
            << "layer templates nest deeper than " << kMaxDepth
            << " (a template cycle?)";
        return signalPassFailure();
      }
      for (LayerOp op : layers)
        if (failed(expand(op, symbols)))
          return signalPassFailure();
    }

    for (StringAttr name : templates) {
      auto fn = symbols.lookup<func::FuncOp>(name);
      if (fn && SymbolTable::symbolKnownUseEmpty(fn, module))
        symbols.erase(fn);
    }
  }
};

} // namespace
} // namespace mlir::k3
