//===- K3CollectiveOps.cpp - verifiers of the collectives -------*- C++ -*-===//
//
// k3.all_reduce, k3.all_gather, k3.reduce_scatter and k3.all_to_all
// (K3CollectiveOps.td): a known group of at least one rank, the operand's
// element type kept (a float one where elements are reduced), and the
// result's shape the one the collective makes of the operand's, compared
// where both sides are static.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The groups a partitioned model has: the ranks that split the heads and
/// projections (tp), the experts (ep) or the sequence (cp).
bool knownGroup(StringRef g) { return g == "tp" || g == "ep" || g == "cp"; }

/// The checks every collective shares.
LogicalResult verifyCollective(Operation *op, StringRef group,
                               int64_t groupSize, Value input, Value result,
                               bool reduces) {
  if (!knownGroup(group))
    return op->emitOpError()
           << "group must be \"tp\", \"ep\" or \"cp\", got \"" << group << "\"";
  if (groupSize < 1)
    return op->emitOpError()
           << "group_size must be at least 1, got " << groupSize;
  auto in = cast<RankedTensorType>(input.getType());
  auto out = cast<RankedTensorType>(result.getType());
  if (in.getElementType() != out.getElementType())
    return op->emitOpError() << "result element type " << out.getElementType()
                             << " must be the input's, " << in.getElementType();
  if (reduces && !isa<FloatType>(in.getElementType()))
    return op->emitOpError()
           << "reduces float elements, got " << in.getElementType();
  if (in.getRank() != out.getRank())
    return op->emitOpError() << "result rank " << out.getRank()
                             << " must be the input's, " << in.getRank();
  return success();
}

/// `dim` names a dimension of `t`.
LogicalResult expectDimIndex(Operation *op, StringRef attr, int64_t dim,
                             RankedTensorType t) {
  if (dim < 0 || dim >= t.getRank())
    return op->emitOpError()
           << attr << " = " << dim << " is not a dimension of the rank-"
           << t.getRank() << " input";
  return success();
}

/// Static input dimension `dim` is a multiple of `n`.
LogicalResult expectDivisible(Operation *op, StringRef attr, int64_t dim,
                              RankedTensorType t, int64_t n) {
  int64_t size = t.getDimSize(dim);
  if (!ShapedType::isDynamic(size) && size % n != 0)
    return op->emitOpError()
           << "input dimension " << dim << " (" << attr << ") has size " << size
           << ", not a multiple of group_size " << n;
  return success();
}

/// Input dimension `d` scaled by `mul / div` (dynamic stays dynamic).
int64_t scaledDim(RankedTensorType t, int64_t d, int64_t mul, int64_t div) {
  int64_t size = t.getDimSize(d);
  return ShapedType::isDynamic(size) ? size : size * mul / div;
}

/// The result has shape `expected`, where both sides are static.
LogicalResult expectShape(Operation *op, Value result,
                          ArrayRef<int64_t> expected) {
  auto out = cast<RankedTensorType>(result.getType());
  for (auto [d, want] : llvm::enumerate(expected)) {
    int64_t got = out.getDimSize(d);
    if (!ShapedType::isDynamic(want) && !ShapedType::isDynamic(got) &&
        want != got)
      return op->emitOpError() << "result dimension " << d << " must be "
                               << want << ", got " << got;
  }
  return success();
}

} // namespace

LogicalResult AllReduceOp::verify() {
  if (failed(verifyCollective(*this, getGroup(), getGroupSize(), getInput(),
                              getResult(), /*reduces=*/true)))
    return failure();
  return expectShape(*this, getResult(), getInput().getType().getShape());
}

LogicalResult AllGatherOp::verify() {
  auto in = getInput().getType();
  int64_t n = getGroupSize(), dim = getDim();
  if (failed(verifyCollective(*this, getGroup(), n, getInput(), getResult(),
                              /*reduces=*/false)) ||
      failed(expectDimIndex(*this, "dim", dim, in)))
    return failure();
  SmallVector<int64_t> shape(in.getShape());
  shape[dim] = scaledDim(in, dim, n, 1);
  return expectShape(*this, getResult(), shape);
}

LogicalResult ReduceScatterOp::verify() {
  auto in = getInput().getType();
  int64_t n = getGroupSize(), dim = getDim();
  if (failed(verifyCollective(*this, getGroup(), n, getInput(), getResult(),
                              /*reduces=*/true)) ||
      failed(expectDimIndex(*this, "dim", dim, in)) ||
      failed(expectDivisible(*this, "dim", dim, in, n)))
    return failure();
  SmallVector<int64_t> shape(in.getShape());
  shape[dim] = scaledDim(in, dim, 1, n);
  return expectShape(*this, getResult(), shape);
}

LogicalResult AllToAllOp::verify() {
  auto in = getInput().getType();
  int64_t n = getGroupSize(), split = getSplitDim(), concat = getConcatDim();
  if (failed(verifyCollective(*this, getGroup(), n, getInput(), getResult(),
                              /*reduces=*/false)) ||
      failed(expectDimIndex(*this, "split_dim", split, in)) ||
      failed(expectDimIndex(*this, "concat_dim", concat, in)) ||
      failed(expectDivisible(*this, "split_dim", split, in, n)))
    return failure();
  SmallVector<int64_t> shape(in.getShape());
  shape[split] = scaledDim(in, split, 1, n);
  shape[concat] =
      split == concat ? in.getDimSize(concat) : scaledDim(in, concat, n, 1);
  return expectShape(*this, getResult(), shape);
}

bool mlir::k3::isCollective(Operation *op) {
  return isa<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp>(op);
}
