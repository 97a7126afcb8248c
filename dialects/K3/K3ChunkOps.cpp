//===- K3ChunkOps.cpp - verifiers of the chunkwise KDA ops ------*- C++ -*-===//
//
// Layout checks of the chunk-level KDA form (K3ChunkOps.td): token-indexed
// tensors are [B, T, H, X], chunk matrices [B, T, H, chunk_size], per
// sequence tensors [N, (S,) H, K, V]. Dynamic sizes are compared only where
// both sides are static.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/DecayGate.h"
#include "dialects/K3/K3Dialect.h"
#include "dialects/K3/K3Verify.h"

#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::verify;

namespace {

RankedTensorType rt(Value v) { return cast<RankedTensorType>(v.getType()); }

/// `a` and `b` agree in batch, token and head dimensions.
LogicalResult sameTokens(Operation *op, const char *an, Value a, const char *bn,
                         Value b) {
  for (int64_t d = 0; d < 3; ++d)
    if (failed(expectSameDim(op, an, a, d, bn, b, d,
                             d == 0   ? "batch"
                             : d == 1 ? "token count"
                                      : "head count")))
      return failure();
  return success();
}

LogicalResult chunkSize(Operation *op, int64_t c) {
  if (c <= 0 || c % 16 != 0)
    return op->emitOpError() << "expects chunk_size to be a positive "
                                "multiple of 16 (the tile size), got "
                             << c;
  return success();
}

LogicalResult tileSize(Operation *op, int64_t tile, int64_t chunk) {
  if (tile <= 0 || !llvm::isPowerOf2_64(tile))
    return op->emitOpError()
           << "expects tile_size to be a power of two, got " << tile;
  if (chunk % tile != 0)
    return op->emitOpError() << "expects chunk_size " << chunk
                             << " to be a multiple of tile_size " << tile;
  return success();
}

/// A chunk matrix [B, T, H, chunk_size].
LogicalResult chunkMatrix(Operation *op, const char *name, Value m,
                          int64_t chunk) {
  if (failed(expectRank(op, name, m, 4)))
    return failure();
  int64_t c = rt(m).getDimSize(3);
  if (c != chunk)
    return op->emitOpError()
           << "expects '" << name << "' to hold chunk_size = " << chunk
           << " columns, got " << c;
  return success();
}

LogicalResult tokenTensor(Operation *op, const char *name, Value v,
                          const char *refName, Value ref, int64_t r = 4) {
  if (failed(expectRank(op, name, v, r)))
    return failure();
  return sameTokens(op, name, v, refName, ref);
}

LogicalResult cuBatch(Operation *op, Value cu, Value ref) {
  if (!cu)
    return success();
  if (failed(expectRank(op, "cu_seqlens", cu, 1)))
    return failure();
  int64_t b = rt(ref).getDimSize(0);
  if (!ShapedType::isDynamic(b) && b != 1)
    return op->emitOpError() << "expects batch 1 with cu_seqlens, got " << b;
  return success();
}

} // namespace

LogicalResult KDAChunkPrepareOp::verify() {
  if (failed(chunkSize(*this, getChunkSize())) ||
      failed(expectRank(*this, "q", getQ(), 4)) ||
      failed(tokenTensor(*this, "k", getK(), "q", getQ())) ||
      failed(tokenTensor(*this, "g", getG(), "q", getQ())) ||
      failed(tokenTensor(*this, "beta", getBeta(), "q", getQ(), 3)) ||
      failed(cuBatch(*this, getCuSeqlens(), getQ())))
    return failure();
  for (Value r : {getQScaled(), getKNorm(), getGCum(), getKGamma()})
    if (rt(r).getShape() != rt(getQ()).getShape())
      return emitOpError() << "expects q-shaped results, got " << r.getType();
  if (bool(getALog()) != bool(getDtBias()) ||
      bool(getALog()) != getGateKind().has_value())
    return emitOpError() << "expects gate_kind together with "
                            "gate_params(A_log, dt_bias)";
  if (getGateKind() == DecayGateKind::lower_bounded_sigmoid && !getLowerBound())
    return emitOpError() << "lower_bounded_sigmoid gate needs 'lower_bound'";
  return success();
}

LogicalResult KDAChunkGramOp::verify() {
  int64_t chunk = getChunkSize(), tile = getTileSize();
  if (failed(chunkSize(*this, chunk)) || failed(tileSize(*this, tile, chunk)) ||
      failed(expectRank(*this, "x", getX(), 4)) ||
      failed(tokenTensor(*this, "y", getY(), "x", getX())) ||
      failed(tokenTensor(*this, "G", getG(), "x", getX())) ||
      failed(chunkMatrix(*this, "result", getResult(), chunk)) ||
      failed(sameTokens(*this, "result", getResult(), "x", getX())) ||
      failed(cuBatch(*this, getCuSeqlens(), getX())))
    return failure();
  if (getRowScale() &&
      failed(tokenTensor(*this, "row_scale", getRowScale(), "x", getX(), 3)))
    return failure();
  if (getUnitDiagonal() && !getStrict())
    return emitOpError() << "unit_diagonal requires strict (the diagonal "
                            "would be counted twice)";
  if (auto lb = getGateLowerBound()) {
    double b = lb->convertToDouble();
    if (!(b < 0.0))
      return emitOpError() << "expects gate_lower_bound < 0, got " << b;
    // The tile-factored form multiplies exp(G_i - G_r) exp(G_r - G_j) with
    // |G_r - G_j| <= |lb| (tile - 1): it must stay finite in f32.
    if (std::fabs(b) * double(tile - 1) > 88.0)
      return emitOpError()
             << "tile-factored decay form needs |gate_lower_bound| * "
                "(tile_size - 1) <= 88 for exp to stay finite in f32, got "
             << std::fabs(b) << " * " << (tile - 1);
  }
  return success();
}

LogicalResult TriSolveOp::verify() {
  int64_t chunk = getChunkSize();
  if (failed(chunkSize(*this, chunk)) ||
      failed(chunkMatrix(*this, "A", getA(), chunk)) ||
      failed(tokenTensor(*this, "rhs", getRhs(), "A", getA())) ||
      failed(cuBatch(*this, getCuSeqlens(), getA())))
    return failure();
  if (rt(getResult()).getShape() != rt(getRhs()).getShape())
    return emitOpError() << "expects the result shaped like 'rhs'";
  if (getRowScale() &&
      failed(tokenTensor(*this, "row_scale", getRowScale(), "A", getA(), 3)))
    return failure();
  StringRef mode = getMode();
  if (mode == "forward") {
    if (getTileSize())
      return emitOpError() << "mode \"forward\" takes no tile_size";
    return success();
  }
  if (mode != "blocked")
    return emitOpError() << "expects mode \"forward\" or \"blocked\", got \""
                         << mode << "\"";
  if (!getTileSize())
    return emitOpError() << "mode \"blocked\" needs tile_size";
  return tileSize(*this, *getTileSize(), chunk);
}

LogicalResult TriInverseOp::verify() {
  int64_t chunk = getChunkSize();
  if (failed(chunkSize(*this, chunk)) ||
      failed(tileSize(*this, getTileSize(), chunk)) ||
      failed(chunkMatrix(*this, "A", getA(), chunk)) ||
      failed(cuBatch(*this, getCuSeqlens(), getA())))
    return failure();
  if (rt(getResult()).getShape() != rt(getA()).getShape())
    return emitOpError() << "expects the result shaped like 'A'";
  return success();
}

LogicalResult ChunkTrilMatmulOp::verify() {
  int64_t chunk = getChunkSize();
  if (failed(chunkSize(*this, chunk)) ||
      failed(chunkMatrix(*this, "A", getA(), chunk)) ||
      failed(tokenTensor(*this, "x", getX(), "A", getA())) ||
      failed(cuBatch(*this, getCuSeqlens(), getA())))
    return failure();
  if (getRowScale() &&
      failed(tokenTensor(*this, "row_scale", getRowScale(), "A", getA(), 3)))
    return failure();
  if (rt(getResult()).getShape() != rt(getX()).getShape())
    return emitOpError() << "expects the result shaped like 'x'";
  return success();
}

/// [N, H, K, V] state against q-like [B, T, H, K] and v-like [B, T, H, V].
static LogicalResult stateShape(Operation *op, const char *name, Value s,
                                Value qLike, Value vLike, int64_t segDims) {
  if (failed(expectRank(op, name, s, 4 + segDims)) ||
      failed(expectSameDim(op, name, s, 1 + segDims, "k", qLike, 2,
                           "head count")) ||
      failed(expectSameDim(op, name, s, 2 + segDims, "k", qLike, 3,
                           "key dimension")) ||
      failed(expectSameDim(op, name, s, 3 + segDims, "U", vLike, 3,
                           "value dimension")))
    return failure();
  return success();
}

LogicalResult KDAChunkStateOp::verify() {
  if (failed(chunkSize(*this, getChunkSize())) ||
      failed(expectRank(*this, "U", getU(), 4)) ||
      failed(tokenTensor(*this, "W", getW(), "U", getU())) ||
      failed(tokenTensor(*this, "k_norm", getKNorm(), "U", getU())) ||
      failed(tokenTensor(*this, "q_scaled", getQScaled(), "U", getU())) ||
      failed(tokenTensor(*this, "G", getG(), "U", getU())) ||
      failed(cuBatch(*this, getCuSeqlens(), getU())))
    return failure();
  if (rt(getW()).getShape() != rt(getKNorm()).getShape())
    return emitOpError() << "expects 'W' shaped like 'k_norm'";
  if (failed(stateShape(*this, "final_state", getFinalState(), getKNorm(),
                        getU(), 0)))
    return failure();
  if (getInitialState() && rt(getInitialState()) != rt(getFinalState()))
    return emitOpError() << "expects 'initial_state' shaped and typed like "
                            "the final state";
  if (Value s = getSegmentStarts()) {
    if (!getNumSegments())
      return emitOpError() << "segment_starts needs num_segments";
    if (getInitialState())
      return emitOpError() << "takes initial_state or segment_starts, not "
                              "both";
    if (failed(stateShape(*this, "segment_starts", s, getKNorm(), getU(), 1)))
      return failure();
    if (rt(s).getDimSize(1) != int64_t(*getNumSegments()))
      return emitOpError() << "expects 'segment_starts' dim 1 = num_segments";
  } else if (getNumSegments()) {
    return emitOpError() << "num_segments needs segment_starts";
  }
  for (Value r : {getVNew(), getOInter()})
    if (rt(r).getShape() != rt(getU()).getShape())
      return emitOpError() << "expects U-shaped v_new and o_inter";
  return success();
}

LogicalResult KDAChunkOutputOp::verify() {
  int64_t chunk = getChunkSize();
  if (failed(chunkSize(*this, chunk)) ||
      failed(chunkMatrix(*this, "M", getM(), chunk)) ||
      failed(tokenTensor(*this, "v_new", getVNew(), "M", getM())) ||
      failed(cuBatch(*this, getCuSeqlens(), getM())))
    return failure();
  if (rt(getOInter()).getShape() != rt(getVNew()).getShape() ||
      rt(getOutput()).getShape() != rt(getVNew()).getShape())
    return emitOpError() << "expects o_inter and output shaped like v_new";
  return success();
}

LogicalResult KDASegmentSummaryOp::verify() {
  if (failed(chunkSize(*this, getChunkSize())) ||
      failed(expectRank(*this, "U", getU(), 4)) ||
      failed(tokenTensor(*this, "W", getW(), "U", getU())) ||
      failed(tokenTensor(*this, "k_norm", getKNorm(), "U", getU())) ||
      failed(tokenTensor(*this, "G", getG(), "U", getU())) ||
      failed(cuBatch(*this, getCuSeqlens(), getU())))
    return failure();
  if (getNumSegments() < 1)
    return emitOpError() << "expects num_segments >= 1";
  if (failed(expectRank(*this, "transition", getTransition(), 5)) ||
      failed(stateShape(*this, "contribution", getContribution(), getKNorm(),
                        getU(), 1)))
    return failure();
  int64_t s = getNumSegments();
  if (rt(getTransition()).getDimSize(1) != s ||
      rt(getContribution()).getDimSize(1) != s)
    return emitOpError() << "expects results with num_segments = " << s
                         << " in dim 1";
  int64_t k = rt(getKNorm()).getDimSize(3);
  if (rt(getTransition()).getDimSize(3) != k ||
      rt(getTransition()).getDimSize(4) != k)
    return emitOpError() << "expects a K x K transition";
  return success();
}

LogicalResult KDASegmentScanOp::verify() {
  if (failed(expectRank(*this, "transition", getTransition(), 5)) ||
      failed(expectRank(*this, "contribution", getContribution(), 5)))
    return failure();
  if (rt(getStarts()).getShape() != rt(getContribution()).getShape())
    return emitOpError() << "expects 'starts' shaped like 'contribution'";
  if (Value init = getInitialState()) {
    auto c = rt(getContribution()).getShape();
    auto i = rt(init).getShape();
    if (i.size() != 4 || i[1] != c[2] || i[2] != c[3] || i[3] != c[4])
      return emitOpError() << "expects 'initial_state' [N, H, K, V]";
  }
  return success();
}

LogicalResult KDAMMAOperandsOp::verify() {
  if (failed(expectRank(*this, "q", getQ(), 4)) ||
      failed(tokenTensor(*this, "k", getK(), "q", getQ())) ||
      failed(tokenTensor(*this, "g", getG(), "q", getQ())) ||
      failed(tokenTensor(*this, "beta", getBeta(), "q", getQ(), 3)) ||
      failed(tokenTensor(*this, "packed", getPacked(), "q", getQ())) ||
      failed(cuBatch(*this, getCuSeqlens(), getQ())))
    return failure();
  int64_t k = rt(getQ()).getDimSize(3);
  if (ShapedType::isDynamic(k) || k % 64 != 0 || k > 256)
    return emitOpError() << "expects a static key dimension that is a "
                            "multiple of 64 up to 256, got "
                         << (ShapedType::isDynamic(k) ? std::string("?")
                                                      : std::to_string(k));
  if (rt(getK()).getShape() != rt(getQ()).getShape() ||
      rt(getG()).getShape() != rt(getQ()).getShape())
    return emitOpError() << "expects q, k and g of one shape";
  int64_t words = rt(getPacked()).getDimSize(3);
  if (words != 5 * k / 2 + 16)
    return emitOpError() << "expects 5K/2 + 16 = " << 5 * k / 2 + 16
                         << " words per token in 'packed', got " << words;
  if (getGateKind() == DecayGateKind::neg_softplus) {
    if (getLowerBound())
      return emitOpError() << "expects no lower_bound with the neg_softplus "
                              "gate";
  } else if (!getLowerBound()) {
    return emitOpError() << "expects a lower_bound with the "
                            "lower_bounded_sigmoid gate";
  } else if (double lb = getLowerBound()->convertToDouble();
             !isValidGateLowerBound(lb)) {
    return emitOpError() << "expects lower_bound in [-5, 0) (the gate's range; "
                            "the in-chunk decay products stay in the f32 "
                            "range for |lb| <= 5.5), got "
                         << lb;
  }
  int64_t b = rt(getQ()).getDimSize(0);
  if (!getCuSeqlens() && b != 1)
    return emitOpError() << "expects cu_seqlens or batch 1";
  return success();
}

LogicalResult KDAMMARecurrenceOp::verify() {
  Value ops = getPacked(), v = getV();
  if (failed(expectRank(*this, "packed", ops, 4)) ||
      failed(tokenTensor(*this, "v", v, "packed", ops)) ||
      failed(tokenTensor(*this, "output", getOutput(), "packed", ops)) ||
      failed(cuBatch(*this, getCuSeqlens(), ops)) ||
      failed(expectRank(*this, "final_state", getFinalState(), 4)) ||
      failed(expectSameDim(*this, "final_state", getFinalState(), 1, "packed",
                           ops, 2, "head count")) ||
      failed(expectSameDim(*this, "final_state", getFinalState(), 3, "v", v, 3,
                           "value dimension")))
    return failure();
  if (rt(getOutput()).getShape() != rt(v).getShape())
    return emitOpError() << "expects a v-shaped output";
  int64_t k = rt(getFinalState()).getDimSize(2);
  int64_t words = rt(ops).getDimSize(3);
  if (ShapedType::isDynamic(k) || words != 5 * k / 2 + 16)
    return emitOpError() << "expects 5K/2 + 16 words per token for the "
                            "state's key dimension K";
  int64_t vd = rt(v).getDimSize(3);
  if (ShapedType::isDynamic(vd) || vd % 16 != 0)
    return emitOpError() << "expects a static value dimension that is a "
                            "multiple of 16";
  if (getInitialState() && rt(getInitialState()) != rt(getFinalState()))
    return emitOpError() << "expects 'initial_state' shaped and typed like "
                            "the final state";
  if (!getCuSeqlens() && rt(ops).getDimSize(0) != 1)
    return emitOpError() << "expects cu_seqlens or batch 1";
  return success();
}
