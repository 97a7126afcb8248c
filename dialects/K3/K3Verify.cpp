//===- K3Verify.cpp - shared checks of the K3 op verifiers -------*- C++
//-*-===//
#include "dialects/K3/K3Verify.h"

using namespace mlir;
using namespace mlir::k3::verify;

namespace mlir::k3::verify {

Named named(const char *name, Value v) {
  return {name, cast<RankedTensorType>(v.getType())};
}

LogicalResult expectRank(Operation *op, Named t, int64_t rank) {
  if (t.type.getRank() != rank)
    return op->emitOpError() << "expects '" << t.name << "' to have rank "
                             << rank << ", got " << t.type.getRank();
  return success();
}

LogicalResult expectRankAtLeast(Operation *op, Named t, int64_t rank) {
  if (t.type.getRank() < rank)
    return op->emitOpError()
           << "expects '" << t.name << "' to have rank at least " << rank
           << ", got " << t.type.getRank();
  return success();
}

LogicalResult expectSameDim(Operation *op, Named a, int64_t ad, Named b,
                            int64_t bd, StringRef meaning) {
  int64_t x = a.type.getDimSize(ad), y = b.type.getDimSize(bd);
  if (!ShapedType::isDynamic(x) && !ShapedType::isDynamic(y) && x != y)
    return op->emitOpError() << meaning << " mismatch: '" << a.name
                             << "' dimension " << ad << " is " << x << " but '"
                             << b.name << "' dimension " << bd << " is " << y;
  return success();
}

LogicalResult expectDim(Operation *op, Named t, int64_t d, int64_t expected,
                        StringRef meaning) {
  int64_t x = t.type.getDimSize(d);
  if (!ShapedType::isDynamic(x) && x != expected)
    return op->emitOpError()
           << "expects '" << t.name << "' dimension " << d << " (" << meaning
           << ") to be " << expected << ", got " << x;
  return success();
}

LogicalResult expectSameShape(Operation *op, Named a, Named b) {
  if (a.type.getRank() != b.type.getRank())
    return op->emitOpError() << "expects '" << a.name << "' and '" << b.name
                             << "' to have the same rank, got "
                             << a.type.getRank() << " and " << b.type.getRank();
  for (int64_t d = 0; d < a.type.getRank(); ++d)
    if (failed(expectSameDim(op, a, d, b, d, "shape")))
      return failure();
  return success();
}

LogicalResult expectStatic(Operation *op, Named t) {
  if (!t.type.hasStaticShape())
    return op->emitOpError() << "expects '" << t.name
                             << "' to have a static shape, got " << t.type;
  return success();
}

LogicalResult expectWeightBlocks(Operation *op, Named w) {
  if (!isa<Float4E2M1FNType>(w.type.getElementType()))
    return success();
  int64_t last = w.type.getRank() ? w.type.getShape().back() : 0;
  if (w.type.getRank() == 0 || ShapedType::isDynamic(last) || last % 32 != 0)
    return op->emitOpError()
           << "expects the last dimension of MXFP4 weight '" << w.name
           << "' to be a static multiple of 32 (one E8M0 scale per 32 "
              "elements), got "
           << w.type;
  return success();
}

LogicalResult expectSameWeightType(Operation *op, Named a, Named b) {
  if (a.type.getElementType() != b.type.getElementType())
    return op->emitOpError()
           << "expects '" << a.name << "' and '" << b.name
           << "' to have the same element type, got " << a.type.getElementType()
           << " and " << b.type.getElementType();
  return success();
}

LogicalResult expectPositive(Operation *op, StringRef attr, double v) {
  if (!(v > 0.0))
    return op->emitOpError()
           << "expects '" << attr << "' to be positive, got " << v;
  return success();
}

LogicalResult expectPositive(Operation *op, StringRef attr, int64_t v) {
  if (v <= 0)
    return op->emitOpError()
           << "expects '" << attr << "' to be positive, got " << v;
  return success();
}

LogicalResult expectRouterSelection(Operation *op, Named indices, Named weights,
                                    int64_t topK, Value correctionBias,
                                    Named expertsOf, int64_t expertsDim,
                                    double scalingFactor) {
  if (failed(expectRank(op, indices, 2)) ||
      failed(expectSameShape(op, indices, weights)) ||
      failed(expectDim(op, indices, 1, topK, "top_k")))
    return failure();
  int64_t experts = expertsOf.type.getDimSize(expertsDim);
  if (topK < 1 || (!ShapedType::isDynamic(experts) && topK > experts))
    return op->emitOpError()
           << "expects 'top_k' in [1, " << experts << "], got " << topK;
  if (correctionBias) {
    Named b = named("correction_bias", correctionBias);
    if (failed(expectRank(op, b, 1)) ||
        failed(expectSameDim(op, b, 0, expertsOf, expertsDim, "expert count")))
      return failure();
  }
  return expectPositive(op, "routed_scaling_factor", scalingFactor);
}

LogicalResult expectRouterGroups(Operation *op, int64_t groups,
                                 int64_t topkGroup, int64_t topK, bool hasBias,
                                 Named expertsOf, int64_t expertsDim) {
  if (groups < 1)
    return op->emitOpError() << "expects 'n_group' >= 1, got " << groups;
  if (topkGroup < 1 || topkGroup > groups)
    return op->emitOpError() << "expects 'topk_group' in [1, " << groups
                             << "] ('n_group'), got " << topkGroup;
  int64_t experts = expertsOf.type.getDimSize(expertsDim);
  if (ShapedType::isDynamic(experts))
    return success();
  if (experts % groups != 0)
    return op->emitOpError() << "expects 'n_group' (" << groups
                             << ") to divide the expert count " << experts;
  int64_t perGroup = experts / groups;
  if (hasBias && topkGroup < groups && perGroup < 2)
    return op->emitOpError()
           << "expects groups of at least 2 experts with a correction bias "
              "(the group score sums the best two), got "
           << perGroup;
  int64_t eligible = topkGroup * perGroup;
  if (topK > eligible)
    return op->emitOpError() << "expects 'top_k' (" << topK << ") at most the "
                             << eligible << " experts of 'topk_group' ("
                             << topkGroup << ") groups of " << experts / groups;
  return success();
}

LogicalResult expectGLUActivation(Operation *op, GLUActivation act,
                                  std::optional<double> beta,
                                  std::optional<double> linearBeta) {
  if (act == GLUActivation::silu) {
    if (beta || linearBeta)
      return op->emitOpError()
             << "'beta' and 'linear_beta' apply only to the situ activation";
    return success();
  }
  if (!beta)
    return op->emitOpError() << "situ activation requires 'beta'";
  if (failed(expectPositive(op, "beta", *beta)))
    return failure();
  if (linearBeta && failed(expectPositive(op, "linear_beta", *linearBeta)))
    return failure();
  return success();
}

LogicalResult expectShortConvShapes(Operation *op, Named x, Named w,
                                    Named state, Named result,
                                    int64_t kernelSize) {
  if (failed(expectRank(op, x, 2)) || failed(expectRank(op, w, 3)) ||
      failed(expectRank(op, state, 3)) ||
      failed(expectSameShape(op, x, result)))
    return failure();
  if (failed(expectSameDim(op, x, 1, w, 0, "channel count")) ||
      failed(expectDim(op, w, 1, 1, "depthwise group")) ||
      failed(expectDim(op, w, 2, kernelSize, "kernel size")) ||
      failed(expectSameDim(op, x, 1, state, 1, "channel count")) ||
      failed(expectDim(op, state, 2, kernelSize - 1, "kernel size - 1")))
    return failure();
  return success();
}

} // namespace mlir::k3::verify
