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
#include "lowering/kernels/Kernels.h"

using namespace mlir;
using namespace mlir::k3;

LogicalResult k3::emitCausalAttention(CausalAttentionOp op, KernelBuilder &kb,
                                      In in, Out out) {
  Value q = in[0].full, k = in[1].full, v = in[2].full, o = out[0].full;
  const KernelOperand *cu = op.getCuSeqlens() ? &in[3] : nullptr;
  int64_t dqk = in[0].shape[2], dv = in[2].shape[2];
  Value scale = kb.f32(op.getScale().convertToDouble());
  kb.parallel(
      {kb.dim(in[0].shape[0]), kb.dim(in[0].shape[1])}, [&](ValueRange iv) {
        Value t = iv[0], h = iv[1];
        Value start = cu ? emitSequenceOf(kb, cu->full, t).first : kb.idx(0);
        Value stop = kb.addi(t, kb.idx(1));
        auto score = [&](Value s) {
          Value dot =
              kb.reduce(kb.idx(dqk), kb.f32(0.0), [&](Value d, Value a) {
                return kb.fma(kb.load(q, {t, h, d}), kb.load(k, {s, h, d}), a);
              });
          return kb.mul(dot, scale);
        };
        Value m =
            kb.reduce(start, stop, kb.f32(-INFINITY),
                      [&](Value s, Value a) { return kb.maxf(a, score(s)); });
        kb.forRange(kb.idx(dv),
                    [&](Value d) { kb.store(kb.f32(0.0), o, {t, h, d}); });
        Value l = kb.reduce(start, stop, kb.f32(0.0), [&](Value s, Value a) {
          Value p = kb.exp(kb.sub(score(s), m));
          kb.forRange(kb.idx(dv), [&](Value d) {
            kb.store(kb.fma(p, kb.load(v, {s, h, d}), kb.load(o, {t, h, d})), o,
                     {t, h, d});
          });
          return kb.add(a, p);
        });
        kb.forRange(kb.idx(dv), [&](Value d) {
          kb.store(kb.div(kb.load(o, {t, h, d}), l), o, {t, h, d});
        });
      });
  return success();
}

LogicalResult k3::emitLatentAttention(LatentAttentionOp op, KernelBuilder &kb,
                                      In in, Out out) {
  Value q = in[0].full, latent = in[1].full, kvb = in[2].full;
  unsigned next = 3;
  const KernelOperand *cache = op.getLatentCache() ? &in[next++] : nullptr;
  const KernelOperand *lens = op.getCacheLens() ? &in[next++] : nullptr;
  const KernelOperand *cu = op.getCuSeqlens() ? &in[next++] : nullptr;
  Value o = out[0].full;
  Value cacheOut = cache ? out[1].full : Value();

  int64_t dn = op.getQkNopeHeadDim(), dr = op.getQkRopeHeadDim(),
          dv = op.getVHeadDim(), rank = op.getKvLoraRank();
  int64_t rowsPerHead = dn + dv;
  Value numTokens = kb.dim(in[0].shape[0]);
  Value scale = kb.f32(op.getScale().convertToDouble());

  auto sequenceOf = [&](Value t) -> std::pair<Value, Value> {
    if (cu)
      return emitSequenceOf(kb, cu->full, t);
    return {kb.idx(0), kb.idx(0)};
  };

  // Phase 1: the updated cache holds the old latents and the new ones.
  if (cache) {
    int64_t width = cache->shape[2];
    Value cacheLen = kb.dim(cache->shape[1]);
    kb.parallel({kb.dim(cache->shape[0]), cacheLen, kb.idx(width)},
                [&](ValueRange iv) {
                  kb.store(kb.load(cache->full, iv), cacheOut, iv);
                });
    kb.parallel({numTokens}, [&](ValueRange iv) {
      Value t = iv[0];
      auto [start, n] = sequenceOf(t);
      Value pos = kb.addi(kb.loadIndex(lens->full, {n}), kb.subi(t, start));
      // The runtime refuses contexts past the cache; never write past it.
      kb.ifThen(kb.lti(pos, cacheLen), [&] {
        kb.forRange(kb.idx(width), [&](Value c) {
          kb.store(kb.load(latent, {t, c}), cacheOut, {n, pos, c});
        });
      });
    });
  }

  // Phase 2: attention of each new token and head over its keys.
  kb.parallel({numTokens, kb.idx(op.getNumHeads())}, [&](ValueRange iv) {
    Value t = iv[0], h = iv[1];
    kb.scope([&] {
      auto [start, n] = sequenceOf(t);
      Value count = kb.addi(kb.subi(t, start), kb.idx(1));
      if (cache)
        count = kb.minsi(kb.addi(count, kb.loadIndex(lens->full, {n})),
                         kb.dim(cache->shape[1]));
      // Key s of this token: a cached latent, or a latent of this prefill.
      auto key = [&](Value s, Value c) {
        if (cache)
          return kb.load(cacheOut, {n, s, c});
        return kb.load(latent, {kb.addi(start, s), c});
      };
      Value headRow = kb.muli(h, kb.idx(rowsPerHead));
      // qa[r] = sum_d q_nope[d] * W_kvb[h, d, r].
      Value qa = kb.scratch(rank);
      kb.forRange(kb.idx(rank), [&](Value r) {
        Value a = kb.reduce(kb.idx(dn), kb.f32(0.0), [&](Value d, Value acc) {
          return kb.fma(kb.load(q, {t, h, d}),
                        kb.load(kvb, {kb.addi(headRow, d), r}), acc);
        });
        kb.store(a, qa, {r});
      });
      auto score = [&](Value s) {
        Value nope =
            kb.reduce(kb.idx(rank), kb.f32(0.0), [&](Value r, Value a) {
              return kb.fma(kb.load(qa, {r}), key(s, r), a);
            });
        Value pe = kb.reduce(kb.idx(dr), nope, [&](Value e, Value a) {
          return kb.fma(kb.load(q, {t, h, kb.addi(kb.idx(dn), e)}),
                        key(s, kb.addi(kb.idx(rank), e)), a);
        });
        return kb.mul(pe, scale);
      };
      Value m =
          kb.reduce(kb.idx(0), count, kb.f32(-INFINITY),
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
      // o[j] = sum_r W_kvb[h, dn + j, r] * ctx[r] / l.
      Value vRow = kb.addi(headRow, kb.idx(dn));
      kb.forRange(kb.idx(dv), [&](Value j) {
        Value a = kb.reduce(kb.idx(rank), kb.f32(0.0), [&](Value r, Value acc) {
          return kb.fma(kb.load(kvb, {kb.addi(vRow, j), r}), kb.load(ctx, {r}),
                        acc);
        });
        kb.store(kb.div(a, l), o, {t, h, j});
      });
    });
  });
  return success();
}
