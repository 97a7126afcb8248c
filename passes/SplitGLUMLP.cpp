//===- SplitGLUMLP.cpp - glu_mlp as gate/up GEMM + linear ---*- C++ -*-===//
//
// The dense MLP of Kimi-Linear's first layer and every shared expert were
// loop nests of one warp per output (58% of a 2048-token prefill of the
// real-width cut under bf16: bench/results/profile-gpu/
// real4-bf16-T2048.txt). As a GEMM with the GLU in its epilogue and a
// linear, both run on the tensor cores.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3SPLITGLUMLP
#include "passes/Passes.h.inc"

namespace {

struct SplitGLUMLP : OpRewritePattern<GLUMLPOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(GLUMLPOp op,
                                PatternRewriter &rewriter) const override {
    auto x = cast<RankedTensorType>(op.getInput().getType());
    auto wg = cast<RankedTensorType>(op.getWGate().getType());
    // h in the activations' type (bf16 under the bf16 policy).
    auto hType = RankedTensorType::get({x.getDimSize(0), wg.getDimSize(0)},
                                       x.getElementType());
    auto h = GLUGateUpOp::create(
        rewriter, op.getLoc(), hType, op.getInput(), op.getWGate(), op.getWUp(),
        op.getActivationAttr(), op.getBetaAttr(), op.getLinearBetaAttr());
    rewriter.replaceOpWithNewOp<LinearOp>(op, op.getType(), h.getResult(),
                                          op.getWDown());
    return success();
  }
};

struct K3SplitGLUMLPPass : impl::K3SplitGLUMLPBase<K3SplitGLUMLPPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<SplitGLUMLP>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::k3
