//===- Attention.cpp - kernels of softmax attention -------------*- C++ -*-===//
//
// Causal softmax attention within each packed sequence, and the latent
// form of gated MLA. The latent kernel never expands keys and values: it
// folds kv_b into the query (q_nope W_k, "absorption") and into the output
// (W_v applied to the probability-weighted sum of latents), so it reads
// each cached latent once per query, as decoding against a latent cache
// must.
//
//===----------------------------------------------------------------------===//
#include "lowering/StateInPlace.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

void k3::emitSoftmaxRow(KernelBuilder &kb, Value start, Value stop, int64_t dv,
                        llvm::function_ref<Value(Value)> score,
                        llvm::function_ref<Value(Value, Value)> value,
                        llvm::function_ref<void(Value, Value)> write) {
  Value m = kb.reduce(start, stop, kb.f32(-INFINITY),
                      [&](Value s, Value a) { return kb.maxf(a, score(s)); });
  Value acc = kb.scratch(dv);
  kb.forRange(kb.idx(dv), [&](Value d) { kb.store(kb.f32(0.0), acc, {d}); });
  Value l = kb.reduce(start, stop, kb.f32(0.0), [&](Value s, Value a) {
    Value p = kb.exp(kb.sub(score(s), m));
    kb.forRange(kb.idx(dv), [&](Value d) {
      kb.store(kb.fma(p, value(s, d), kb.load(acc, {d})), acc, {d});
    });
    return kb.add(a, p);
  });
  kb.forRange(kb.idx(dv),
              [&](Value d) { write(d, kb.div(kb.load(acc, {d}), l)); });
}

LogicalResult k3::emitCausalAttention(CausalAttentionOp op, KernelBuilder &kb,
                                      In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand qIn = ops.getQ(), vIn = ops.getV(), cu = ops.getCuSeqlens();
  Value q = qIn.full, k = ops.getK().full, v = vIn.full, o = out[0].full;
  int64_t dqk = qIn.shape[2], dv = vIn.shape[2];
  Value scale = kb.f32(op.getScale().convertToDouble());
  kb.parallel({kb.dim(qIn.shape[0]), kb.dim(qIn.shape[1])}, [&](ValueRange iv) {
    Value t = iv[0], h = iv[1];
    Value start = cu ? emitSequenceOf(kb, cu.full, t).first : kb.idx(0);
    auto score = [&](Value s) {
      Value dot = kb.reduce(kb.idx(dqk), kb.f32(0.0), [&](Value d, Value a) {
        return kb.fma(kb.load(q, {t, h, d}), kb.load(k, {s, h, d}), a);
      });
      return kb.mul(dot, scale);
    };
    emitSoftmaxRow(
        kb, start, kb.addi(t, kb.idx(1)), dv, score,
        [&](Value s, Value d) { return kb.load(v, {s, h, d}); },
        [&](Value d, Value y) { kb.store(y, o, {t, h, d}); });
  });
  return success();
}

namespace {

/// The latent attention kernel, step by step.
class LatentAttention {
public:
  LatentAttention(LatentAttentionOp op, KernelBuilder &kb, In in, Out out)
      : op(op), kb(kb) {
    auto ops = operandsOf(op, in);
    KernelOperand qIn = ops.getQ();
    q = qIn.full;
    latent = ops.getLatent().full;
    kvb = ops.getKvB().full;
    cache = ops.getLatentCache();
    lens = ops.getCacheLens();
    cu = ops.getCuSeqlens();
    o = resultOf(out, op.getResult()).full;
    cacheOut = resultOf(out, op.getLatentCacheOut()).full;
    dn = op.getQkNopeHeadDim();
    dr = op.getQkRopeHeadDim();
    dv = op.getVHeadDim();
    rank = op.getKvLoraRank();
    numTokens = kb.dim(qIn.shape[0]);
    scale = kb.f32(op.getScale().convertToDouble());
  }

  void emit() {
    if (cache)
      updateCache();
    kb.parallel({numTokens, kb.idx(op.getNumHeads())}, [&](ValueRange iv) {
      kb.scope([&] { attend(iv[0], iv[1]); });
    });
  }

private:
  /// First token of token `t`'s sequence, and its index.
  std::pair<Value, Value> sequenceOf(Value t) {
    if (cu)
      return emitSequenceOf(kb, cu.full, t);
    return {kb.idx(0), kb.idx(0)};
  }

  /// Phase 1: the updated cache holds the old latents and the new ones.
  void updateCache() {
    int64_t width = cache.shape[2];
    Value cacheLen = kb.dim(cache.shape[1]);
    // The old rows, unless the result is the cache's own buffer
    // (StateInPlace.h).
    if (!updatesStateInPlace(op))
      kb.parallel({kb.dim(cache.shape[0]), cacheLen, kb.idx(width)},
                  [&](ValueRange iv) {
                    kb.store(kb.load(cache.full, iv), cacheOut, iv);
                  });
    kb.parallel({numTokens}, [&](ValueRange iv) {
      Value t = iv[0];
      auto [start, n] = sequenceOf(t);
      Value pos = kb.addi(kb.loadIndex(lens.full, {n}), kb.subi(t, start));
      // The runtime refuses contexts past the cache; never write past it.
      kb.ifThen(kb.lti(pos, cacheLen), [&] {
        kb.forRange(kb.idx(width), [&](Value c) {
          kb.store(kb.load(latent, {t, c}), cacheOut, {n, pos, c});
        });
      });
    });
  }

  /// Phase 2: attention of new token `t` and head `h` over its keys.
  void attend(Value t, Value h) {
    auto [start, n] = sequenceOf(t);
    Value count = kb.addi(kb.subi(t, start), kb.idx(1));
    if (cache)
      count = kb.minsi(kb.addi(count, kb.loadIndex(lens.full, {n})),
                       kb.dim(cache.shape[1]));
    // Key s of this token: a cached latent, or a latent of this prefill.
    auto key = [&](Value s, Value c) {
      if (cache)
        return kb.load(cacheOut, {n, s, c});
      return kb.load(latent, {kb.addi(start, s), c});
    };
    Value headRow = kb.muli(h, kb.idx(dn + dv));
    Value qa = absorbQuery(t, h, headRow);
    auto score = [&](Value s) {
      Value nope = kb.reduce(kb.idx(rank), kb.f32(0.0), [&](Value r, Value a) {
        return kb.fma(kb.load(qa, {r}), key(s, r), a);
      });
      Value pe = kb.reduce(kb.idx(dr), nope, [&](Value e, Value a) {
        return kb.fma(kb.load(q, {t, h, kb.addi(kb.idx(dn), e)}),
                      key(s, kb.addi(kb.idx(rank), e)), a);
      });
      return kb.mul(pe, scale);
    };
    Value m = kb.reduce(kb.idx(0), count, kb.f32(-INFINITY),
                        [&](Value s, Value a) { return kb.maxf(a, score(s)); });
    Value ctx = kb.scratch(rank);
    kb.forRange(kb.idx(rank),
                [&](Value r) { kb.store(kb.f32(0.0), ctx, {r}); });
    Value l = kb.reduce(kb.idx(0), count, kb.f32(0.0), [&](Value s, Value a) {
      Value p = kb.exp(kb.sub(score(s), m));
      kb.forRange(kb.idx(rank), [&](Value r) {
        kb.store(kb.fma(p, key(s, r), kb.load(ctx, {r})), ctx, {r});
      });
      return kb.add(a, p);
    });
    projectValues(t, h, headRow, ctx, l);
  }

  /// qa[r] = sum_d q_nope[d] * W_kvb[h, d, r], in scratch.
  Value absorbQuery(Value t, Value h, Value headRow) {
    Value qa = kb.scratch(rank);
    kb.forRange(kb.idx(rank), [&](Value r) {
      Value a = kb.reduce(kb.idx(dn), kb.f32(0.0), [&](Value d, Value acc) {
        return kb.fma(kb.load(q, {t, h, d}),
                      kb.load(kvb, {kb.addi(headRow, d), r}), acc);
      });
      kb.store(a, qa, {r});
    });
    return qa;
  }

  /// o[j] = sum_r W_kvb[h, dn + j, r] * ctx[r] / l.
  void projectValues(Value t, Value h, Value headRow, Value ctx, Value l) {
    Value vRow = kb.addi(headRow, kb.idx(dn));
    kb.forRange(kb.idx(dv), [&](Value j) {
      Value a = kb.reduce(kb.idx(rank), kb.f32(0.0), [&](Value r, Value acc) {
        return kb.fma(kb.load(kvb, {kb.addi(vRow, j), r}), kb.load(ctx, {r}),
                      acc);
      });
      kb.store(kb.div(a, l), o, {t, h, j});
    });
  }

  LatentAttentionOp op;
  KernelBuilder &kb;
  Value q, latent, kvb, o, cacheOut;
  KernelOperand cache, lens, cu; // optional
  int64_t dn, dr, dv, rank;
  Value numTokens, scale;
};

} // namespace

LogicalResult k3::emitLatentAttention(LatentAttentionOp op, KernelBuilder &kb,
                                      In in, Out out) {
  LatentAttention(op, kb, in, out).emit();
  return success();
}
