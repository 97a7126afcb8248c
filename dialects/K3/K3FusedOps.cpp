//===- K3FusedOps.cpp - verifiers of the graph-level fusions ----*- C++ -*-===//
//
// k3.last_tokens and k3.add_rms_norm (K3FusedOps.td). Dynamic sizes are
// compared only where both sides are static.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

RankedTensorType rt(Value v) { return cast<RankedTensorType>(v.getType()); }

LogicalResult rank(Operation *op, const char *name, Value v, int64_t r) {
  if (rt(v).getRank() != r)
    return op->emitOpError() << "expects '" << name << "' to have rank " << r
                             << ", got " << rt(v).getRank();
  return success();
}

/// Dimension `da` of `a` equals dimension `db` of `b` where both are static.
LogicalResult sameDim(Operation *op, const char *an, Value a, int64_t da,
                      const char *bn, Value b, int64_t db, const char *what) {
  int64_t x = rt(a).getDimSize(da), y = rt(b).getDimSize(db);
  if (!ShapedType::isDynamic(x) && !ShapedType::isDynamic(y) && x != y)
    return op->emitOpError()
           << what << " mismatch: '" << an << "' dimension " << da << " is "
           << x << " but '" << bn << "' dimension " << db << " is " << y;
  return success();
}

LogicalResult sameShape(Operation *op, const char *an, Value a, const char *bn,
                        Value b) {
  if (rt(a).getRank() != rt(b).getRank())
    return op->emitOpError() << "expects '" << an << "' and '" << bn
                             << "' to have the same rank, got "
                             << rt(a).getRank() << " and " << rt(b).getRank();
  for (int64_t d = 0; d < rt(a).getRank(); ++d)
    if (failed(sameDim(op, an, a, d, bn, b, d, "shape")))
      return failure();
  return success();
}

} // namespace

LogicalResult LastTokensOp::verify() {
  Value x = getInput(), cu = getCuSeqlens(), r = getResult();
  if (failed(rank(*this, "input", x, 2)) ||
      failed(rank(*this, "cu_seqlens", cu, 1)) ||
      failed(rank(*this, "result", r, 2)) ||
      failed(sameDim(*this, "input", x, 1, "result", r, 1, "row size")))
    return failure();
  // One row per sequence: N = (N + 1) - 1 where cu_seqlens is static.
  int64_t n1 = rt(cu).getDimSize(0), n = rt(r).getDimSize(0);
  if (!ShapedType::isDynamic(n1) && !ShapedType::isDynamic(n) && n != n1 - 1)
    return emitOpError() << "expects one result row per sequence: 'cu_seqlens' "
                            "has "
                         << n1 << " offsets (" << n1 - 1
                         << " sequences) but 'result' has " << n << " rows";
  if (n1 == 0)
    return emitOpError() << "expects 'cu_seqlens' to hold at least one offset";
  if (rt(x).getElementType() != rt(r).getElementType())
    return emitOpError() << "expects 'result' to have the element type of "
                            "'input' ("
                         << rt(x).getElementType() << "), got "
                         << rt(r).getElementType();
  return success();
}

LogicalResult AddRMSNormOp::verify() {
  Value x = getInput(), res = getResidual(), w = getWeight(), s = getSum(),
        y = getResult();
  if (rt(x).getRank() < 1)
    return emitOpError() << "expects 'input' to have rank at least 1";
  if (failed(rank(*this, "weight", w, 1)) ||
      failed(sameShape(*this, "input", x, "residual", res)) ||
      failed(sameShape(*this, "input", x, "sum", s)) ||
      failed(sameShape(*this, "input", x, "result", y)) ||
      failed(sameDim(*this, "input", x, rt(x).getRank() - 1, "weight", w, 0,
                     "normalised size")))
    return failure();
  if (!(getEpsilon().convertToDouble() > 0.0))
    return emitOpError() << "expects 'epsilon' to be positive, got "
                         << getEpsilon().convertToDouble();
  return success();
}
