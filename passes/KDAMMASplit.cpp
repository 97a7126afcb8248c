//===- KDAMMASplit.cpp - k3.kda into tensor-core operands + chain -*- C++
//-*-===//
//
// The CUDA pipeline's KDA form for bf16 models: what does not depend on the
// state (gates, norms, the decayed operands, the in-chunk products and the
// 16 x 16 solves) becomes a token-parallel op that fills the whole GPU, and
// the chain over chunks reads only prepared operands (docs/kda-cuda.md).
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/DecayGate.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3KDAMMASPLIT
#include "passes/Passes.h.inc"

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Whether the tensor-core kernels cover `op` (see the pass description).
/// The in-op gates the operand kernel computes: every valid lower-bounded
/// sigmoid (DecayGate.h: the middle-token factorisation keeps |lb| <= 5.5
/// in range, and [-5, 0) is inside it) and the unbounded softplus (exact
/// in-chunk products).
bool coveredGate(KDAOp op) {
  if (!op.getGateKind() || !op.getALog())
    return false;
  if (*op.getGateKind() == DecayGateKind::neg_softplus)
    return !op.getLowerBoundAttr();
  return op.getLowerBoundAttr() &&
         isValidGateLowerBound(op.getLowerBoundAttr().getValueAsDouble());
}

bool covered(KDAOp op) {
  if (!coveredGate(op))
    return false;
  for (Value x : {op.getQ(), op.getK(), op.getV()})
    if (!tensorType(x).getElementType().isBF16())
      return false;
  // The state f32 or bf16 (kda-state-dtype=bf16): the chain loads and
  // stores it through KernelBuilder, widened to f32 and rounded once.
  auto q = tensorType(op.getQ()), v = tensorType(op.getV());
  int64_t k = q.getDimSize(3), vd = v.getDimSize(3), h = q.getDimSize(2);
  if (ShapedType::isDynamic(k) || ShapedType::isDynamic(vd) ||
      ShapedType::isDynamic(h) || k % 64 != 0 || k > 256 || vd % 16 != 0)
    return false;
  return op.getCuSeqlens() || q.getDimSize(0) == 1;
}

struct SplitKDA : OpRewritePattern<KDAOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(KDAOp op,
                                PatternRewriter &rewriter) const override {
    if (inDecodeEntry(op))
      return rewriter.notifyMatchFailure(op, "decode entry: recurrent form");
    if (!covered(op))
      return rewriter.notifyMatchFailure(op, "not covered by the mma kernels");
    auto q = tensorType(op.getQ());
    int64_t k = q.getDimSize(3);
    SmallVector<int64_t> packedShape(q.getShape());
    packedShape[3] = 5 * k / 2 + 16;
    auto packedType = RankedTensorType::get(packedShape, rewriter.getI32Type());
    Location loc = op.getLoc();
    auto operands = KDAMMAOperandsOp::create(
        rewriter, loc, packedType, op.getQ(), op.getK(), op.getG(),
        op.getBeta(), op.getCuSeqlens(), op.getALog(), op.getDtBias(),
        op.getScaleAttr(), op.getUseQkL2normAttr(), op.getUseBetaSigmoidAttr(),
        op.getGateKindAttr(), op.getLowerBoundAttr());
    auto chain = KDAMMARecurrenceOp::create(
        rewriter, loc, op.getOutput().getType(), op.getFinalState().getType(),
        operands.getPacked(), op.getV(), op.getInitialState(),
        op.getCuSeqlens());
    rewriter.replaceOp(op, chain.getResults());
    return success();
  }
};

struct K3KDAMMASplitPass : impl::K3KDAMMASplitBase<K3KDAMMASplitPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<SplitKDA>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::k3
