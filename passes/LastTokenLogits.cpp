//===- LastTokenLogits.cpp - the LM head on the last tokens only -*- C++
//-*-===//
//
// Prefill needs logits only at the last token of each sequence (the runtime
// samples from them; the vocabulary is 163840 for the real model). The
// final norm and the LM head are row-wise, so the selection of those rows,
// k3.last_tokens, can move before them: the head then runs on N rows.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/IRMapping.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3LASTTOKENLOGITS
#include "passes/Passes.h.inc"

namespace {

/// `t` with its leading (token) dimension dynamic: the rows become N.
RankedTensorType withDynamicRows(Type t) {
  auto type = cast<RankedTensorType>(t);
  SmallVector<int64_t> shape(type.getShape());
  shape[0] = ShapedType::kDynamic;
  return type.clone(shape);
}

/// Index of the argument or result of `fn` named `name` (k3.name).
std::optional<unsigned> namedArg(func::FuncOp fn, StringRef name) {
  StringAttr key = K3Dialect::NameAttrHelper(fn.getContext()).getName();
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (auto n = fn.getArgAttrOfType<StringAttr>(i, key); n && n == name)
      return i;
  return std::nullopt;
}
std::optional<unsigned> namedResult(func::FuncOp fn, StringRef name) {
  StringAttr key = K3Dialect::NameAttrHelper(fn.getContext()).getName();
  for (unsigned i = 0; i < fn.getNumResults(); ++i)
    if (auto n = fn.getResultAttrOfType<StringAttr>(i, key); n && n == name)
      return i;
  return std::nullopt;
}

struct K3LastTokenLogitsPass
    : impl::K3LastTokenLogitsBase<K3LastTokenLogitsPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>(entry);
    if ((!fn || fn.isExternal()) && !requireEntry)
      return success();
    if (!fn || fn.isExternal())
      return module.emitError()
             << "k3-last-token-logits: no model function '" << entry << "'";
    std::optional<unsigned> logitsIdx = namedResult(fn, "logits");
    if (!logitsIdx)
      return success(); // nothing samples from this model's outputs
    auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
    Value logits = ret.getOperand(*logitsIdx);
    auto logitsType = cast<RankedTensorType>(logits.getType());
    if (logitsType.getRank() != 2)
      return fn.emitOpError()
             << "k3-last-token-logits: expects the 'logits' result to be "
                "[tokens, vocab], got "
             << logitsType << " (compile with logits=all to keep it)";
    std::optional<unsigned> cuIdx = namedArg(fn, "cu_seqlens");
    if (!cuIdx)
      return fn.emitOpError()
             << "k3-last-token-logits: the model function has no "
                "'cu_seqlens' argument to find each sequence's last token "
                "(compile with logits=all)";
    Value cu = fn.getArgument(*cuIdx);

    // The row-wise ops that produce the logits, from the head back.
    SmallVector<Operation *> chain;
    Value root = logits;
    while (Operation *def = root.getDefiningOp()) {
      Value input;
      if (auto l = dyn_cast<LinearOp>(def))
        input = l.getInput();
      else if (auto n = dyn_cast<RMSNormOp>(def))
        input = n.getInput();
      else if (auto g = dyn_cast<AllGatherOp>(def);
               g && g.getDim() == 1) // a vocabulary-split head's logits
        input = g.getInput();
      else
        break;
      if (cast<RankedTensorType>(input.getType()).getRank() != 2)
        break;
      chain.push_back(def);
      root = input;
    }

    OpBuilder b(ret);
    Value rows = LastTokensOp::create(
        b, ret.getLoc(), withDynamicRows(root.getType()), root, cu);
    IRMapping map;
    map.map(root, rows);
    for (Operation *op : llvm::reverse(chain)) {
      Operation *copy = b.clone(*op, map);
      copy->getResult(0).setType(withDynamicRows(op->getResult(0).getType()));
      map.map(op->getResult(0), copy->getResult(0));
    }
    Value newLogits = map.lookup(logits);

    // The outputs: logits, and greedy choices made from them.
    SmallVector<Operation *> dead(chain.begin(), chain.end());
    for (OpOperand &operand : ret->getOpOperands()) {
      if (operand.get() == logits) {
        operand.set(newLogits);
        continue;
      }
      auto argmax = operand.get().getDefiningOp<ArgmaxOp>();
      if (!argmax || argmax.getLogits() != logits)
        continue;
      auto next = ArgmaxOp::create(
          b, argmax.getLoc(), withDynamicRows(argmax.getType()), newLogits);
      operand.set(next);
      if (!llvm::is_contained(dead, argmax))
        dead.insert(dead.begin(), argmax);
    }
    // What only the outputs used goes (the argmax first, then the head).
    for (Operation *op : dead)
      if (op->use_empty())
        op->erase();
    fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(),
                                 ret.getOperandTypes()));
    return success();
  }
};

} // namespace
} // namespace mlir::k3
