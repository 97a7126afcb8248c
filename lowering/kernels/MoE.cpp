//===- MoE.cpp - kernels of MLPs, the MoE router and AttnRes ----*- C++ -*-===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

Value mlir::k3::emitGLUActivation(KernelBuilder &kb, GLUActivation act,
                                  std::optional<double> beta,
                                  std::optional<double> linearBeta, Value a,
                                  Value u) {
  if (act == GLUActivation::silu)
    return kb.mul(kb.silu(a), u);
  // SiTU: beta tanh(a / beta) sigmoid(a) * linear_beta tanh(u / linear_beta).
  Value b = kb.f32(*beta);
  Value gate = kb.mul(kb.mul(b, kb.tanh(kb.div(a, b))), kb.sigmoid(a));
  if (linearBeta) {
    Value lb = kb.f32(*linearBeta);
    u = kb.mul(lb, kb.tanh(kb.div(u, lb)));
  }
  return kb.mul(gate, u);
}

/// One GLU MLP applied to row `t` of `x`, accumulated as
/// y[t, :] = base + weight * W_down act(W_gate x, W_up x); `expert` selects
/// the slice of stacked weights (or is null for plain 2-D weights). With
/// `rowBuffer`, `y` is one f32 row [hidden] instead.
static void gluRow(KernelBuilder &kb, GLUActivation act,
                   std::optional<double> beta, std::optional<double> lbeta,
                   Value x, Value t, Value wGate, Value wUp, Value wDown,
                   Value expert, int64_t hidden, int64_t inter, Value y,
                   Value weight, bool accumulate, bool rowBuffer = false) {
  auto widx = [&](Value r, Value c) -> SmallVector<Value> {
    if (expert)
      return {expert, r, c};
    return {r, c};
  };
  kb.scope([&] {
    Value h = kb.scratch(inter);
    kb.forRange(kb.idx(inter), [&](Value i) {
      SmallVector<Value> dots =
          kb.reduceN(kb.idx(0), kb.idx(hidden), {kb.f32(0.0), kb.f32(0.0)},
                     [&](Value d, ValueRange acc) -> SmallVector<Value> {
                       Value xv = kb.load(x, {t, d});
                       return {kb.fma(xv, kb.load(wGate, widx(i, d)), acc[0]),
                               kb.fma(xv, kb.load(wUp, widx(i, d)), acc[1])};
                     });
      kb.store(emitGLUActivation(kb, act, beta, lbeta, dots[0], dots[1]), h,
               {i});
    });
    kb.forRange(kb.idx(hidden), [&](Value d) {
      Value a = kb.reduce(kb.idx(inter), kb.f32(0.0), [&](Value i, Value acc) {
        return kb.fma(kb.load(wDown, widx(d, i)), kb.load(h, {i}), acc);
      });
      if (weight)
        a = kb.mul(a, weight);
      // `y` is the output [T, hidden], or one f32 row [hidden].
      SmallVector<Value> at =
          rowBuffer ? SmallVector<Value>{d} : SmallVector<Value>{t, d};
      if (accumulate)
        a = kb.add(a, kb.load(y, at));
      kb.store(a, y, at);
    });
  });
}

LogicalResult k3::emitGLUMLP(GLUMLPOp op, KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput(), wGate = ops.getWGate();
  int64_t hidden = input.shape[1], inter = wGate.shape[0];
  kb.parallel({kb.dim(input.shape[0])}, [&](ValueRange iv) {
    gluRow(kb, op.getActivation(), optionalDouble(op.getBetaAttr()),
           optionalDouble(op.getLinearBetaAttr()), input.full, iv[0],
           wGate.full, ops.getWUp().full, ops.getWDown().full, Value(), hidden,
           inter, out[0].full, Value(), /*accumulate=*/false);
  });
  return success();
}

LogicalResult k3::emitMoERouter(MoERouterOp op, KernelBuilder &kb, In in,
                                Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput(), weight = ops.getWeight(),
                bias = ops.getCorrectionBias();
  Value x = input.full, w = weight.full;
  Value idx = resultOf(out, op.getIndices()).full,
        wts = resultOf(out, op.getWeights()).full;
  int64_t hidden = input.shape[1], experts = weight.shape[0];
  int64_t topK = op.getTopK();
  bool softmax = op.getScore() == RouterScore::softmax;
  kb.parallel({kb.dim(input.shape[0])}, [&](ValueRange iv) {
    Value t = iv[0];
    kb.scope([&] {
      Value scores = kb.scratch(experts);
      kb.forRange(kb.idx(experts), [&](Value e) {
        Value l = kb.reduce(kb.idx(hidden), kb.f32(0.0), [&](Value d, Value a) {
          return kb.fma(kb.load(x, {t, d}), kb.load(w, {e, d}), a);
        });
        kb.store(softmax ? l : kb.sigmoid(l), scores, {e});
      });
      if (softmax) {
        Value m = kb.reduce(
            kb.idx(experts), kb.f32(-INFINITY),
            [&](Value e, Value a) { return kb.maxf(a, kb.load(scores, {e})); });
        Value z =
            kb.reduce(kb.idx(experts), kb.f32(0.0), [&](Value e, Value a) {
              Value p = kb.exp(kb.sub(kb.load(scores, {e}), m));
              kb.store(p, scores, {e});
              return kb.add(a, p);
            });
        kb.forRange(kb.idx(experts), [&](Value e) {
          kb.store(kb.div(kb.load(scores, {e}), z), scores, {e});
        });
      }
      // Top-k on the biased scores; strictly greater, so ties go to the
      // lower expert id. Weights are the unbiased scores.
      Value total = kb.f32(0.0);
      for (int64_t j = 0; j < topK; ++j) {
        SmallVector<Value> best = kb.reduceN(
            kb.idx(0), kb.idx(experts), {kb.f32(-INFINITY), kb.idx(0)},
            [&](Value e, ValueRange acc) -> SmallVector<Value> {
              Value s = kb.load(scores, {e});
              if (bias)
                s = kb.add(s, kb.load(bias.full, {e}));
              Value taken = kb.boolean(false);
              for (int64_t p = 0; p < j; ++p)
                taken =
                    kb.ori(taken, kb.eqi(kb.loadIndex(idx, {t, kb.idx(p)}), e));
              Value better = kb.andi(kb.notb(taken), kb.gtf(s, acc[0]));
              return {kb.select(better, s, acc[0]),
                      kb.select(better, e, acc[1])};
            });
        kb.storeIndex(best[1], idx, {t, kb.idx(j)});
        Value wj = kb.load(scores, {best[1]});
        kb.store(wj, wts, {t, kb.idx(j)});
        total = kb.add(total, wj);
      }
      double factor = op.getRoutedScalingFactor().convertToDouble();
      for (int64_t j = 0; j < topK; ++j) {
        Value wj = kb.load(wts, {t, kb.idx(j)});
        if (op.getRenormalize())
          wj = kb.div(wj, kb.add(total, kb.f32(1e-20)));
        kb.store(kb.mul(wj, kb.f32(factor)), wts, {t, kb.idx(j)});
      }
    });
  });
  return success();
}

LogicalResult k3::emitMoEExperts(MoEExpertsOp op, KernelBuilder &kb, In in,
                                 Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput(), indices = ops.getIndices(),
                w1 = ops.getW1();
  Value x = input.full, idx = indices.full, wts = ops.getWeights().full;
  int64_t hidden = input.shape[1], topK = indices.shape[1], inter = w1.shape[1];
  Value y = out[0].full;
  // The sum over the chosen experts accumulates in f32: with a narrower
  // output (bf16 activations) in an f32 row, stored once.
  bool narrow =
      !cast<MemRefType>(y.getType()).getElementType().isF32() && topK > 1;
  kb.parallel({kb.dim(input.shape[0])}, [&](ValueRange iv) {
    Value t = iv[0];
    kb.scope([&] {
      Value acc = narrow ? kb.scratch(hidden) : Value();
      for (int64_t j = 0; j < topK; ++j) {
        Value e = kb.loadIndex(idx, {t, kb.idx(j)});
        Value wj = kb.load(wts, {t, kb.idx(j)});
        gluRow(kb, op.getActivation(), optionalDouble(op.getBetaAttr()),
               optionalDouble(op.getLinearBetaAttr()), x, t, w1.full,
               ops.getW3().full, ops.getW2().full, e, hidden, inter,
               narrow ? acc : y, wj, /*accumulate=*/j > 0,
               /*rowBuffer=*/narrow);
      }
      if (narrow)
        kb.forRange(kb.idx(hidden),
                    [&](Value d) { kb.store(kb.load(acc, {d}), y, {t, d}); });
    });
  });
  return success();
}

LogicalResult k3::emitAttnResMix(AttnResMixOp op, KernelBuilder &kb, In in,
                                 Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand blocksIn = ops.getBlocks(), partialIn = ops.getPartial();
  Value blocks = blocksIn.full, partial = partialIn.full,
        nw = ops.getNormWeight().full, pw = ops.getProjWeight().full,
        y = out[0].full;
  int64_t numBlocks = blocksIn.shape[0], hidden = partialIn.shape[1];
  double eps = op.getEpsilon().convertToDouble();
  kb.parallel({kb.dim(partialIn.shape[0])}, [&](ValueRange iv) {
    Value t = iv[0];
    auto source = [&](int64_t i, Value d) {
      if (i < numBlocks)
        return kb.load(blocks, {kb.idx(i), t, d});
      return kb.load(partial, {t, d});
    };
    // Logit of each source: <v / rms(v), norm_weight * proj_weight>.
    SmallVector<Value> logits;
    for (int64_t i = 0; i <= numBlocks; ++i) {
      SmallVector<Value> r = kb.reduceN(
          kb.idx(0), kb.idx(hidden), {kb.f32(0.0), kb.f32(0.0)},
          [&](Value d, ValueRange acc) -> SmallVector<Value> {
            Value v = source(i, d);
            Value q = kb.mul(kb.load(nw, {d}), kb.load(pw, {kb.idx(0), d}));
            return {kb.fma(v, v, acc[0]), kb.fma(v, q, acc[1])};
          });
      Value inv = kb.rsqrt(kb.add(kb.div(r[0], kb.f32(hidden)), kb.f32(eps)));
      logits.push_back(kb.mul(r[1], inv));
    }
    Value m = kb.f32(-INFINITY);
    for (Value l : logits)
      m = kb.maxf(m, l);
    SmallVector<Value> p;
    Value z = kb.f32(0.0);
    for (Value l : logits) {
      p.push_back(kb.exp(kb.sub(l, m)));
      z = kb.add(z, p.back());
    }
    kb.forRange(kb.idx(hidden), [&](Value d) {
      Value acc = kb.f32(0.0);
      for (int64_t i = 0; i <= numBlocks; ++i)
        acc = kb.fma(p[i], source(i, d), acc);
      kb.store(kb.div(acc, z), y, {t, d});
    });
  });
  return success();
}
