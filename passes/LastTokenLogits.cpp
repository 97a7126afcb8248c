//===- LastTokenLogits.cpp - the LM head on the last tokens only -*- C++
//-*-===//
//
// Prefill needs logits only at the last token of each sequence (the runtime
// samples from them; the vocabulary is 163840 for the real model). Every op
// between the last token-mixing ops (attention, KDA, convolutions) and the
// logits that is row-wise (each row of its results depends only on the same
// row of its operands: the LM head, the norms, residual adds, the last
// layer's output projection and its MoE: router, experts, shared expert) and
// whose results only those ops read, runs on the selected rows instead: the
// selection, k3.last_tokens, moves before them. In Kimi-Linear-48B that is
// the last layer's o_proj and MoE: about 2.5 ms of kernels a call in its
// 8192-token prefill on an H200 (bench/results/profile-gpu/
// kl48b-prefill-T8192-20261205T1933Z-1967b73.txt), besides the head. The
// selection then moves up through the last MLA layer's attention and query
// projection where only it reads them (LastTokenRows.h).
//
//===----------------------------------------------------------------------===//
#include "passes/LastTokenRows.h"
#include "passes/Passes.h"
#include "passes/RowWise.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3LASTTOKENLOGITS
#include "passes/Passes.h.inc"

namespace {

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

/// The row-wise ops of `body` that only `logits` needs, in program order:
/// the op producing `logits`, and every row-wise op all of whose results'
/// users are among them, as long as each operand that carries tokens from
/// outside can be selected (else that op stays on all rows, and with it
/// what feeds it).
llvm::SetVector<Operation *> rowWiseFeeders(Block &body, Value logits) {
  llvm::DenseSet<Operation *> excluded;
  while (true) {
    llvm::SetVector<Operation *> found;
    for (Operation &op : llvm::reverse(body)) {
      if (excluded.contains(&op) || tokenOperands(&op).empty() ||
          op.use_empty())
        continue;
      bool onlyForLogits = &op == logits.getDefiningOp() ||
                           llvm::all_of(op.getUsers(), [&](Operation *u) {
                             return found.contains(u);
                           });
      if (onlyForLogits &&
          (&op != logits.getDefiningOp() ||
           llvm::all_of(op.getResults(), [&](Value r) { return r == logits; })))
        found.insert(&op);
    }
    llvm::SetVector<Operation *> ordered;
    for (Operation &op : body)
      if (found.contains(&op))
        ordered.insert(&op);
    Operation *unselectable = nullptr;
    for (Operation *op : ordered)
      for (OpOperand *o : tokenOperands(op))
        if (!found.contains(o->get().getDefiningOp()) &&
            !selectableRows(o->get()))
          unselectable = op;
    if (!unselectable)
      return ordered;
    excluded.insert(unselectable);
  }
}

/// One step of moveSelectionUp on the first selection it applies to.
bool moveOneSelectionUp(Block &body) {
  SmallVector<LastTokensOp> selects(body.getOps<LastTokensOp>());
  return llvm::any_of(selects, moveSelectionUp);
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

    // The row-wise ops that only the logits need, moved after the rows'
    // selection: each operand that carries the tokens and comes from
    // elsewhere is selected (k3.last_tokens, [T, D] to [N, D]) and the ops
    // are recomputed on N rows.
    Block &body = fn.getBody().front();
    llvm::SetVector<Operation *> rowOps = rowWiseFeeders(body, logits);
    OpBuilder b(ret);
    IRMapping map;
    auto selected = [&](Value v) {
      if (!map.contains(v))
        map.map(v, LastTokensOp::create(b, ret.getLoc(),
                                        withDynamicRows(v.getType()), v, cu));
      return map.lookup(v);
    };
    if (rowOps.empty())
      selected(logits);
    for (Operation *op : rowOps) {
      for (OpOperand *o : tokenOperands(op))
        if (!rowOps.contains(o->get().getDefiningOp()))
          selected(o->get());
      Operation *copy = b.clone(*op, map);
      for (OpResult r : copy->getResults())
        r.setType(withDynamicRows(r.getType()));
    }
    Value newLogits = map.lookup(logits);

    // The outputs: logits, and greedy choices made from them.
    SmallVector<Operation *> dead(rowOps.rbegin(), rowOps.rend());
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
    // Then the selections move further up where they can (LastTokenRows.h):
    // the last MLA layer's attention and its query projection.
    while (moveOneSelectionUp(body)) {
    }
    fn.setType(FunctionType::get(fn.getContext(), fn.getArgumentTypes(),
                                 ret.getOperandTypes()));
    return success();
  }
};

} // namespace
} // namespace mlir::k3
