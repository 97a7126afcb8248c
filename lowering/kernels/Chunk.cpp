//===- Chunk.cpp - kernels of the chunkwise KDA form ------------*- C++ -*-===//
//
// One kernel per chunk op (dialects/K3/K3ChunkOps.td, docs/kda-chunkwise.md).
// Chunk matrices are token-indexed: row t of a [B, T, H, C] tensor is row
// `t - cs` of the C x C matrix of the chunk that starts at token cs, column
// c is token cs + c. Token-parallel kernels iterate (batch, token, head,
// ...); chunk-parallel kernels iterate the same space and work only at the
// first token of each chunk (a GPU launches one block per chunk and head);
// the state passing iterates (sequence, head, value column) and walks the
// chunks in order.
//
//===----------------------------------------------------------------------===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

Value divui(KernelBuilder &kb, Value a, Value b) {
  return arith::DivUIOp::create(kb.builder(), kb.getLoc(), a, b);
}

/// Where token `t` (of batch row `b`) sits: its sequence, chunk and row.
struct ChunkPos {
  Value start, end; // the sequence's tokens [start, end)
  Value cs, ce;     // the chunk's tokens [cs, ce)
  Value row;        // t - cs
};

/// `cu` is the optional cu_seqlens operand.
ChunkPos chunkOf(KernelBuilder &kb, const KernelOperand &cu, Value t,
                 int64_t chunk) {
  ChunkPos p;
  if (cu) {
    auto [start, n] = emitSequenceOf(kb, cu.full, t);
    p.start = start;
    p.end = kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))});
  } else {
    p.start = kb.idx(0);
    p.end = kb.tokens();
  }
  Value c = kb.idx(chunk);
  p.cs = kb.addi(p.start, kb.muli(divui(kb, kb.subi(t, p.start), c), c));
  p.ce = kb.minsi(kb.addi(p.cs, c), p.end);
  p.row = kb.subi(t, p.cs);
  return p;
}

/// The tokens [start, end) of sequence `n` and its batch row.
struct SeqPos {
  Value b, start, end;
};

SeqPos sequence(KernelBuilder &kb, const KernelOperand &cu, Value n) {
  if (cu)
    return {kb.idx(0), kb.loadIndex(cu.full, {n}),
            kb.loadIndex(cu.full, {kb.addi(n, kb.idx(1))})};
  return {n, kb.idx(0), kb.tokens()};
}

/// Token-parallel iteration over (b, t, h) plus `extra` trailing extents.
void forTokens(KernelBuilder &kb, const KernelOperand &ref,
               ArrayRef<Value> extra,
               const std::function<void(ValueRange)> &body) {
  SmallVector<Value> ubs = {kb.dim(ref.shape[0]), kb.dim(ref.shape[1]),
                            kb.dim(ref.shape[2])};
  ubs.append(extra.begin(), extra.end());
  kb.parallel(ubs, body);
}

} // namespace

LogicalResult k3::emitKDAChunkPrepare(KDAChunkPrepareOp op, KernelBuilder &kb,
                                      In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand qIn = ops.getQ();
  Value q = qIn.full, k = ops.getK().full, g = ops.getG().full,
        beta = ops.getBeta().full;
  KernelOperand cu = ops.getCuSeqlens(), aLog = ops.getALog(),
                dtBias = ops.getDtBias();
  Value qScaled = resultOf(out, op.getQScaled()).full,
        kNorm = resultOf(out, op.getKNorm()).full,
        gCum = resultOf(out, op.getGCum()).full,
        kGamma = resultOf(out, op.getKGamma()).full,
        betaOut = resultOf(out, op.getBetaOut()).full;
  int64_t headDim = qIn.shape[3];
  Value kDim = kb.idx(headDim);
  double scale = op.getScale().convertToDouble();
  bool l2 = op.getUseQkL2norm();
  auto kind = op.getGateKind();
  std::optional<double> lb;
  if (auto a = op.getLowerBoundAttr())
    lb = a.getValueAsDouble();
  forTokens(kb, qIn, {}, [&](ValueRange iv) {
    Value b = iv[0], t = iv[1], h = iv[2];
    ChunkPos p = chunkOf(kb, cu, t, op.getChunkSize());
    auto invNorm = [&](Value x) {
      return l2 ? emitInvL2Norm(kb, x, b, t, h, kDim) : kb.f32(1.0);
    };
    Value rq = kb.mul(invNorm(q), kb.f32(scale)), rk = invNorm(k);
    Value bt = kb.load(beta, {b, t, h});
    if (op.getUseBetaSigmoid())
      bt = kb.sigmoid(bt);
    kb.store(bt, betaOut, {b, t, h});
    kb.forRange(kDim, [&](Value i) {
      Value kn = kb.mul(kb.load(k, {b, t, h, i}), rk);
      kb.store(kb.mul(kb.load(q, {b, t, h, i}), rq), qScaled, {b, t, h, i});
      kb.store(kn, kNorm, {b, t, h, i});
      // In-chunk cumulative log-decay (a GPU computes it as a scan).
      Value G = kb.reduce(p.cs, kb.addi(t, kb.idx(1)), kb.f32(0.0),
                          [&](Value s, Value acc) {
                            Value gi = kb.load(g, {b, s, h, i});
                            if (kind)
                              gi = emitDecayGate(kb, *kind, lb, aLog.full,
                                                 dtBias.full, h, i, kDim, gi);
                            return kb.add(acc, gi);
                          });
      kb.store(G, gCum, {b, t, h, i});
      kb.store(kb.mul(kn, kb.exp(G)), kGamma, {b, t, h, i});
    });
  });
  return success();
}

LogicalResult k3::emitKDAChunkGram(KDAChunkGramOp op, KernelBuilder &kb, In in,
                                   Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand xIn = ops.getX(), rs = ops.getRowScale(),
                cu = ops.getCuSeqlens();
  Value x = xIn.full, y = ops.getY().full, G = ops.getG().full;
  int64_t C = op.getChunkSize(), tile = op.getTileSize();
  Value kDim = kb.idx(xIn.shape[3]);
  bool strict = op.getStrict(), unit = op.getUnitDiagonal();
  bool factored = op.getGateLowerBound().has_value();
  forTokens(kb, xIn, {kb.idx(C)}, [&](ValueRange iv) {
    Value b = iv[0], t = iv[1], h = iv[2], c = iv[3];
    ChunkPos p = chunkOf(kb, cu, t, C);
    Value j = kb.addi(p.cs, c);
    Value below =
        strict ? kb.lti(c, p.row) : kb.lti(c, kb.addi(p.row, kb.idx(1)));
    Value valid = kb.andi(below, kb.lti(j, p.ce));
    // Factored form: through the last token r of j's tile (inside the chunk).
    Value r;
    if (factored) {
      Value tileEnd =
          kb.addi(p.cs, kb.muli(kb.addi(divui(kb, c, kb.idx(tile)), kb.idx(1)),
                                kb.idx(tile)));
      r = kb.subi(kb.minsi(tileEnd, p.ce), kb.idx(1));
    }
    Value v = kb.ifElse(
        valid, kb.builder().getF32Type(),
        [&] {
          Value s = kb.reduce(kDim, kb.f32(0.0), [&](Value d, Value acc) {
            Value gi = kb.load(G, {b, t, h, d}), gj = kb.load(G, {b, j, h, d});
            Value e;
            if (factored) {
              Value gr = kb.load(G, {b, r, h, d});
              e = kb.mul(kb.exp(kb.sub(gi, gr)), kb.exp(kb.sub(gr, gj)));
            } else {
              e = kb.exp(kb.sub(gi, gj));
            }
            Value xy =
                kb.mul(kb.load(x, {b, t, h, d}), kb.load(y, {b, j, h, d}));
            return kb.fma(xy, e, acc);
          });
          return rs ? kb.mul(s, kb.load(rs.full, {b, t, h})) : s;
        },
        [&] { return kb.f32(0.0); });
    if (unit)
      v = kb.select(kb.eqi(c, p.row), kb.f32(1.0), v);
    kb.store(v, out[0].full, {b, t, h, c});
  });
  return success();
}

LogicalResult k3::emitTriSolve(TriSolveOp op, KernelBuilder &kb, In in,
                               Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand rhsIn = ops.getRhs(), rs = ops.getRowScale(),
                cu = ops.getCuSeqlens();
  Value A = ops.getA().full, R = rhsIn.full, X = out[0].full;
  int64_t C = op.getChunkSize();
  Value dDim = kb.idx(rhsIn.shape[3]);
  bool blocked = op.getMode() == "blocked";
  int64_t tile = blocked ? int64_t(*op.getTileSize()) : C;
  forTokens(kb, rhsIn, {dDim}, [&](ValueRange iv) {
    Value b = iv[0], t = iv[1], h = iv[2], d = iv[3];
    ChunkPos p = chunkOf(kb, cu, t, C);
    kb.ifThen(kb.eqi(p.row, kb.idx(0)), [&] {
      Value len = kb.subi(p.ce, p.cs);
      auto tok = [&](Value i) { return kb.addi(p.cs, i); };
      auto rhs = [&](Value i) {
        Value r = kb.load(R, {b, tok(i), h, d});
        return rs ? kb.mul(r, kb.load(rs.full, {b, tok(i), h})) : r;
      };
      // sum_{j in [lo, hi)} A_ij X_j
      auto product = [&](Value i, Value lo, Value hi) {
        return kb.reduce(lo, hi, kb.f32(0.0), [&](Value j, Value acc) {
          return kb.fma(kb.load(A, {b, tok(i), h, j}),
                        kb.load(X, {b, tok(j), h, d}), acc);
        });
      };
      Value nt = divui(kb, kb.addi(len, kb.idx(tile - 1)), kb.idx(tile));
      kb.forRange(nt, [&](Value a) {
        Value ts = kb.muli(a, kb.idx(tile));
        Value te = kb.minsi(kb.addi(ts, kb.idx(tile)), len);
        // Off-diagonal blocks: one product with the solved tiles.
        kb.forRange(ts, te, [&](Value i) {
          kb.store(kb.sub(rhs(i), product(i, kb.idx(0), ts)), X,
                   {b, tok(i), h, d});
        });
        // The diagonal tile, token by token.
        kb.forRange(ts, te, [&](Value i) {
          Value xi = kb.sub(kb.load(X, {b, tok(i), h, d}), product(i, ts, i));
          kb.store(xi, X, {b, tok(i), h, d});
        });
      });
    });
  });
  return success();
}

LogicalResult k3::emitTriInverse(TriInverseOp op, KernelBuilder &kb, In in,
                                 Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand aIn = ops.getA(), cu = ops.getCuSeqlens();
  Value A = aIn.full, Ai = out[0].full;
  int64_t C = op.getChunkSize(), tile = op.getTileSize();
  forTokens(kb, aIn, {}, [&](ValueRange iv) {
    Value b = iv[0], t = iv[1], h = iv[2];
    ChunkPos p = chunkOf(kb, cu, t, C);
    kb.ifThen(kb.eqi(p.row, kb.idx(0)), [&] {
      Value len = kb.subi(p.ce, p.cs);
      auto tok = [&](Value i) { return kb.addi(p.cs, i); };
      auto ai = [&](Value i, Value m) {
        return kb.load(Ai, {b, tok(i), h, m});
      };
      kb.forRange(len, [&](Value i) {
        kb.forRange(kb.idx(C), [&](Value m) {
          kb.store(kb.f32(0.0), Ai, {b, tok(i), h, m});
        });
      });
      Value tl = kb.idx(tile);
      Value nt = divui(kb, kb.addi(len, kb.idx(tile - 1)), tl);
      auto tileRange = [&](Value a) {
        Value ts = kb.muli(a, tl);
        return std::make_pair(ts, kb.minsi(kb.addi(ts, tl), len));
      };
      // Diagonal tiles: forward substitution on the identity.
      kb.forRange(nt, [&](Value a) {
        auto [ts, te] = tileRange(a);
        kb.forRange(ts, te, [&](Value m) {
          kb.store(kb.f32(1.0), Ai, {b, tok(m), h, m});
          kb.forRange(kb.addi(m, kb.idx(1)), te, [&](Value i) {
            Value s = kb.reduce(m, i, kb.f32(0.0), [&](Value j, Value acc) {
              return kb.fma(kb.load(A, {b, tok(i), h, j}), ai(j, m), acc);
            });
            kb.store(kb.neg(s), Ai, {b, tok(i), h, m});
          });
        });
      });
      // Off-diagonal blocks: Ai_ab = -Ai_aa sum_{b<=m<a} A_am Ai_mb.
      kb.forRange(kb.idx(1), nt, [&](Value a) {
        auto [ts, te] = tileRange(a);
        kb.forRange(ts, [&](Value m) { // columns of tiles b < a
          kb.forRange(ts, te, [&](Value i) {
            Value lo = kb.muli(divui(kb, m, tl), tl);
            Value s = kb.reduce(lo, ts, kb.f32(0.0), [&](Value j, Value acc) {
              return kb.fma(kb.load(A, {b, tok(i), h, j}), ai(j, m), acc);
            });
            kb.store(s, Ai, {b, tok(i), h, m});
          });
          // Multiply by the unit-diagonal Ai_aa in place, bottom row first.
          kb.forRange(kb.subi(te, ts), [&](Value ii) {
            Value i = kb.subi(kb.subi(te, kb.idx(1)), ii);
            Value s = kb.reduce(ts, i, ai(i, m), [&](Value j, Value acc) {
              return kb.fma(ai(i, j), ai(j, m), acc);
            });
            kb.store(kb.neg(s), Ai, {b, tok(i), h, m});
          });
        });
      });
    });
  });
  return success();
}

LogicalResult k3::emitChunkTrilMatmul(ChunkTrilMatmulOp op, KernelBuilder &kb,
                                      In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand xIn = ops.getX(), rs = ops.getRowScale(),
                cu = ops.getCuSeqlens();
  Value A = ops.getA().full, X = xIn.full;
  forTokens(kb, xIn, {kb.idx(xIn.shape[3])}, [&](ValueRange iv) {
    Value b = iv[0], t = iv[1], h = iv[2], d = iv[3];
    ChunkPos p = chunkOf(kb, cu, t, op.getChunkSize());
    Value s = kb.reduce(p.cs, kb.addi(t, kb.idx(1)), kb.f32(0.0),
                        [&](Value j, Value acc) {
                          Value xj = kb.load(X, {b, j, h, d});
                          if (rs)
                            xj = kb.mul(xj, kb.load(rs.full, {b, j, h}));
                          Value a = kb.load(A, {b, t, h, kb.subi(j, p.cs)});
                          return kb.fma(a, xj, acc);
                        });
    kb.store(s, out[0].full, {b, t, h, d});
  });
  return success();
}

LogicalResult k3::emitKDAChunkOutput(KDAChunkOutputOp op, KernelBuilder &kb,
                                     In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand vNew = ops.getVNew(), cu = ops.getCuSeqlens();
  Value M = ops.getM().full, vn = vNew.full, oi = ops.getOInter().full;
  forTokens(kb, vNew, {kb.idx(vNew.shape[3])}, [&](ValueRange iv) {
    Value b = iv[0], t = iv[1], h = iv[2], d = iv[3];
    ChunkPos p = chunkOf(kb, cu, t, op.getChunkSize());
    Value s = kb.reduce(p.cs, kb.addi(t, kb.idx(1)), kb.load(oi, iv),
                        [&](Value j, Value acc) {
                          Value m = kb.load(M, {b, t, h, kb.subi(j, p.cs)});
                          return kb.fma(m, kb.load(vn, {b, j, h, d}), acc);
                        });
    kb.store(s, out[0].full, {b, t, h, d});
  });
  return success();
}

/// The chunks [c0, c1) of the sequence at `sp`, applied to the state column
/// `x` (a memref of K values): per chunk, tmp_i = rhs_i - W_i . x, then
/// x <- e^{G_last} x + (k e^{G_last - G})^T tmp. `rhs(i)` may be null (0);
/// `perToken(i, tmp_i)` sees each tmp before the state update.
static void walkChunks(KernelBuilder &kb, SeqPos sp, Value h, int64_t C,
                       Value c0, Value c1, Value x, Value kDim, Value W,
                       Value kn, Value G,
                       const std::function<Value(Value)> &rhs,
                       const std::function<void(Value, Value)> &perToken,
                       Value tmp) {
  Value b = sp.b;
  kb.forRange(c0, c1, [&](Value c) {
    Value cs = kb.addi(sp.start, kb.muli(c, kb.idx(C)));
    Value ce = kb.minsi(kb.addi(cs, kb.idx(C)), sp.end);
    Value last = kb.subi(ce, kb.idx(1));
    kb.forRange(cs, ce, [&](Value i) {
      Value wx = kb.reduce(kDim, kb.f32(0.0), [&](Value d, Value acc) {
        return kb.fma(kb.load(W, {b, i, h, d}), kb.load(x, {d}), acc);
      });
      Value v = rhs ? kb.sub(rhs(i), wx) : kb.neg(wx);
      kb.store(v, tmp, {kb.subi(i, cs)});
      if (perToken)
        perToken(i, v);
    });
    kb.forRange(kDim, [&](Value d) {
      Value gl = kb.load(G, {b, last, h, d});
      Value s = kb.reduce(
          cs, ce, kb.mul(kb.exp(gl), kb.load(x, {d})), [&](Value i, Value acc) {
            Value e = kb.exp(kb.sub(gl, kb.load(G, {b, i, h, d})));
            Value kd = kb.mul(kb.load(kn, {b, i, h, d}), e);
            return kb.fma(kd, kb.load(tmp, {kb.subi(i, cs)}), acc);
          });
      kb.store(s, x, {d});
    });
  });
}

/// Number of chunks of a sequence.
static Value numChunks(KernelBuilder &kb, SeqPos sp, int64_t C) {
  return divui(kb, kb.addi(kb.subi(sp.end, sp.start), kb.idx(C - 1)),
               kb.idx(C));
}

LogicalResult k3::emitKDAChunkState(KDAChunkStateOp op, KernelBuilder &kb,
                                    In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand kNorm = ops.getKNorm();
  Value U = ops.getU().full, W = ops.getW().full, kn = kNorm.full,
        qs = ops.getQScaled().full, G = ops.getG().full;
  KernelOperand init = ops.getInitialState(), starts = ops.getSegmentStarts(),
                cu = ops.getCuSeqlens();
  KernelOperand finalState = resultOf(out, op.getFinalState());
  Value vnew = resultOf(out, op.getVNew()).full,
        oint = resultOf(out, op.getOInter()).full, fs = finalState.full;
  int64_t C = op.getChunkSize(), K = kNorm.shape[3];
  int64_t S = op.getNumSegments() ? int64_t(*op.getNumSegments()) : 1;
  Value kDim = kb.idx(K);
  Value x = kb.scratch(K), tmp = kb.scratch(C);
  kb.parallel({kb.dim(finalState.shape[0]), kb.idx(S),
               kb.dim(finalState.shape[1]), kb.dim(finalState.shape[3])},
              [&](ValueRange iv) {
                Value n = iv[0], s = iv[1], h = iv[2], j = iv[3];
                SeqPos sp = sequence(kb, cu, n);
                Value nc = numChunks(kb, sp, C);
                Value c0 = divui(kb, kb.muli(nc, s), kb.idx(S));
                Value c1 =
                    divui(kb, kb.muli(nc, kb.addi(s, kb.idx(1))), kb.idx(S));
                kb.forRange(kDim, [&](Value d) {
                  Value v = starts ? kb.load(starts.full, {n, s, h, d, j})
                            : init ? kb.load(init.full, {n, h, d, j})
                                   : kb.f32(0.0);
                  kb.store(v, x, {d});
                });
                Value b = sp.b;
                walkChunks(
                    kb, sp, h, C, c0, c1, x, kDim, W, kn, G,
                    [&](Value i) { return kb.load(U, {b, i, h, j}); },
                    [&](Value i, Value v) {
                      kb.store(v, vnew, {b, i, h, j});
                      // Inter-chunk output from the chunk's start state (x, not
                      // yet updated): (q ⊙ e^G) S_0.
                      Value o =
                          kb.reduce(kDim, kb.f32(0.0), [&](Value d, Value acc) {
                            Value qg = kb.mul(kb.load(qs, {b, i, h, d}),
                                              kb.exp(kb.load(G, {b, i, h, d})));
                            return kb.fma(qg, kb.load(x, {d}), acc);
                          });
                      kb.store(o, oint, {b, i, h, j});
                    },
                    tmp);
                kb.ifThen(kb.eqi(s, kb.idx(S - 1)), [&] {
                  kb.forRange(kDim, [&](Value d) {
                    kb.store(kb.load(x, {d}), fs, {n, h, d, j});
                  });
                });
              });
  return success();
}

LogicalResult k3::emitKDASegmentSummary(KDASegmentSummaryOp op,
                                        KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand uIn = ops.getU(), kNorm = ops.getKNorm(),
                cu = ops.getCuSeqlens();
  Value U = uIn.full, W = ops.getW().full, kn = kNorm.full, G = ops.getG().full;
  KernelOperand transition = resultOf(out, op.getTransition());
  Value contribution = resultOf(out, op.getContribution()).full;
  int64_t C = op.getChunkSize(), S = op.getNumSegments();
  int64_t K = kNorm.shape[3], V = uIn.shape[3];
  Value kDim = kb.idx(K);
  Value x = kb.scratch(K), tmp = kb.scratch(C);
  kb.parallel(
      {kb.dim(transition.shape[0]), kb.idx(S), kb.dim(transition.shape[2]),
       kb.idx(K + V)},
      [&](ValueRange iv) {
        Value n = iv[0], s = iv[1], h = iv[2], m = iv[3];
        SeqPos sp = sequence(kb, cu, n);
        Value nc = numChunks(kb, sp, C);
        Value c0 = divui(kb, kb.muli(nc, s), kb.idx(S));
        Value c1 = divui(kb, kb.muli(nc, kb.addi(s, kb.idx(1))), kb.idx(S));
        Value isTrans = kb.lti(m, kDim);
        // Column m of the transition starts at e_m; a contribution
        // column at 0.
        kb.forRange(kDim, [&](Value d) {
          kb.store(kb.select(kb.andi(isTrans, kb.eqi(d, m)), kb.f32(1.0),
                             kb.f32(0.0)),
                   x, {d});
        });
        Value j = kb.select(isTrans, kb.idx(0), kb.subi(m, kDim));
        walkChunks(
            kb, sp, h, C, c0, c1, x, kDim, W, kn, G,
            [&](Value i) {
              return kb.select(isTrans, kb.f32(0.0),
                               kb.load(U, {sp.b, i, h, j}));
            },
            nullptr, tmp);
        kb.forRange(kDim, [&](Value d) {
          Value v = kb.load(x, {d});
          kb.ifThen(isTrans,
                    [&] { kb.store(v, transition.full, {n, s, h, d, m}); });
          kb.ifThen(kb.notb(isTrans),
                    [&] { kb.store(v, contribution, {n, s, h, d, j}); });
        });
      });
  return success();
}

LogicalResult k3::emitKDASegmentScan(KDASegmentScanOp op, KernelBuilder &kb,
                                     In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand contribution = ops.getContribution(),
                init = ops.getInitialState();
  Value A = ops.getTransition().full, bS = contribution.full, st = out[0].full;
  int64_t S = contribution.shape[1], K = contribution.shape[3];
  Value kDim = kb.idx(K);
  kb.parallel(
      {kb.dim(out[0].shape[0]), kb.dim(out[0].shape[2]),
       kb.dim(out[0].shape[4])},
      [&](ValueRange iv) {
        Value n = iv[0], h = iv[1], j = iv[2];
        kb.forRange(kDim, [&](Value d) {
          Value v = init ? kb.load(init.full, {n, h, d, j}) : kb.f32(0.0);
          kb.store(v, st, {n, kb.idx(0), h, d, j});
        });
        kb.forRange(kb.idx(1), kb.idx(S), [&](Value s) {
          Value p = kb.subi(s, kb.idx(1));
          kb.forRange(kDim, [&](Value d) {
            Value v = kb.reduce(
                kDim, kb.load(bS, {n, p, h, d, j}), [&](Value e, Value acc) {
                  return kb.fma(kb.load(A, {n, p, h, d, e}),
                                kb.load(st, {n, p, h, e, j}), acc);
                });
            kb.store(v, st, {n, s, h, d, j});
          });
        });
      });
  return success();
}
