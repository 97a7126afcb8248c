//===- MLAExpand.cpp - prefill MLA as expanded flash attention --*- C++ -*-===//
//
// A prefill's MLA attention in the form prefill engines run it (K3MLAOps.td
// says why it is cheaper than the latent form for many queries): keys and
// values expanded once per token by a GEMM through kv_b, attention with
// head dims Dn + Dr and Dv, the sigmoid output gate fused into its write,
// and the latent cache appended beside it.
//
// The expanded attention reads only this call's tokens, so it is the
// latent form's result only for sequences that start empty. The pass
// records that on the entry's context-lengths input (`k3.max_value = 0`,
// with the reason), and the runtime refuses a call that breaks it before
// any launch; sequences continue through the decode entry, which keeps the
// latent form.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3MLAEXPAND
#include "passes/Passes.h.inc"

namespace {

constexpr const char *kMaxValueReason =
    "the prefill entry computes MLA attention over this call's tokens only "
    "(k3-mla-expand): it starts sequences; continue them through the decode "
    "entry";

/// The entry argument that holds the context lengths, or null when they
/// are computed in the graph (then the expanded form cannot be guarded).
BlockArgument entryArgument(Value lens) {
  auto arg = dyn_cast<BlockArgument>(lens);
  if (!arg || !isa<func::FuncOp>(arg.getOwner()->getParentOp()))
    return nullptr;
  return arg;
}

/// The sigmoid gate that multiplies the attention's flattened result, if
/// that is its only use: result -> collapse [T, H * Dv] -> sigmoid_gate.
SigmoidGateOp fusableGate(LatentAttentionOp op) {
  Value r = op.getResult();
  if (!r.hasOneUse())
    return nullptr;
  auto collapse = dyn_cast<tensor::CollapseShapeOp>(*r.getUsers().begin());
  if (!collapse || !collapse.getResult().hasOneUse() ||
      collapse.getReassociationIndices().size() != 2)
    return nullptr;
  auto gate = dyn_cast<SigmoidGateOp>(*collapse.getResult().getUsers().begin());
  if (!gate || gate.getInput() != collapse.getResult() ||
      gate.getType() != collapse.getResultType())
    return nullptr;
  return gate;
}

struct ExpandLatentAttention : OpRewritePattern<LatentAttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(LatentAttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (inDecodeEntry(op))
      return rewriter.notifyMatchFailure(op, "decode entry: latent form");
    // One query a sequence (k3-last-token-logits): a decode step's shape,
    // for which the latent form reads less than the expansion writes.
    if (Value cu = op.getCuSeqlens();
        cu && cu.getDefiningOp<LastTokenContextOp>())
      return rewriter.notifyMatchFailure(op, "last tokens: latent form");
    BlockArgument lensArg;
    if (Value lens = op.getCacheLens()) {
      lensArg = entryArgument(lens);
      if (!lensArg)
        return rewriter.notifyMatchFailure(
            op, "context lengths are not an entry input");
    }
    Location loc = op.getLoc();
    auto latentType = cast<RankedTensorType>(op.getLatent().getType());
    Type act = latentType.getElementType();
    int64_t heads = op.getNumHeads(), dn = op.getQkNopeHeadDim(),
            dv = op.getVHeadDim(), rank = op.getKvLoraRank();
    int64_t tokensStatic = latentType.getDimSize(0);

    // kv = c_kv kv_b^T as [T, H, Dn + Dv], in the activations' type.
    Value tokens = tensor::DimOp::create(rewriter, loc, op.getLatent(), 0);
    SmallVector<OpFoldResult> offsets = {rewriter.getIndexAttr(0),
                                         rewriter.getIndexAttr(0)};
    SmallVector<OpFoldResult> sizes = {tokens, rewriter.getIndexAttr(rank)};
    SmallVector<OpFoldResult> strides(2, rewriter.getIndexAttr(1));
    auto ckvType = RankedTensorType::get({tokensStatic, rank}, act);
    Value ckv = tensor::ExtractSliceOp::create(
        rewriter, loc, ckvType, op.getLatent(), offsets, sizes, strides);
    auto flatType =
        RankedTensorType::get({tokensStatic, heads * (dn + dv)}, act);
    Value flat =
        LinearOp::create(rewriter, loc, flatType, ckv, op.getKvB()).getResult();
    auto kvType = RankedTensorType::get({tokensStatic, heads, dn + dv}, act);
    Value kv = tensor::ExpandShapeOp::create(
        rewriter, loc, kvType, flat,
        ArrayRef<ReassociationIndices>{{0}, {1, 2}},
        ArrayRef<OpFoldResult>{tokens, rewriter.getIndexAttr(heads),
                               rewriter.getIndexAttr(dn + dv)});

    // With the gate fused the attention moves down to the gate's place
    // (the gate's projection may come after the attention).
    SigmoidGateOp gate = fusableGate(op);
    if (gate)
      rewriter.setInsertionPoint(gate);
    auto attn = MLAPrefillAttentionOp::create(
        rewriter, loc, op.getResult().getType(), op.getQ(), kv, op.getLatent(),
        gate ? gate.getGate() : Value(), op.getCuSeqlens(),
        op.getQkNopeHeadDimAttr(), op.getQkRopeHeadDimAttr(),
        op.getVHeadDimAttr(), op.getScaleAttr());
    if (gate) {
      auto collapse =
          cast<tensor::CollapseShapeOp>(*op.getResult().getUsers().begin());
      Value gated = tensor::CollapseShapeOp::create(
          rewriter, loc, collapse.getResultType(), attn.getResult(),
          collapse.getReassociationIndices());
      rewriter.replaceOp(gate, gated);
      rewriter.eraseOp(collapse);
    }
    SmallVector<Value> replacements = {attn.getResult()};
    if (Value cache = op.getLatentCache()) {
      rewriter.setInsertionPoint(op);
      replacements.push_back(
          LatentCacheAppendOp::create(rewriter, loc, cache.getType(), cache,
                                      op.getCacheLens(), op.getLatent(),
                                      op.getCuSeqlens())
              .getResult());
      auto fn = cast<func::FuncOp>(lensArg.getOwner()->getParentOp());
      unsigned i = lensArg.getArgNumber();
      MLIRContext *ctx = rewriter.getContext();
      fn.setArgAttr(i, K3Dialect::MaxValueAttrHelper(ctx).getName(),
                    rewriter.getI64IntegerAttr(0));
      fn.setArgAttr(i, K3Dialect::MaxValueReasonAttrHelper(ctx).getName(),
                    rewriter.getStringAttr(kMaxValueReason));
    }
    rewriter.replaceOp(op, replacements);
    return success();
  }
};

struct K3MLAExpandPass : impl::K3MLAExpandBase<K3MLAExpandPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<ExpandLatentAttention>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::k3
