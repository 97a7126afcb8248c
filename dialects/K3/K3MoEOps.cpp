//===- K3MoEOps.cpp - verifiers of the grouped MoE ops ----------*- C++ -*-===//
//
// k3.moe_dispatch, k3.moe_grouped_glu, k3.moe_grouped_down,
// k3.moe_combine and k3.moe_combine_add_rms_norm (K3MoEOps.td). Dynamic sizes
// are compared only where both sides are static.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "dialects/K3/K3Verify.h"

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::verify;

namespace {

std::optional<double> optDouble(FloatAttr a) {
  if (!a)
    return std::nullopt;
  return a.getValueAsDouble();
}

/// The routing tables every grouped op reads: `indices` and `row_source`
/// [T, K], `offsets` and `tile_offsets` [E + 1] with E the experts of
/// `weight` (dimension 0).
LogicalResult verifyRoutingTables(Operation *op, Value indices, Value rowSource,
                                  Value offsets, Value tileOffsets,
                                  Named weight) {
  Named idx = named("indices", indices), src = named("row_source", rowSource),
        off = named("offsets", offsets),
        tiles = named("tile_offsets", tileOffsets);
  if (failed(expectRank(op, idx, 2)) || failed(expectSameShape(op, idx, src)) ||
      failed(expectRank(op, off, 1)) || failed(expectStatic(op, off)) ||
      failed(expectSameShape(op, off, tiles)))
    return failure();
  int64_t experts = weight.type.getDimSize(0);
  if (!ShapedType::isDynamic(experts))
    return expectDim(op, off, 0, experts + 1, "expert count + 1");
  return success();
}

/// Dimension 1 of `t` [T, slots, ...]: the K routed slots of `indices`,
/// plus one for the shared expert's row where it runs in the same launch.
LogicalResult expectSlots(Operation *op, Named t, Named indices, bool shared) {
  int64_t k = indices.type.getDimSize(1);
  if (ShapedType::isDynamic(k))
    return success();
  if (!shared)
    return expectDim(op, t, 1, k, "experts per token");
  return expectDim(op, t, 1, k + 1, "experts per token + 1, the shared expert");
}

/// A shared expert's weight `[N, K]` beside the routed `[E, N, K]` one: the
/// same rows and reduction, the same element type.
LogicalResult expectSharedWeight(Operation *op, Named shared, Named routed) {
  if (failed(expectRank(op, shared, 2)) ||
      failed(expectSameDim(op, shared, 0, routed, 1, "rows")) ||
      failed(expectSameDim(op, shared, 1, routed, 2, "reduction width")))
    return failure();
  if (shared.type.getElementType() != routed.type.getElementType())
    return op->emitOpError() << "expects the shared expert's '" << shared.name
                             << "' to have the routed experts' element type "
                             << routed.type.getElementType() << ", got "
                             << shared.type.getElementType();
  return success();
}

} // namespace

LogicalResult MoEDispatchOp::verify() {
  Named idx = named("indices", getIndices());
  if (failed(expectRank(*this, idx, 2)) ||
      failed(expectPositive(*this, "num_experts", int64_t(getNumExperts()))) ||
      failed(expectPositive(*this, "tile_rows", int64_t(getTileRows()))))
    return failure();
  for (Value r : {getRowSource(), getPositions()})
    if (failed(expectSameShape(*this, idx, named("result", r))))
      return failure();
  for (Value r : {getOffsets(), getTileOffsets()}) {
    Named n = named("offsets result", r);
    if (failed(expectRank(*this, n, 1)) ||
        failed(expectDim(*this, n, 0, int64_t(getNumExperts()) + 1,
                         "num_experts + 1")))
      return failure();
  }
  return success();
}

LogicalResult MoELocalIdsOp::verify() {
  Named idx = named("indices", getIndices()), rank = named("rank", getRank());
  if (failed(expectRank(*this, idx, 2)) || failed(expectRank(*this, rank, 1)) ||
      failed(expectDim(*this, rank, 0, 1, "1")) ||
      failed(expectPositive(*this, "experts_per_rank",
                            int64_t(getExpertsPerRank()))))
    return failure();
  return expectSameShape(*this, idx, named("result", getResult()));
}

LogicalResult MoEBucketOp::verify() {
  Named x = named("input", getInput()), idx = named("indices", getIndices()),
        w = named("weights", getWeights()), rows = named("rows", getRows()),
        ids = named("ids", getIds()),
        rw = named("row_weights", getRowWeights()),
        slots = named("slots", getSlots());
  if (failed(expectRank(*this, x, 2)) || failed(expectRank(*this, idx, 2)) ||
      failed(expectSameShape(*this, idx, w)) ||
      failed(expectSameShape(*this, idx, slots)) ||
      failed(expectSameDim(*this, x, 0, idx, 0, "token count")) ||
      failed(expectRank(*this, rows, 3)) || failed(expectStatic(*this, rows)) ||
      failed(expectRank(*this, ids, 3)) ||
      failed(expectSameShape(*this, ids, rw)) ||
      failed(expectPositive(*this, "experts_per_rank",
                            int64_t(getExpertsPerRank()))))
    return failure();
  for (int64_t d = 0; d < 2; ++d)
    if (failed(expectSameDim(*this, rows, d, ids, d,
                             d == 0 ? "ranks" : "bucket capacity")))
      return failure();
  return failure(failed(expectDim(*this, ids, 2, 1, "1")) ||
                 failed(expectSameDim(*this, rows, 2, x, 1, "hidden size")));
}

LogicalResult MoEUnbucketOp::verify() {
  Named back = named("returned", getReturned()),
        slots = named("slots", getSlots()), r = named("result", getResult());
  if (failed(expectRank(*this, back, 3)) ||
      failed(expectRank(*this, slots, 2)) || failed(expectRank(*this, r, 2)))
    return failure();
  return failure(failed(expectSameDim(*this, slots, 0, r, 0, "token count")) ||
                 failed(expectSameDim(*this, back, 2, r, 1, "hidden size")));
}

LogicalResult MoEGroupedGLUOp::verify() {
  Named x = named("input", getInput()), w1 = named("w1", getW1()),
        w3 = named("w3", getW3()), r = named("result", getResult()),
        idx = named("indices", getIndices());
  if (failed(expectRank(*this, x, 2)) || failed(expectRank(*this, w1, 3)) ||
      failed(expectSameShape(*this, w1, w3)) ||
      failed(expectSameWeightType(*this, w1, w3)) ||
      failed(expectWeightBlocks(*this, w1)) ||
      failed(expectRank(*this, r, 3)) ||
      failed(verifyRoutingTables(*this, getIndices(), getRowSource(),
                                 getOffsets(), getTileOffsets(), w1)))
    return failure();
  if (failed(expectSameDim(*this, x, 0, idx, 0, "token count")) ||
      failed(expectSameDim(*this, w1, 2, x, 1, "expert input width")) ||
      failed(expectSameDim(*this, r, 0, idx, 0, "token count")) ||
      failed(expectSlots(*this, r, idx, hasSharedExpert())) ||
      failed(expectSameDim(*this, r, 2, w1, 1, "expert intermediate size")))
    return failure();
  if (static_cast<bool>(getSharedW1()) != static_cast<bool>(getSharedW3()))
    return emitOpError() << "expects both shared expert weights or neither";
  if (hasSharedExpert() &&
      (failed(
           expectSharedWeight(*this, named("shared_w1", getSharedW1()), w1)) ||
       failed(
           expectSharedWeight(*this, named("shared_w3", getSharedW3()), w3))))
    return failure();
  return expectGLUActivation(*this, getActivation(), optDouble(getBetaAttr()),
                             optDouble(getLinearBetaAttr()));
}

LogicalResult MoEGroupedDownOp::verify() {
  Named h = named("input", getInput()), w2 = named("w2", getW2()),
        r = named("result", getResult()), idx = named("indices", getIndices()),
        wts = named("weights", getWeights());
  if (failed(expectRank(*this, h, 3)) || failed(expectRank(*this, w2, 3)) ||
      failed(expectWeightBlocks(*this, w2)) ||
      failed(expectRank(*this, r, 3)) ||
      failed(expectSameShape(*this, idx, wts)) ||
      failed(verifyRoutingTables(*this, getIndices(), getRowSource(),
                                 getOffsets(), getTileOffsets(), w2)))
    return failure();
  if (failed(expectSameDim(*this, h, 0, idx, 0, "token count")) ||
      failed(expectSlots(*this, h, idx, hasSharedExpert())) ||
      failed(expectSameDim(*this, w2, 2, h, 2, "expert intermediate size")) ||
      failed(expectSameDim(*this, r, 0, h, 0, "token count")) ||
      failed(expectSlots(*this, r, idx, hasSharedExpert())) ||
      failed(expectSameDim(*this, r, 2, w2, 1, "expert output width")))
    return failure();
  if (hasSharedExpert())
    return expectSharedWeight(*this, named("shared_w2", getSharedW2()), w2);
  return success();
}

/// The combine's rule, of k3.moe_combine and of k3.moe_combine_add_rms_norm
/// (whose `sum` has the combine's result shape).
static LogicalResult verifyCombine(Operation *op, Named rows, Named pos,
                                   Named r, Value addend) {
  if (failed(expectRank(op, rows, 3)) || failed(expectRank(op, pos, 2)) ||
      failed(expectRank(op, r, 2)))
    return failure();
  // Rows [T, K + 1, D] carry the shared expert's output (added last).
  int64_t slots = rows.type.getDimSize(1), k = pos.type.getDimSize(1);
  bool shared = !ShapedType::isDynamic(slots) && !ShapedType::isDynamic(k) &&
                slots == k + 1;
  if (failed(expectSameDim(op, rows, 0, pos, 0, "token count")) ||
      failed(expectSlots(op, rows, pos, shared)) ||
      failed(expectSameDim(op, r, 0, pos, 0, "token count")) ||
      failed(expectSameDim(op, r, 1, rows, 2, "output width")))
    return failure();
  if (addend)
    return expectSameShape(op, named("addend", addend), r);
  return success();
}

LogicalResult MoECombineOp::verify() {
  return verifyCombine(*this, named("rows", getRows()),
                       named("positions", getPositions()),
                       named("result", getResult()), getAddend());
}

LogicalResult MoECombineAddRMSNormOp::verify() {
  Named sum = named("sum", getSum());
  if (failed(verifyCombine(*this, named("rows", getRows()),
                           named("positions", getPositions()), sum,
                           getAddend())) ||
      failed(expectSameShape(*this, named("input", getInput()), sum)) ||
      failed(expectSameShape(*this, named("result", getResult()), sum)) ||
      failed(expectRank(*this, named("weight", getWeight()), 1)) ||
      failed(expectSameDim(*this, named("weight", getWeight()), 0, sum, 1,
                           "normalised size")))
    return failure();
  if (!(getEpsilon().convertToDouble() > 0.0))
    return emitOpError() << "expects 'epsilon' to be positive, got "
                         << getEpsilon().convertToDouble();
  return success();
}

LogicalResult MoETopKOp::verify() {
  Named logits = named("logits", getLogits()),
        idx = named("indices", getIndices());
  if (failed(expectRank(*this, logits, 2)) ||
      failed(expectRank(*this, idx, 2)) ||
      failed(expectSameDim(*this, logits, 0, idx, 0, "token count")))
    return failure();
  return expectRouterRule(*this, logits, 1);
}
