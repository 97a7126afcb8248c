//===- K3ContextOps.cpp - verifiers of the context ops ---------*- C++ -*-===//
//
// K3ContextOps.td: the KDA segment's inputs are v widened by K columns and
// a [0 | I] state; the folds and MLA's cache share check that the gathered
// operands have one entry per rank of the group, each the shape this
// rank's own would have.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "dialects/K3/K3Verify.h"

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::verify;

namespace {

/// `rank` is a tensor<1xi32> and `group_size` at least 1; `gathered` has
/// `group_size` entries along its leading dimension.
LogicalResult expectGathered(Operation *op, Named gathered, Value rank,
                             int64_t groupSize) {
  if (groupSize < 1)
    return op->emitOpError()
           << "group_size must be at least 1, got " << groupSize;
  Named r = named("rank", rank);
  if (failed(expectRank(op, r, 1)) ||
      failed(expectDim(op, r, 0, 1, "a rank's coordinate")))
    return failure();
  return expectDim(op, gathered, 0, groupSize, "one entry per rank");
}

/// Dimensions [1, 1 + count) of the gathered `a` equal dimensions [0,
/// count) of `b`: a gathered entry's shape against this rank's own.
LogicalResult expectSameEntry(Operation *op, Named a, Named b, int64_t count) {
  int64_t shift = 1;
  for (int64_t d = shift; d < shift + count; ++d)
    if (failed(expectSameDim(op, a, d, b, d - shift, "entry dimension")))
      return failure();
  return success();
}

} // namespace

LogicalResult KDAContextInputsOp::verify() {
  Named v = named("v", getV()), values = named("values", getValues()),
        init = named("initial_state", getInitialState());
  int64_t keyDim = getKeyDim();
  if (keyDim < 1 || keyDim > 256)
    return emitOpError() << "expects 'key_dim' in [1, 256], got " << keyDim;
  if (failed(expectRank(*this, v, 4)) || failed(expectRank(*this, values, 4)) ||
      failed(expectRank(*this, init, 4)) ||
      failed(expectRank(*this, named("cu_seqlens", getCuSeqlens()), 1)) ||
      failed(expectDim(*this, v, 0, 1, "batch, which must be 1")))
    return failure();
  for (int64_t d = 0; d < 3; ++d)
    if (failed(expectSameDim(*this, v, d, values, d, "value dimension")))
      return failure();
  int64_t hv = v.type.getDimSize(3);
  if (ShapedType::isDynamic(hv))
    return emitOpError() << "needs a static value dimension";
  if (v.type.getElementType() != values.type.getElementType())
    return emitOpError() << "'values' must have the element type of 'v'";
  return failure(
      failed(expectDim(*this, values, 3, hv + keyDim, "values and key")) ||
      failed(expectSameDim(*this, v, 2, init, 1, "head count")) ||
      failed(expectDim(*this, init, 2, keyDim, "key dimension")) ||
      failed(expectDim(*this, init, 3, hv + keyDim, "values and key")));
}

LogicalResult KDAContextFoldOp::verify() {
  Named so = named("segment_output", getSegmentOutput()),
        all = named("segments", getSegments()),
        o = named("output", getOutput()),
        fs = named("final_state", getFinalState());
  if (failed(expectRank(*this, so, 4)) || failed(expectRank(*this, all, 5)) ||
      failed(expectRank(*this, o, 4)) || failed(expectRank(*this, fs, 4)) ||
      failed(expectGathered(*this, all, getRank(), getGroupSize())) ||
      failed(expectSameEntry(*this, all, fs, 3)))
    return failure();
  // [.., V + K] against [.., V] with K the state's key dimension.
  int64_t keyDim = fs.type.getDimSize(2);
  int64_t valueDim = fs.type.getDimSize(3);
  if (ShapedType::isDynamic(keyDim) || ShapedType::isDynamic(valueDim))
    return emitOpError() << "needs static key and value dimensions";
  for (int64_t d = 0; d < 3; ++d)
    if (failed(expectSameDim(*this, so, d, o, d, "output dimension")))
      return failure();
  if (failed(expectDim(*this, o, 3, valueDim, "value dimension")) ||
      failed(expectDim(*this, so, 3, valueDim + keyDim,
                       "value and key dimensions")) ||
      failed(expectDim(*this, all, 4, valueDim + keyDim,
                       "value and key dimensions")) ||
      failed(expectSameDim(*this, o, 2, fs, 1, "head count")) ||
      failed(expectDim(*this, so, 0, 1, "batch, which must be 1")))
    return failure();
  if (Value init = getInitialState())
    if (failed(expectSameShape(*this, named("initial_state", init), fs)))
      return failure();
  return expectRank(*this, named("cu_seqlens", getCuSeqlens()), 1);
}

LogicalResult ShortConvContextFoldOp::verify() {
  Named tails = named("tails", getTails()),
        cu = named("cu_seqlens", getCuSeqlens()),
        in = named("incoming", getIncoming()),
        fs = named("final_state", getFinalState());
  if (failed(expectRank(*this, tails, 4)) || failed(expectRank(*this, cu, 2)) ||
      failed(expectRank(*this, fs, 3)) ||
      failed(expectSameShape(*this, in, fs)) ||
      failed(expectGathered(*this, tails, getRank(), getGroupSize())) ||
      failed(expectDim(*this, cu, 0, getGroupSize(), "one entry per rank")) ||
      failed(expectSameEntry(*this, tails, fs, 3)))
    return failure();
  if (Value s = getConvState())
    if (failed(expectSameShape(*this, named("conv_state", s), fs)))
      return failure();
  int64_t history = fs.type.getDimSize(2);
  if (ShapedType::isDynamic(history) || history < 1 || history > 15)
    return emitOpError() << "needs a static history of 1 to 15 rows (kernel "
                            "size minus one), got "
                         << history;
  return success();
}

LogicalResult ContextOffsetsOp::verify() {
  Named cu = named("cu_seqlens", getCuSeqlens()),
        ctx = named("context_lens", getContextLens()),
        r = named("result", getResult());
  if (failed(expectRank(*this, cu, 2)) || failed(expectRank(*this, ctx, 1)) ||
      failed(expectGathered(*this, cu, getRank(), getGroupSize())))
    return failure();
  return expectSameShape(*this, ctx, r);
}

LogicalResult LatentCacheSegmentOp::verify() {
  Named latent = named("latent", getLatent()),
        cache = named("latent_cache", getLatentCache()),
        cu = named("cu_seqlens", getCuSeqlens()),
        ctx = named("context_lens", getContextLens()),
        r = named("result", getResult());
  if (failed(expectRank(*this, latent, 2)) ||
      failed(expectRank(*this, cache, 3)) || failed(expectRank(*this, cu, 2)) ||
      failed(expectRank(*this, ctx, 1)) ||
      failed(expectGathered(*this, cu, getRank(), getGroupSize())) ||
      failed(expectSameShape(*this, cache, r)))
    return failure();
  return expectSameDim(*this, latent, 1, cache, 2, "latent width");
}

LogicalResult ShortConvTailOp::verify() {
  Named x = named("input", getInput()), r = named("result", getResult());
  int64_t ks = getKernelSize();
  if (ks < 2 || ks > 16)
    return emitOpError() << "expects 'kernel_size' in [2, 16], got " << ks;
  if (failed(expectRank(*this, x, 2)) || failed(expectRank(*this, r, 3)) ||
      failed(expectRank(*this, named("cu_seqlens", getCuSeqlens()), 1)) ||
      failed(expectSameDim(*this, x, 1, r, 1, "channels")))
    return failure();
  return expectDim(*this, r, 2, ks - 1, "kernel size minus one");
}
