//===- MoEGrouped.cpp - k3.moe_experts as grouped GEMMs ---------*- C++ -*-===//
//
// The routed experts as engines run them: sort the (token, slot) pairs by
// expert, run each expert's rows as one segment of a grouped GEMM (its
// weights read once per row tile, not once per token), and gather each
// token's rows back in slot order (docs/moe.md). A decode step does the
// same in tiles of a few rows: at B = 64 the fused loop nest read an
// expert's weights once per token that chose it.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/RowWise.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3MOEGROUPED
#include "passes/Passes.h.inc"

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

struct GroupExperts : OpRewritePattern<MoEExpertsOp> {
  GroupExperts(MLIRContext *ctx, int64_t tileRows, int64_t decodeTileRows)
      : OpRewritePattern(ctx), tileRows(tileRows),
        decodeTileRows(decodeTileRows) {}

  LogicalResult matchAndRewrite(MoEExpertsOp op,
                                PatternRewriter &rewriter) const override {
    // A decode step's few rows, and a prefill's last tokens
    // (k3-last-token-logits), take the small tiles.
    int64_t rows = inDecodeEntry(op) || onLastTokenRows(op.getInput())
                       ? decodeTileRows
                       : tileRows;
    if (rows == 0)
      return rewriter.notifyMatchFailure(op, "decode entry: fused experts");
    auto w1 = tensorType(op.getW1()), w2 = tensorType(op.getW2());
    auto idx = tensorType(op.getIndices());
    int64_t experts = w1.getDimSize(0);
    if (ShapedType::isDynamic(experts))
      return rewriter.notifyMatchFailure(op, "dynamic expert count");
    Location loc = op.getLoc();
    auto i32 = rewriter.getI32Type();
    auto offsetsType = RankedTensorType::get({experts + 1}, i32);
    auto dispatch = MoEDispatchOp::create(
        rewriter, loc, idx, idx, offsetsType, offsetsType, op.getIndices(),
        rewriter.getI64IntegerAttr(experts), rewriter.getI64IntegerAttr(rows));
    // [T, K, width] read flat as T K rows. The activated h is an activation
    // (bf16 under the bf16 policy: the down GEMM multiplies it in bf16);
    // the weighted expert outputs stay f32 until the combine has summed
    // them, as the fused op sums them.
    auto rowsOf = [&](int64_t width, Type elem) {
      return RankedTensorType::get(
          {idx.getDimSize(0), idx.getDimSize(1), width}, elem);
    };
    Type activation = tensorType(op.getInput()).getElementType();
    auto glu = MoEGroupedGLUOp::create(
        rewriter, loc, rowsOf(w1.getDimSize(1), activation), op.getInput(),
        op.getIndices(), dispatch.getRowSource(), dispatch.getOffsets(),
        dispatch.getTileOffsets(), op.getW1(), op.getW3(),
        /*shared_w1=*/Value(), /*shared_w3=*/Value(), op.getActivationAttr(),
        op.getBetaAttr(), op.getLinearBetaAttr());
    auto down = MoEGroupedDownOp::create(
        rewriter, loc, rowsOf(w2.getDimSize(1), activation), glu.getResult(),
        op.getIndices(), dispatch.getRowSource(), dispatch.getOffsets(),
        dispatch.getTileOffsets(), op.getWeights(), op.getW2(),
        /*shared_w2=*/Value());
    rewriter.replaceOpWithNewOp<MoECombineOp>(
        op, op.getType(), down.getResult(), dispatch.getPositions(),
        /*addend=*/Value());
    return success();
  }

  int64_t tileRows, decodeTileRows;
};

struct K3MoEGroupedPass : impl::K3MoEGroupedBase<K3MoEGroupedPass> {
  using Base::Base;

  void runOnOperation() override {
    if (tileRows <= 0) {
      getOperation()->emitError()
          << "k3-moe-grouped: tile-rows must be positive, got "
          << static_cast<int64_t>(tileRows);
      return signalPassFailure();
    }
    RewritePatternSet patterns(&getContext());
    if (decodeTileRows < 0) {
      getOperation()->emitError()
          << "k3-moe-grouped: decode-tile-rows must be >= 0, got "
          << static_cast<int64_t>(decodeTileRows);
      return signalPassFailure();
    }
    patterns.add<GroupExperts>(&getContext(), tileRows, decodeTileRows);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::k3
