//===- RowWise.cpp - ops that work token by token ----------------*- C++
//-*-===//
#include "passes/RowWise.h"
#include "passes/Partition.h"

#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include "llvm/ADT/TypeSwitch.h"

namespace mlir::k3 {

SmallVector<OpOperand *> tokenOperands(Operation *op) {
  auto operands = [&](std::initializer_list<unsigned> idx) {
    SmallVector<OpOperand *> out;
    for (unsigned i : idx)
      out.push_back(&op->getOpOperand(i));
    return out;
  };
  return TypeSwitch<Operation *, SmallVector<OpOperand *>>(op)
      .Case<LinearOp, RMSNormOp, MoERouterOp, GLUMLPOp>(
          [&](auto) { return operands({0}); })
      .Case<AddOp, SigmoidGateOp, AddRMSNormOp>(
          [&](auto) { return operands({0, 1}); })
      .Case<MoEExpertsOp>([&](auto) { return operands({0, 1, 2}); })
      .Case<AllReduceOp>([&](AllReduceOp r) {
        // TP's and EP's partial sums of every rank's same rows; a
        // context-parallel group's ranks hold other tokens.
        return r.getGroup() != kContextParallel ? operands({0})
                                                : SmallVector<OpOperand *>();
      })
      .Case<AllGatherOp>([&](AllGatherOp g) {
        // A vocabulary-split head's logits: gathered along the columns.
        return g.getDim() == 1 ? operands({0}) : SmallVector<OpOperand *>();
      })
      .Default([](Operation *) { return SmallVector<OpOperand *>(); });
}

bool onLastTokenRows(Value v) {
  // Every token operand of a row-wise op has its rows; the first will do.
  for (int depth = 0; depth < 64; ++depth) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (isa<LastTokensOp>(def))
      return true;
    // The last tokens' latent attention (LastTokenRows.h), and the reshapes
    // of its heads.
    if (auto a = dyn_cast<LatentAttentionOp>(def)) {
      Value cu = a.getCuSeqlens();
      return cu && cu.getDefiningOp<LastTokenContextOp>();
    }
    if (isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(def)) {
      v = def->getOperand(0);
      continue;
    }
    SmallVector<OpOperand *> tokens = tokenOperands(def);
    if (tokens.empty())
      return false;
    v = tokens.front()->get();
  }
  return false;
}

} // namespace mlir::k3
