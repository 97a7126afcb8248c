//===- FuseAddRMSNorm.cpp - residual add + RMSNorm in one op ----*- C++ -*-===//
//
// The pre-norm residual of a decoder layer, h = x + r; y = rms_norm(h),
// reads and writes the [T, D] residual stream three times as two kernels;
// k3.add_rms_norm does it in one pass over each row.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEADDRMSNORM
#include "passes/Passes.h.inc"

namespace {

struct FuseAddIntoRMSNorm : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add,
                                PatternRewriter &rewriter) const override {
    // The first norm of the sum in the add's block.
    RMSNormOp norm;
    for (Operation *user : add->getUsers()) {
      auto n = dyn_cast<RMSNormOp>(user);
      if (!n || n.getInput() != add.getResult() ||
          n->getBlock() != add->getBlock())
        continue;
      if (!norm || n->isBeforeInBlock(norm))
        norm = n;
    }
    if (!norm)
      return rewriter.notifyMatchFailure(add, "no k3.rms_norm of the sum");
    // The fused op replaces the add where it stands: the weight must be
    // available there (an argument, or a k3.weight, which can move up).
    Value w = norm.getWeight();
    Operation *wDef = w.getDefiningOp();
    if (wDef && !isa<WeightOp>(wDef))
      return rewriter.notifyMatchFailure(add, "norm weight is not a k3.weight");
    if (wDef && wDef->getBlock() != add->getBlock())
      return rewriter.notifyMatchFailure(add, "norm weight in another block");
    if (wDef && add->isBeforeInBlock(wDef))
      rewriter.moveOpBefore(wDef, add);

    rewriter.setInsertionPoint(add);
    auto fused = AddRMSNormOp::create(rewriter, add.getLoc(), add.getType(),
                                      norm.getType(), add.getLhs(),
                                      add.getRhs(), w, norm.getEpsilonAttr());
    rewriter.replaceOp(norm, fused.getResult());
    rewriter.replaceOp(add, fused.getSum());
    return success();
  }
};

struct K3FuseAddRMSNormPass : impl::K3FuseAddRMSNormBase<K3FuseAddRMSNormPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseAddIntoRMSNorm>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::k3
