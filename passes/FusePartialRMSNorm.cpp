//===- FusePartialRMSNorm.cpp - RMSNorm of a row's leading columns -*- C++
//-*-===//
//
// MLA normalises only c_kv of its down-projection [c_kv | k_pe] and then
// joins the two again: a slice, the norm, a second slice and a concat are
// four kernels over the [T, R + Dr] rows (in a decode step of
// Kimi-Linear-48B, 4 of the ~15 launches an MLA layer takes). The pattern
// rewrites concat(rms_norm(x[..., :R]), x[..., R:]) into
// k3.partial_rms_norm(x): one kernel, one read and one write of each row.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSEPARTIALRMSNORM
#include "passes/Passes.h.inc"

namespace {

/// Whether `v`'s leading dimension is `x`'s: `v` is `x`, or `x` comes from
/// `v` through ops whose result keeps their first operand's leading
/// dimension (the projections and norms between a layer's input and MLA's
/// down-projection).
bool sameLeadingDim(Value v, Value x) {
  for (int steps = 0; steps < 8 && x; ++steps) {
    if (x == v)
      return true;
    Operation *def = x.getDefiningOp();
    if (!isa_and_present<LinearOp, RMSNormOp, AddOp, AddRMSNormOp>(def))
      return false;
    x = def->getOperand(0);
  }
  return false;
}

/// Whether the slice size `size` is dimension `d` of `x` whole.
bool wholeDim(OpFoldResult size, Value x, int64_t d) {
  auto xt = cast<RankedTensorType>(x.getType());
  if (auto c = getConstantIntValue(size))
    return !xt.isDynamicDim(d) && *c == xt.getDimSize(d);
  auto dim = cast<Value>(size).getDefiningOp<tensor::DimOp>();
  if (!dim)
    return false;
  std::optional<int64_t> index = dim.getConstantIndex();
  if (!index || *index != d)
    return false;
  // Leading dimensions other than the first are static in the models.
  return d == 0 ? sameLeadingDim(dim.getSource(), x) : dim.getSource() == x;
}

/// `s` takes columns [first, first + count) of `x`'s last dimension and
/// every index of the others, with unit strides.
bool slicesColumns(tensor::ExtractSliceOp s, Value x, int64_t first,
                   int64_t count) {
  if (!s || s.getSource() != x || !s.hasUnitStride())
    return false;
  int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
  if (s.getType().getRank() != rank)
    return false;
  SmallVector<OpFoldResult> offsets = s.getMixedOffsets(),
                            sizes = s.getMixedSizes();
  for (int64_t d = 0; d + 1 < rank; ++d)
    if (!isConstantIntValue(offsets[d], 0) || !wholeDim(sizes[d], x, d))
      return false;
  return isConstantIntValue(offsets[rank - 1], first) &&
         isConstantIntValue(sizes[rank - 1], count);
}

struct FuseNormConcat : OpRewritePattern<tensor::ConcatOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tensor::ConcatOp cat,
                                PatternRewriter &rewriter) const override {
    int64_t rank = cat.getType().getRank();
    if (cat.getInputs().size() != 2 || int64_t(cat.getDim()) != rank - 1)
      return rewriter.notifyMatchFailure(cat, "not two parts of the last dim");
    auto norm = cat.getInputs()[0].getDefiningOp<RMSNormOp>();
    if (!norm)
      return rewriter.notifyMatchFailure(cat,
                                         "first part is not a k3.rms_norm");
    auto head = norm.getInput().getDefiningOp<tensor::ExtractSliceOp>();
    auto tail = cat.getInputs()[1].getDefiningOp<tensor::ExtractSliceOp>();
    if (!head || !tail)
      return rewriter.notifyMatchFailure(cat, "parts are not slices");
    Value x = head.getSource();
    auto xt = cast<RankedTensorType>(x.getType());
    if (xt != cat.getType() || xt.isDynamicDim(rank - 1))
      return rewriter.notifyMatchFailure(cat, "not the source's type");
    int64_t n = xt.getDimSize(rank - 1);
    int64_t r = cast<RankedTensorType>(norm.getType()).getDimSize(rank - 1);
    if (!slicesColumns(head, x, 0, r) || !slicesColumns(tail, x, r, n - r))
      return rewriter.notifyMatchFailure(cat, "slices do not split x's rows");
    rewriter.replaceOpWithNewOp<PartialRMSNormOp>(
        cat, cat.getType(), x, norm.getWeight(), norm.getEpsilonAttr());
    return success();
  }
};

struct K3FusePartialRMSNormPass
    : impl::K3FusePartialRMSNormBase<K3FusePartialRMSNormPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseNormConcat>(&getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
} // namespace mlir::k3
