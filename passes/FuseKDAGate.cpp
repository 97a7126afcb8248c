//===- FuseKDAGate.cpp - fold the decay gate into k3.kda --------*- C++ -*-===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEKDAGATE
#include "passes/Passes.h.inc"

namespace {

/// The gate's input is [T, H, K] while k3.kda sees [B, T, H, K]: the model
/// connects them with a tensor.expand_shape, which the fused op takes over.
struct FoldGateIntoKDA : OpRewritePattern<KDAOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(KDAOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getGateKind())
      return rewriter.notifyMatchFailure(op, "gate already fused");
    Value g = op.getG();
    Operation *reshape = nullptr;
    if (auto expand = g.getDefiningOp<tensor::ExpandShapeOp>()) {
      reshape = expand;
      g = expand.getSrc();
    }
    auto gate = g.getDefiningOp<KDAGateOp>();
    if (!gate)
      return rewriter.notifyMatchFailure(op, "g is not a k3.kda_gate");

    // The raw gate projection takes the place of the log-decay, with the
    // same reshape if there was one.
    Value raw = gate.getInput();
    if (auto expand = dyn_cast_or_null<tensor::ExpandShapeOp>(reshape)) {
      auto rawType = cast<RankedTensorType>(raw.getType());
      auto expandedType = cast<RankedTensorType>(expand.getType())
                              .clone(rawType.getElementType());
      raw = tensor::ExpandShapeOp::create(
          rewriter, expand.getLoc(), expandedType, raw,
          expand.getReassociationIndices(), expand.getMixedOutputShape());
    }
    rewriter.modifyOpInPlace(op, [&] {
      op.getGMutable().assign(raw);
      op.getALogMutable().assign(gate.getALog());
      op.getDtBiasMutable().assign(gate.getDtBias());
      op.setGateKindAttr(gate.getKindAttr());
      if (auto lb = gate.getLowerBoundAttr())
        op.setLowerBoundAttr(lb);
    });
    return success();
  }
};

struct K3FuseKDAGatePass : impl::K3FuseKDAGateBase<K3FuseKDAGatePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FoldGateIntoKDA>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::k3
