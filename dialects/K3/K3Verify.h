//===- K3Verify.h - shared checks of the K3 op verifiers ---------*- C++
//-*-===//
//
// Verifiers report the operand by name and the dimension by index and
// meaning, so that an ill-shaped model description points at its mistake.
// Dynamic dimensions are compared only where both sides are static. One set
// for every op file (K3Ops.cpp, K3ChunkOps.cpp, K3FusedOps.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef K3_DIALECTS_K3_K3VERIFY_H
#define K3_DIALECTS_K3_K3VERIFY_H

#include "dialects/K3/K3Dialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"

namespace mlir::k3::verify {

/// A tensor value together with the name a diagnostic uses for it.
struct Named {
  const char *name;
  RankedTensorType type;
};
Named named(const char *name, Value v);

LogicalResult expectRank(Operation *op, Named t, int64_t rank);
LogicalResult expectRankAtLeast(Operation *op, Named t, int64_t rank);
/// Dimension `ad` of `a` must equal dimension `bd` of `b` (when both static).
LogicalResult expectSameDim(Operation *op, Named a, int64_t ad, Named b,
                            int64_t bd, StringRef meaning);
/// Dimension `d` of `t` must be `expected` (when static).
LogicalResult expectDim(Operation *op, Named t, int64_t d, int64_t expected,
                        StringRef meaning);
LogicalResult expectSameShape(Operation *op, Named a, Named b);
LogicalResult expectStatic(Operation *op, Named t);
LogicalResult expectPositive(Operation *op, StringRef attr, double v);
LogicalResult expectPositive(Operation *op, StringRef attr, int64_t v);
/// The router's selection (k3.moe_router, k3.moe_topk): `indices` and
/// `weights` [T, top_k] of the same shape, top_k in [1, experts], the
/// optional bias [experts] (its dim read from `expertsOf`, dim
/// `expertsDim`), a positive scaling factor.
LogicalResult expectRouterSelection(Operation *op, Named indices, Named weights,
                                    int64_t topK, Value correctionBias,
                                    Named expertsOf, int64_t expertsDim,
                                    double scalingFactor);
/// The router's group-limited choice (`n_group`, `topk_group` of
/// k3.moe_router, k3.moe_topk): n_group >= 1 dividing the expert count
/// (when static), topk_group in [1, n_group], and top_k no more than the
/// experts of topk_group groups, so that every token has top_k eligible
/// experts; with a correction bias and a group limit, groups of at least 2
/// experts (the group score sums the best two). 1 / 1 is the plain top-k.
LogicalResult expectRouterGroups(Operation *op, int64_t groups,
                                 int64_t topkGroup, int64_t topK, bool hasBias,
                                 Named expertsOf, int64_t expertsDim);
/// Both of the above for a router op (k3.moe_router, k3.moe_topk), whose
/// experts are dim `expertsDim` of `expertsOf` (W's rows, the logits'
/// columns).
template <typename RouterOp>
LogicalResult expectRouterRule(RouterOp op, Named expertsOf,
                               int64_t expertsDim) {
  Named indices = named("indices", op.getIndices());
  int64_t topK = static_cast<int64_t>(op.getTopK());
  if (failed(expectRouterSelection(
          op, indices, named("weights", op.getWeights()), topK,
          op.getCorrectionBias(), expertsOf, expertsDim,
          op.getRoutedScalingFactor().convertToDouble())))
    return failure();
  return expectRouterGroups(op, static_cast<int64_t>(op.getNGroup()),
                            static_cast<int64_t>(op.getTopkGroup()), topK,
                            bool(op.getCorrectionBias()), expertsOf,
                            expertsDim);
}
/// The SiTU parameters of a GLU op: `beta` (positive) with situ only,
/// `linear_beta` optional.
LogicalResult expectGLUActivation(Operation *op, GLUActivation act,
                                  std::optional<double> beta,
                                  std::optional<double> linearBeta);

/// One depthwise short convolution (k3.short_conv, a member of
/// k3.short_conv_group): input `x` [T, C] and its result the same shape,
/// weight [C, 1, kernelSize], state [N, C, kernelSize - 1].
LogicalResult expectShortConvShapes(Operation *op, Named x, Named w,
                                    Named state, Named result,
                                    int64_t kernelSize);
/// An MXFP4 weight (`f4E2M1FN`) has whole 32-element scale blocks along its
/// last dimension; float weights pass.
LogicalResult expectWeightBlocks(Operation *op, Named w);
/// Weights read by one op together (`gate` and `up`) share one storage
/// type, so that one kernel decodes both the same way.
LogicalResult expectSameWeightType(Operation *op, Named a, Named b);

/// The same on (name, value) pairs.
inline LogicalResult expectRank(Operation *op, const char *name, Value v,
                                int64_t rank) {
  return expectRank(op, named(name, v), rank);
}
inline LogicalResult expectSameDim(Operation *op, const char *an, Value a,
                                   int64_t ad, const char *bn, Value b,
                                   int64_t bd, StringRef meaning) {
  return expectSameDim(op, named(an, a), ad, named(bn, b), bd, meaning);
}
inline LogicalResult expectSameShape(Operation *op, const char *an, Value a,
                                     const char *bn, Value b) {
  return expectSameShape(op, named(an, a), named(bn, b));
}

} // namespace mlir::k3::verify

#endif // K3_DIALECTS_K3_K3VERIFY_H
