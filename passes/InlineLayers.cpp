//===- InlineLayers.cpp - expand k3.layer instances -------------*- C++ -*-===//
#include "passes/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
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
    return layer.emitOpError()
           << "layer template '" << layer.getCallee() << "' has no body";
  if (!fn.getBody().hasOneBlock())
    return fn.emitOpError() << "layer template must have a single block";

  Block &body = fn.getBody().front();
  IRMapping map;
  map.map(body.getArguments(), layer.getArgs());
  OpBuilder builder(layer);
  for (Operation &op : body.without_terminator()) {
    Operation *copy = builder.clone(op, map);
    copy->walk(
        [&](Operation *inner) { prefixNames(inner, layer.getPrefix()); });
  }
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> results;
  for (Value v : ret.getOperands())
    results.push_back(map.lookupOrDefault(v));
  layer.replaceAllUsesWith(results);
  layer.erase();
  return success();
}

/// Templates instantiated (directly) by each function's k3.layer ops, in
/// order of first appearance.
using TemplateGraph = llvm::DenseMap<StringAttr, SmallVector<StringAttr>>;

/// Depth-first search for a template cycle reachable from `name`. On
/// success `chain` holds the templates from `name` around the cycle back to
/// the first repeated template (e.g. ping, pong, ping).
bool findCycle(StringAttr name, const TemplateGraph &graph,
               SmallVectorImpl<StringAttr> &chain,
               llvm::DenseSet<StringAttr> &done) {
  if (llvm::is_contained(chain, name)) {
    chain.push_back(name);
    return true;
  }
  if (done.contains(name))
    return false;
  chain.push_back(name);
  auto it = graph.find(name);
  if (it != graph.end())
    for (StringAttr callee : it->second)
      if (findCycle(callee, graph, chain, done))
        return true;
  chain.pop_back();
  done.insert(name);
  return false;
}

struct K3InlineLayersPass : impl::K3InlineLayersBase<K3InlineLayersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);
    llvm::SetVector<StringAttr> templates;
    TemplateGraph graph;
    module.walk([&](LayerOp op) {
      StringAttr callee = op.getCalleeAttr().getAttr();
      templates.insert(callee);
      if (auto parent = op->getParentOfType<func::FuncOp>()) {
        auto &callees = graph[parent.getSymNameAttr()];
        if (!llvm::is_contained(callees, callee))
          callees.push_back(callee);
      }
    });

    // Outermost instances: those not inside a template (instances inside
    // templates are expanded through their callers).
    auto outermost = [&] {
      SmallVector<LayerOp> layers;
      module.walk([&](LayerOp op) {
        auto parent = op->getParentOfType<func::FuncOp>();
        if (!parent || !templates.contains(parent.getSymNameAttr()))
          layers.push_back(op);
      });
      return layers;
    };

    // A template that (transitively) instantiates itself would expand
    // forever: report the cycle at the outermost instance that reaches it.
    llvm::DenseSet<StringAttr> acyclic;
    bool cyclic = false;
    for (LayerOp op : outermost()) {
      SmallVector<StringAttr> chain;
      if (!findCycle(op.getCalleeAttr().getAttr(), graph, chain, acyclic))
        continue;
      std::string path;
      for (auto [i, name] : llvm::enumerate(chain))
        path += (i ? " -> " : "") + name.str();
      StringAttr repeated = chain.back();
      op.emitOpError() << "layer template '" << repeated.getValue()
                       << "' instantiates itself: " << path;
      cyclic = true;
    }
    if (cyclic)
      return signalPassFailure();

    // Expand outermost instances first; their copies may hold further
    // instances, so repeat until none is left (at most one round per
    // template, as the template graph has no cycle).
    for (;;) {
      SmallVector<LayerOp> layers = outermost();
      if (layers.empty())
        break;
      for (LayerOp op : layers)
        if (failed(expand(op, symbols)))
          return signalPassFailure();
    }

    // Erase the templates nothing refers to any more. Erasing one may free
    // the templates only it instantiated, so repeat to a fixed point.
    for (bool erased = true; erased;) {
      erased = false;
      for (StringAttr name : templates) {
        auto fn = symbols.lookup<func::FuncOp>(name);
        if (fn && SymbolTable::symbolKnownUseEmpty(fn, module)) {
          symbols.erase(fn);
          erased = true;
        }
      }
    }
  }
};

} // namespace
} // namespace mlir::k3
