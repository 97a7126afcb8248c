//===- MLAPrefill.cpp - loop nests of the expanded MLA prefill --*- C++ -*-===//
//
// k3.mla_prefill_attention (causal softmax attention whose keys are
// [kv_nope | the shared k_pe] and values kv's last Dv columns, the sigmoid
// gate applied at the write) and k3.latent_cache_append. The reference
// lowering, for the CPU and for shapes the CUDA kernel does not take.
//
//===----------------------------------------------------------------------===//
#include "lowering/StateInPlace.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

LogicalResult k3::emitMLAPrefillAttention(MLAPrefillAttentionOp op,
                                          KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand qIn = ops.getQ(), latIn = ops.getLatent(),
                cu = ops.getCuSeqlens(), gateIn = ops.getGate();
  Value q = qIn.full, kv = ops.getKv().full, latent = latIn.full,
        o = out[0].full;
  int64_t dn = op.getQkNopeHeadDim(), dr = op.getQkRopeHeadDim(),
          dv = op.getVHeadDim(), rank = latIn.shape[1] - dr;
  Value scale = kb.f32(op.getScale().convertToDouble());
  kb.parallel({kb.dim(qIn.shape[0]), kb.dim(qIn.shape[1])}, [&](ValueRange iv) {
    Value t = iv[0], h = iv[1];
    Value start = cu ? emitSequenceOf(kb, cu.full, t).first : kb.idx(0);
    Value stop = kb.addi(t, kb.idx(1));
    auto score = [&](Value s) {
      Value nope = kb.reduce(kb.idx(dn), kb.f32(0.0), [&](Value d, Value a) {
        return kb.fma(kb.load(q, {t, h, d}), kb.load(kv, {s, h, d}), a);
      });
      Value dot = kb.reduce(kb.idx(dr), nope, [&](Value e, Value a) {
        return kb.fma(kb.load(q, {t, h, kb.addi(kb.idx(dn), e)}),
                      kb.load(latent, {s, kb.addi(kb.idx(rank), e)}), a);
      });
      return kb.mul(dot, scale);
    };
    Value gate = gateIn ? gateIn.full : Value();
    emitSoftmaxRow(
        kb, start, stop, dv, score,
        [&](Value s, Value d) {
          return kb.load(kv, {s, h, kb.addi(kb.idx(dn), d)});
        },
        [&](Value d, Value y) {
          if (gate) {
            Value col = kb.addi(kb.muli(h, kb.idx(dv)), d);
            y = kb.mul(y, kb.sigmoid(kb.load(gate, {t, col})));
          }
          kb.store(y, o, {t, h, d});
        });
  });
  return success();
}

LogicalResult k3::emitLatentCacheAppend(LatentCacheAppendOp op,
                                        KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand cache = ops.getCache(), latIn = ops.getLatent(),
                cu = ops.getCuSeqlens();
  Value lens = ops.getCacheLens().full, latent = latIn.full,
        cacheOut = out[0].full;
  int64_t width = cache.shape[2];
  Value cacheLen = kb.dim(cache.shape[1]);
  // Phase 1: the old rows, unless the result is the cache's own buffer
  // (StateInPlace.h).
  if (!updatesStateInPlace(op))
    kb.parallel({kb.dim(cache.shape[0]), cacheLen, kb.idx(width)},
                [&](ValueRange iv) {
                  kb.store(kb.load(cache.full, iv), cacheOut, iv);
                });
  // Phase 2: the new rows after them.
  kb.parallel({kb.dim(latIn.shape[0]), kb.idx(width)}, [&](ValueRange iv) {
    Value t = iv[0], c = iv[1];
    auto [start, n] =
        cu ? emitSequenceOf(kb, cu.full, t) : std::pair{kb.idx(0), kb.idx(0)};
    Value pos = kb.addi(kb.loadIndex(lens, {n}), kb.subi(t, start));
    // The runtime refuses contexts past the cache; never write past it.
    kb.ifThen(kb.lti(pos, cacheLen), [&] {
      kb.store(kb.load(latent, {t, c}), cacheOut, {n, pos, c});
    });
  });
  return success();
}
