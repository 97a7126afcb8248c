//===- SplitRouter.cpp - the router as a linear and a top-k -----*- C++ -*-===//
//
// The router's product is a GEMM of the model's narrowest shape (E = 256
// or 896 outputs): as its own k3.linear it runs on the linear kernels,
// spread over the GPU, instead of inside the fused router, whose block per
// token group read all of W per block (a decode step's scores took 20 us of
// 31 per layer on 32 blocks, a 8192-token prefill 0.18 ms per layer:
// bench/results/profile-gpu/). k3.moe_topk then selects from the logits
// (docs/moe.md).
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3SPLITROUTER
#include "passes/Passes.h.inc"

namespace {

struct SplitRouter : OpRewritePattern<MoERouterOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(MoERouterOp op,
                                PatternRewriter &rewriter) const override {
    auto x = cast<RankedTensorType>(op.getInput().getType());
    auto w = cast<RankedTensorType>(op.getWeight().getType());
    // The logits stay f32 whatever the activations' type: the router's
    // scores are f32 in the precision policy (docs/precision.md).
    auto logitsType = RankedTensorType::get({x.getDimSize(0), w.getDimSize(0)},
                                            rewriter.getF32Type());
    Location loc = op.getLoc();
    Value logits = LinearOp::create(rewriter, loc, logitsType, op.getInput(),
                                    op.getWeight());
    auto topk = MoETopKOp::create(
        rewriter, loc, op.getIndices().getType(), op.getWeights().getType(),
        logits, op.getCorrectionBias(), op.getTopKAttr(), op.getScoreAttr(),
        op.getRenormalizeAttr(), op.getRoutedScalingFactorAttr(),
        op.getNGroupAttr(), op.getTopkGroupAttr());
    // Names and attributes that tools read off the router (k3.name of a
    // dump) stay with its results.
    for (NamedAttribute a : op->getDiscardableAttrs())
      topk->setAttr(a.getName(), a.getValue());
    rewriter.replaceOp(op, topk.getResults());
    return success();
  }
};

struct K3SplitRouterPass : impl::K3SplitRouterBase<K3SplitRouterPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<SplitRouter>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::k3
