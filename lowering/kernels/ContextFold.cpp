//===- ContextFold.cpp - the kernels of context parallelism -----*- C++ -*-===//
//
// K3ContextOps.td. k3.kda_context_fold and k3.short_conv_context_fold: each
// rank folds the gathered effects of the segments before its own into the
// state entering its segment. Both walk the ranks in order per state column,
// so one thread owns a column from the first rank to the last and the
// result does not depend on how the loops are scheduled.
// k3.kda_context_inputs makes a k3.kda compute what the KDA fold folds;
// k3.context_offsets and k3.latent_cache_segment place a rank's tokens in
// its sequences.
//
//===----------------------------------------------------------------------===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

// [v | 0] and, per sequence and head, [0 | I].
LogicalResult k3::emitKDAContextInputs(KDAContextInputsOp op, KernelBuilder &kb,
                                       In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand v = ops.getV();
  KernelOperand values = resultOf(out, op.getValues()),
                init = resultOf(out, op.getInitialState());
  Value vDim = kb.idx(v.shape[3]);
  Type f32 = kb.builder().getF32Type();
  kb.parallel({kb.dim(values.shape[1]), kb.dim(values.shape[2]),
               kb.idx(values.shape[3])},
              [&](ValueRange iv) {
                Value t = iv[0], h = iv[1], c = iv[2], z = kb.idx(0);
                Value x = kb.ifElse(
                    kb.lti(c, vDim), f32,
                    [&] { return kb.load(v.full, {z, t, h, c}); },
                    [&] { return kb.f32(0.0); });
                kb.store(x, values.full, {z, t, h, c});
              });
  kb.parallel({kb.dim(init.shape[0]), kb.dim(init.shape[1]),
               kb.idx(init.shape[2]), kb.idx(init.shape[3])},
              [&](ValueRange iv) {
                Value diagonal = kb.eqi(kb.addi(iv[2], vDim), iv[3]);
                kb.store(kb.select(diagonal, kb.f32(1.0), kb.f32(0.0)),
                         init.full, iv);
              });
  return success();
}

// Per (sequence, head, value column j): the column S[:, j] starts as the
// initial state's and becomes M_r S[:, j] + h_r[:, j] rank after rank; when
// it is this rank's incoming column, the segment's outputs of column j get
// their correction sum_i qt[t, i] S[i, j] (qt: the segment output's last K
// columns).
LogicalResult k3::emitKDAContextFold(KDAContextFoldOp op, KernelBuilder &kb,
                                     In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand seg = ops.getSegmentOutput(), all = ops.getSegments(),
                init = ops.getInitialState(), cu = ops.getCuSeqlens();
  KernelOperand fsOut = resultOf(out, op.getFinalState());
  Value o = resultOf(out, op.getOutput()).full, fs = fsOut.full;
  int64_t keyDim = fsOut.shape[2], valueDim = fsOut.shape[3];
  Value kDim = kb.idx(keyDim), vDim = kb.idx(valueDim);
  Value rank = kb.loadIndex(ops.getRank().full, {kb.idx(0)});
  Value tmp = kb.scratch(keyDim);
  kb.parallel(
      {kb.dim(fsOut.shape[0]), kb.dim(fsOut.shape[1]), vDim},
      [&](ValueRange iv) {
        Value n = iv[0], h = iv[1], j = iv[2];
        kb.forRange(kDim, [&](Value i) {
          Value s0 = init ? kb.load(init.full, {n, h, i, j}) : kb.f32(0.0);
          kb.store(s0, fs, {n, h, i, j});
        });
        kb.forRange(kb.idx(op.getGroupSize()), [&](Value r) {
          kb.ifThen(kb.eqi(r, rank), [&] {
            Value start = kb.loadIndex(cu.full, {n});
            Value end = kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))});
            kb.forRange(start, end, [&](Value t) {
              Value z = kb.idx(0);
              Value acc = kb.reduce(
                  kDim, kb.load(seg.full, {z, t, h, j}), [&](Value i, Value a) {
                    Value qt = kb.load(seg.full, {z, t, h, kb.addi(vDim, i)});
                    return kb.fma(qt, kb.load(fs, {n, h, i, j}), a);
                  });
              kb.store(acc, o, {z, t, h, j});
            });
          });
          // S[:, j] <- M_r S[:, j] + h_r[:, j], through the scratch column
          // (every row reads the whole old column).
          kb.scope([&] {
            kb.forRange(kDim, [&](Value i) {
              Value hr = kb.load(all.full, {r, n, h, i, j});
              Value s = kb.reduce(kDim, hr, [&](Value l, Value a) {
                Value m = kb.load(all.full, {r, n, h, i, kb.addi(vDim, l)});
                return kb.fma(m, kb.load(fs, {n, h, l, j}), a);
              });
              kb.store(s, tmp, {i});
            });
            kb.forRange(kDim, [&](Value i) {
              kb.store(kb.load(tmp, {i}), fs, {n, h, i, j});
            });
          });
        });
      });
  return success();
}

// Per (sequence, channel): the W - 1 rows of history, rank after rank; a
// segment of L tokens keeps row i + L of the state before it where that is
// a row (i + L < W - 1) and takes its own zero-state tail's row i otherwise.
// Rows are rewritten in increasing i, each reading a row at or after
// itself, so the state updates in place.
LogicalResult k3::emitShortConvContextFold(ShortConvContextFoldOp op,
                                           KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand tails = ops.getTails(), cu = ops.getCuSeqlens(),
                init = ops.getConvState();
  KernelOperand fsOut = resultOf(out, op.getFinalState());
  Value incoming = resultOf(out, op.getIncoming()).full, fs = fsOut.full;
  int64_t history = fsOut.shape[2];
  Value rows = kb.idx(history);
  Value rank = kb.loadIndex(ops.getRank().full, {kb.idx(0)});
  kb.parallel(
      {kb.dim(fsOut.shape[0]), kb.dim(fsOut.shape[1])}, [&](ValueRange iv) {
        Value n = iv[0], c = iv[1];
        kb.forRange(rows, [&](Value i) {
          Value s0 = init ? kb.load(init.full, {n, c, i}) : kb.f32(0.0);
          kb.store(s0, fs, {n, c, i});
        });
        kb.forRange(kb.idx(op.getGroupSize()), [&](Value r) {
          kb.ifThen(kb.eqi(r, rank), [&] {
            kb.forRange(rows, [&](Value i) {
              kb.store(kb.load(fs, {n, c, i}), incoming, {n, c, i});
            });
          });
          Value len = kb.subi(kb.loadIndex(cu.full, {r, kb.addi(n, kb.idx(1))}),
                              kb.loadIndex(cu.full, {r, n}));
          kb.forRange(rows, [&](Value i) {
            Value from = kb.addi(i, len);
            Value kept = kb.lti(from, rows);
            Value v = kb.ifElse(
                kept, kb.builder().getF32Type(),
                [&] { return kb.load(fs, {n, c, from}); },
                [&] { return kb.load(tails.full, {r, n, c, i}); });
            kb.store(v, fs, {n, c, i});
          });
        });
      });
  return success();
}

namespace {

/// Tokens of sequence `n` on the ranks before `rank` (the gathered
/// cu_seqlens [G, N + 1]).
Value tokensBefore(KernelBuilder &kb, Value cu, Value rank, Value n) {
  return kb.reduce(rank, kb.idx(0), [&](Value r, Value acc) {
    Value len = kb.subi(kb.loadIndex(cu, {r, kb.addi(n, kb.idx(1))}),
                        kb.loadIndex(cu, {r, n}));
    return kb.addi(acc, len);
  });
}

} // namespace

LogicalResult k3::emitContextOffsets(ContextOffsetsOp op, KernelBuilder &kb,
                                     In in, Out out) {
  auto ops = operandsOf(op, in);
  Value cu = ops.getCuSeqlens().full, ctx = ops.getContextLens().full;
  Value rank = kb.loadIndex(ops.getRank().full, {kb.idx(0)});
  kb.parallel({kb.dim(out[0].shape[0])}, [&](ValueRange iv) {
    Value n = iv[0];
    Value at = kb.addi(kb.loadIndex(ctx, {n}), tokensBefore(kb, cu, rank, n));
    kb.storeIndex(at, out[0].full, {n});
  });
  return success();
}

// Per (sequence, cache row, column): the cached prefix on rank 0, this
// rank's rows at its segment's positions, zero elsewhere.
LogicalResult k3::emitLatentCacheSegment(LatentCacheSegmentOp op,
                                         KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  Value latent = ops.getLatent().full, cache = ops.getLatentCache().full,
        cu = ops.getCuSeqlens().full, ctx = ops.getContextLens().full;
  KernelOperand share = out[0];
  Value rank = kb.loadIndex(ops.getRank().full, {kb.idx(0)});
  kb.parallel(
      {kb.dim(share.shape[0]), kb.dim(share.shape[1]), kb.dim(share.shape[2])},
      [&](ValueRange iv) {
        Value n = iv[0], p = iv[1], w = iv[2];
        Value cached = kb.loadIndex(ctx, {n});
        Value first = kb.addi(cached, tokensBefore(kb, cu, rank, n));
        Value localStart = kb.loadIndex(cu, {rank, n});
        Value len = kb.subi(kb.loadIndex(cu, {rank, kb.addi(n, kb.idx(1))}),
                            localStart);
        Value i = kb.subi(p, first);
        Value mine = kb.andi(kb.gei(i, kb.idx(0)), kb.lti(i, len));
        Value prefix = kb.andi(kb.lti(p, cached), kb.eqi(rank, kb.idx(0)));
        Type f32 = kb.builder().getF32Type();
        Value v = kb.ifElse(
            mine, f32,
            [&] { return kb.load(latent, {kb.addi(localStart, i), w}); },
            [&] {
              return kb.ifElse(
                  prefix, f32, [&] { return kb.load(cache, {n, p, w}); },
                  [&] { return kb.f32(0.0); });
            });
        kb.store(v, share.full, iv);
      });
  return success();
}

// Per (sequence, channel, row): the input W - 1 - i rows before the
// sequence's end, or zero before its first token.
LogicalResult k3::emitShortConvTail(ShortConvTailOp op, KernelBuilder &kb,
                                    In in, Out out) {
  auto ops = operandsOf(op, in);
  Value x = ops.getInput().full, cu = ops.getCuSeqlens().full;
  KernelOperand tail = out[0];
  int64_t rows = tail.shape[2];
  kb.parallel({kb.dim(tail.shape[0]), kb.dim(tail.shape[1]), kb.idx(rows)},
              [&](ValueRange iv) {
                Value n = iv[0], c = iv[1], i = iv[2];
                Value start = kb.loadIndex(cu, {n});
                Value end = kb.loadIndex(cu, {kb.addi(n, kb.idx(1))});
                Value t = kb.addi(kb.subi(end, kb.idx(rows)), i);
                Value v = kb.ifElse(
                    kb.gei(t, start), kb.builder().getF32Type(),
                    [&] { return kb.load(x, {t, c}); },
                    [&] { return kb.f32(0.0); });
                kb.store(v, tail.full, iv);
              });
  return success();
}
