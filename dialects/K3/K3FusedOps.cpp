//===- K3FusedOps.cpp - verifiers of the graph-level fusions ----*- C++ -*-===//
//
// k3.last_tokens, k3.last_token_context, k3.linear_group and
// k3.add_rms_norm (K3FusedOps.td). Dynamic
// sizes are compared only where both sides are static.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "dialects/K3/K3Verify.h"

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::verify;

namespace {

RankedTensorType rt(Value v) { return cast<RankedTensorType>(v.getType()); }

} // namespace

LogicalResult LastTokensOp::verify() {
  Value x = getInput(), cu = getCuSeqlens(), r = getResult();
  if (failed(expectRank(*this, "input", x, 2)) ||
      failed(expectRank(*this, "cu_seqlens", cu, 1)) ||
      failed(expectRank(*this, "result", r, 2)) ||
      failed(expectSameDim(*this, "input", x, 1, "result", r, 1, "row size")))
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

LogicalResult LastTokenContextOp::verify() {
  Named cu = named("cu_seqlens", getCuSeqlens()),
        ctx = named("context_lens", getContextLens()),
        lens = named("last_context_lens", getLastContextLens()),
        lastCu = named("last_cu_seqlens", getLastCuSeqlens());
  if (failed(expectRank(*this, cu, 1)) || failed(expectRank(*this, ctx, 1)) ||
      failed(expectSameShape(*this, ctx, lens)) ||
      failed(expectSameShape(*this, cu, lastCu)))
    return failure();
  // N + 1 offsets for N sequences where both are static.
  int64_t n1 = cu.type.getDimSize(0), n = ctx.type.getDimSize(0);
  if (!ShapedType::isDynamic(n1) && !ShapedType::isDynamic(n) && n != n1 - 1)
    return emitOpError() << "expects 'cu_seqlens' to hold one offset more "
                            "than 'context_lens' has sequences, got "
                         << n1 << " and " << n;
  return success();
}

LogicalResult ShortConvGroupOp::verify() {
  size_t n = getInputs().size();
  if (n == 0)
    return emitOpError() << "expects at least one input";
  if (getWeights().size() != n || getConvStates().size() != n ||
      getResults().size() != n || getFinalStates().size() != n)
    return emitOpError() << "expects as many weights, states, results and "
                            "final states as inputs ("
                         << n << ")";
  int64_t ks = getKernelSize();
  if (ks < 2 || ks > 16)
    return emitOpError() << "expects 'kernel_size' in [2, 16], got " << ks;
  // Names for the diagnostics, alive as long as the checks below.
  SmallVector<std::string> names;
  for (size_t i = 0; i < n; ++i)
    for (const char *what :
         {"inputs", "weights", "conv_states", "results", "final_states"})
      names.push_back(std::string(what) + "[" + std::to_string(i) + "]");
  Named first = named(names[0].c_str(), getInputs()[0]);
  for (size_t i = 0; i < n; ++i) {
    Named x = named(names[5 * i].c_str(), getInputs()[i]),
          w = named(names[5 * i + 1].c_str(), getWeights()[i]),
          c = named(names[5 * i + 2].c_str(), getConvStates()[i]),
          r = named(names[5 * i + 3].c_str(), getResults()[i]),
          s = named(names[5 * i + 4].c_str(), getFinalStates()[i]);
    if (failed(expectShortConvShapes(*this, x, w, c, r, ks)) ||
        failed(expectSameShape(*this, c, s)) ||
        failed(expectSameDim(*this, first, 0, x, 0, "token count")))
      return failure();
  }
  return expectRank(*this, named("cu_seqlens", getCuSeqlens()), 1);
}

LogicalResult LinearGroupOp::verify() {
  if (getWeights().empty())
    return emitOpError() << "expects at least one weight";
  if (getWeights().size() != getResults().size())
    return emitOpError() << "expects one result per weight, got "
                         << getWeights().size() << " weights and "
                         << getResults().size() << " results";
  Named x = named("input", getInput());
  if (failed(expectRankAtLeast(*this, x, 1)))
    return failure();
  int64_t last = x.type.getRank() - 1;
  // Names for the diagnostics, alive as long as the checks below.
  SmallVector<std::string> names;
  for (size_t i = 0; i < getWeights().size(); ++i) {
    names.push_back("weights[" + std::to_string(i) + "]");
    names.push_back("results[" + std::to_string(i) + "]");
  }
  for (auto [i, w, r] : llvm::enumerate(getWeights(), getResults())) {
    Named wn = named(names[2 * i].c_str(), w),
          rn = named(names[2 * i + 1].c_str(), r);
    if (failed(expectRank(*this, wn, 2)))
      return failure();
    if (rn.type.getRank() != x.type.getRank())
      return emitOpError() << "expects '" << rn.name
                           << "' to have the rank of 'input' ("
                           << x.type.getRank() << "), got "
                           << rn.type.getRank();
    for (int64_t d = 0; d < last; ++d)
      if (failed(expectSameDim(*this, x, d, rn, d, "batch dimension")))
        return failure();
    if (failed(expectSameDim(*this, x, last, wn, 1, "input features")) ||
        failed(expectSameDim(*this, wn, 0, rn, last, "output features")))
      return failure();
  }
  return success();
}

LogicalResult AddRMSNormOp::verify() {
  Value x = getInput(), res = getResidual(), w = getWeight(), s = getSum(),
        y = getResult();
  if (rt(x).getRank() < 1)
    return emitOpError() << "expects 'input' to have rank at least 1";
  if (failed(expectRank(*this, "weight", w, 1)) ||
      failed(expectSameShape(*this, "input", x, "residual", res)) ||
      failed(expectSameShape(*this, "input", x, "sum", s)) ||
      failed(expectSameShape(*this, "input", x, "result", y)) ||
      failed(expectSameDim(*this, "input", x, rt(x).getRank() - 1, "weight", w,
                           0, "normalised size")))
    return failure();
  if (!(getEpsilon().convertToDouble() > 0.0))
    return emitOpError() << "expects 'epsilon' to be positive, got "
                         << getEpsilon().convertToDouble();
  return success();
}

LogicalResult PartialRMSNormOp::verify() {
  Value x = getInput(), w = getWeight(), y = getResult();
  if (rt(x).getRank() < 1)
    return emitOpError() << "expects 'input' to have rank at least 1";
  if (failed(expectRank(*this, "weight", w, 1)) ||
      failed(expectSameShape(*this, "input", x, "result", y)))
    return failure();
  int64_t n = rt(x).getShape().back(), r = rt(w).getDimSize(0);
  if (ShapedType::isDynamic(n) || ShapedType::isDynamic(r) || r < 1 || r >= n)
    return emitOpError() << "expects a static 'weight' size R with 0 < R < "
                            "the input's static last dimension, got R = "
                         << r << " and " << n;
  if (!(getEpsilon().convertToDouble() > 0.0))
    return emitOpError() << "expects 'epsilon' to be positive, got "
                         << getEpsilon().convertToDouble();
  return success();
}

LogicalResult GLUGateUpOp::verify() {
  Value x = getInput(), wg = getWGate(), r = getResult();
  if (failed(expectRank(*this, "input", x, 2)) ||
      failed(expectRank(*this, "w_gate", wg, 2)) ||
      failed(expectSameShape(*this, "w_gate", wg, "w_up", getWUp())) ||
      failed(expectRank(*this, "result", r, 2)) ||
      failed(expectSameDim(*this, "input", x, 1, "w_gate", wg, 1,
                           "hidden size")) ||
      failed(
          expectSameDim(*this, "result", r, 0, "input", x, 0, "token count")) ||
      failed(expectSameDim(*this, "result", r, 1, "w_gate", wg, 0,
                           "intermediate size")))
    return failure();
  auto opt = [](FloatAttr a) -> std::optional<double> {
    if (!a)
      return std::nullopt;
    return a.getValueAsDouble();
  };
  return expectGLUActivation(*this, getActivation(), opt(getBetaAttr()),
                             opt(getLinearBetaAttr()));
}
