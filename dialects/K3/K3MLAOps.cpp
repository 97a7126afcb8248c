//===- K3MLAOps.cpp - verifiers of the expanded-MLA ops ---------*- C++ -*-===//
//
// k3.mla_prefill_attention and k3.latent_cache_append (K3MLAOps.td).
// Dynamic sizes are compared only where both sides are static.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "dialects/K3/K3Verify.h"

using namespace mlir;
using namespace mlir::k3;
using namespace mlir::k3::verify;

LogicalResult MLAPrefillAttentionOp::verify() {
  int64_t dn = getQkNopeHeadDim(), dr = getQkRopeHeadDim(), dv = getVHeadDim();
  if (failed(expectPositive(*this, "qk_nope_head_dim", dn)) ||
      failed(expectPositive(*this, "v_head_dim", dv)) ||
      failed(expectPositive(*this, "scale", getScale().convertToDouble())))
    return failure();
  if (dr < 0)
    return emitOpError() << "expects 'qk_rope_head_dim' >= 0, got " << dr;
  Named q = named("q", getQ()), kv = named("kv", getKv()),
        lat = named("latent", getLatent()), r = named("result", getResult());
  if (failed(expectRank(*this, q, 3)) || failed(expectRank(*this, kv, 3)) ||
      failed(expectRank(*this, lat, 2)) || failed(expectRank(*this, r, 3)))
    return failure();
  if (failed(expectDim(*this, q, 2, dn + dr,
                       "qk_nope_head_dim + qk_rope_head_dim")) ||
      failed(
          expectDim(*this, kv, 2, dn + dv, "qk_nope_head_dim + v_head_dim")) ||
      failed(expectSameDim(*this, q, 1, kv, 1, "head count")) ||
      failed(expectSameDim(*this, q, 1, r, 1, "head count")) ||
      failed(expectDim(*this, r, 2, dv, "v_head_dim")) ||
      failed(expectSameDim(*this, q, 0, kv, 0, "token count")) ||
      failed(expectSameDim(*this, q, 0, lat, 0, "token count")) ||
      failed(expectSameDim(*this, q, 0, r, 0, "token count")))
    return failure();
  int64_t width = lat.type.getDimSize(1);
  if (!ShapedType::isDynamic(width) && width < dr)
    return emitOpError() << "expects 'latent' at least qk_rope_head_dim (" << dr
                         << ") wide, got " << width;
  if (Value gate = getGate()) {
    Named g = named("gate", gate);
    int64_t heads = q.type.getDimSize(1);
    if (failed(expectRank(*this, g, 2)) ||
        failed(expectSameDim(*this, q, 0, g, 0, "token count")))
      return failure();
    if (!ShapedType::isDynamic(heads) &&
        failed(expectDim(*this, g, 1, heads * dv, "num_heads * v_head_dim")))
      return failure();
  }
  if (Value cu = getCuSeqlens())
    return expectRank(*this, named("cu_seqlens", cu), 1);
  return success();
}

LogicalResult LatentCacheAppendOp::verify() {
  Named c = named("cache", getCache()),
        lens = named("cache_lens", getCacheLens()),
        lat = named("latent", getLatent()), r = named("result", getResult());
  if (failed(expectRank(*this, c, 3)) || failed(expectRank(*this, lens, 1)) ||
      failed(expectRank(*this, lat, 2)) ||
      failed(expectSameShape(*this, c, r)) ||
      failed(expectSameDim(*this, c, 0, lens, 0, "sequence count")) ||
      failed(expectSameDim(*this, c, 2, lat, 1, "latent width")))
    return failure();
  if (Value cu = getCuSeqlens())
    return expectRank(*this, named("cu_seqlens", cu), 1);
  return success();
}
