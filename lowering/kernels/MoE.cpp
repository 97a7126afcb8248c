//===- MoE.cpp - kernels of MLPs, the MoE router and AttnRes ----*- C++ -*-===//
#include "lowering/kernels/GroupLimit.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

Value mlir::k3::emitGLUActivation(KernelBuilder &kb, GLUActivation act,
                                  std::optional<double> beta,
                                  std::optional<double> linearBeta, Value a,
                                  Value u,
                                  const std::function<Value(Value)> &sigmoid) {
  Value sig = sigmoid ? sigmoid(a) : kb.sigmoid(a);
  if (act == GLUActivation::silu)
    return kb.mul(kb.mul(a, sig), u);
  // SiTU: beta tanh(a / beta) sigmoid(a) * linear_beta tanh(u / linear_beta).
  Value b = kb.f32(*beta);
  Value gate = kb.mul(kb.mul(b, kb.tanh(kb.div(a, b))), sig);
  if (linearBeta) {
    Value lb = kb.f32(*linearBeta);
    u = kb.mul(lb, kb.tanh(kb.div(u, lb)));
  }
  return kb.mul(gate, u);
}

Value mlir::k3::emitGLUChannel(KernelBuilder &kb, GLUActivation act,
                               std::optional<double> beta,
                               std::optional<double> lbeta, Value x, Value t,
                               const WeightElements &wGate,
                               const WeightElements &wUp, Value expert, Value i,
                               int64_t hidden) {
  auto widx = [&](Value r, Value c) -> SmallVector<Value> {
    if (expert)
      return {expert, r, c};
    return {r, c};
  };
  SmallVector<Value> dots =
      kb.reduceSumN(kb.idx(hidden), {kb.f32(0.0), kb.f32(0.0)},
                    [&](Value d, ValueRange acc) -> SmallVector<Value> {
                      Value xv = kb.load(x, {t, d});
                      return {kb.fma(xv, wGate.load(widx(i, d)), acc[0]),
                              kb.fma(xv, wUp.load(widx(i, d)), acc[1])};
                    });
  return emitGLUActivation(kb, act, beta, lbeta, dots[0], dots[1]);
}

Value mlir::k3::emitDownRow(KernelBuilder &kb, const WeightElements &wDown,
                            Value expert, Value d, Value h,
                            ArrayRef<Value> hIdx, int64_t inter) {
  return kb.reduceSum(kb.idx(inter), kb.f32(0.0), [&](Value i, Value acc) {
    SmallVector<Value> w = {d, i}, hi(hIdx);
    if (expert)
      w.insert(w.begin(), expert);
    hi.push_back(i);
    return kb.fma(wDown.load(w), kb.load(h, hi), acc);
  });
}

// MLPs and experts run in two phases, each parallel over all its outputs (a
// launch each on a GPU): the activated gate/up channels into a workspace,
// then the down projection. One thread per token doing both, as before,
// left a decode step with a single thread for a whole MoE layer.

LogicalResult k3::emitGLUMLP(GLUMLPOp op, KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput(), wGate = ops.getWGate();
  int64_t hidden = input.shape[1], inter = wGate.shape[0];
  Value tokens = kb.dim(input.shape[0]);
  Value y = out[0].full, h = out[1].full;
  WeightElements gate(kb, wGate), up(kb, ops.getWUp()),
      down(kb, ops.getWDown());
  kb.parallelWarps({tokens, kb.idx(inter)}, [&](ValueRange iv) {
    kb.store(emitGLUChannel(kb, op.getActivation(),
                            optionalDouble(op.getBetaAttr()),
                            optionalDouble(op.getLinearBetaAttr()), input.full,
                            iv[0], gate, up, Value(), iv[1], hidden),
             h, iv);
  });
  kb.parallelWarps({tokens, kb.idx(hidden)}, [&](ValueRange iv) {
    kb.store(emitDownRow(kb, down, Value(), iv[1], h, {iv[0]}, inter), y, iv);
  });
  return success();
}

LogicalResult k3::emitGLUGateUp(GLUGateUpOp op, KernelBuilder &kb, In in,
                                Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput(), wGate = ops.getWGate();
  int64_t hidden = input.shape[1], inter = wGate.shape[0];
  WeightElements gate(kb, wGate), up(kb, ops.getWUp());
  kb.parallelWarps({kb.dim(input.shape[0]), kb.idx(inter)}, [&](ValueRange iv) {
    kb.store(emitGLUChannel(kb, op.getActivation(),
                            optionalDouble(op.getBetaAttr()),
                            optionalDouble(op.getLinearBetaAttr()), input.full,
                            iv[0], gate, up, Value(), iv[1], hidden),
             out[0].full, iv);
  });
  return success();
}

/// Phase 1 of the router: score[t, e] (logit, or its sigmoid) into the
/// workspace, parallel over (token, expert).
static void routerScores(MoERouterOp op, KernelBuilder &kb, Value x, Value w,
                         Value scores, Value tokens, int64_t experts,
                         int64_t hidden) {
  bool softmax = op.getScore() == RouterScore::softmax;
  kb.parallelWarps({tokens, kb.idx(experts)}, [&](ValueRange iv) {
    Value l = kb.reduceSum(kb.idx(hidden), kb.f32(0.0), [&](Value d, Value a) {
      return kb.fma(kb.load(x, {iv[0], d}), kb.load(w, {iv[1], d}), a);
    });
    kb.store(softmax ? l : kb.sigmoid(l), scores, iv);
  });
}

/// Softmax of token `t`'s row of scores, in place.
static void routerSoftmax(KernelBuilder &kb, Value scores, Value t,
                          int64_t experts) {
  auto at = [&](Value e) -> SmallVector<Value> { return {t, e}; };
  Value m =
      kb.reduce(kb.idx(experts), kb.f32(-INFINITY), [&](Value e, Value a) {
        return kb.maxf(a, kb.load(scores, at(e)));
      });
  Value z = kb.reduce(kb.idx(experts), kb.f32(0.0), [&](Value e, Value a) {
    Value p = kb.exp(kb.sub(kb.load(scores, at(e)), m));
    kb.store(p, scores, at(e));
    return kb.add(a, p);
  });
  kb.forRange(kb.idx(experts), [&](Value e) {
    kb.store(kb.div(kb.load(scores, at(e)), z), scores, at(e));
  });
}

/// The groups that group-limited routing keeps for token `t` (docs/moe.md,
/// "Grouped top-k"): group g holds experts [g E/G, (g + 1) E/G); its score
/// is the sum of its two best choice scores (s + bias) with a bias, its
/// best one without; `topkGroup` rounds each take the best untaken group,
/// ties to the lower group id (the first found scanning up). Returns the
/// kept group ids. The group count is static (an attribute), so the
/// groups are unrolled; each group's scan is one loop (split over the
/// lanes inside parallelWarps, as the expert scan).
static SmallVector<Value> keptGroups(KernelBuilder &kb, Value scores,
                                     KernelOperand bias, Value t,
                                     int64_t experts, int64_t groups,
                                     int64_t topkGroup) {
  int64_t perGroup = experts / groups;
  // (best, second best) of a set of values, merged pairwise.
  auto mergeTop2 = [&](ValueRange a, ValueRange o) -> SmallVector<Value> {
    auto [best, second] = mergeBestTwo(kb, a[0], a[1], o[0], o[1]);
    return {best, second};
  };
  SmallVector<Value> scoresOfGroups;
  for (int64_t g = 0; g < groups; ++g) {
    SmallVector<Value> top2 = kb.reduceLanesN(
        kb.idx(perGroup), {kb.f32(-INFINITY), kb.f32(-INFINITY)},
        [&](Value i, ValueRange acc) -> SmallVector<Value> {
          Value e = kb.addi(i, kb.idx(g * perGroup));
          Value c = kb.load(scores, {t, e});
          if (bias)
            c = kb.add(c, kb.load(bias.full, {e}));
          return mergeTop2(acc, {c, kb.f32(-INFINITY)});
        },
        mergeTop2);
    scoresOfGroups.push_back(groupScore(kb, top2[0], top2[1], bool(bias)));
  }
  return keepBestGroups(kb, scoresOfGroups, topkGroup);
}

/// Top-k of token `t` on the biased scores; ties go to the lower expert id
/// (a candidate wins when strictly greater, or equal with a lower id).
/// Weights are the unbiased scores, renormalised and scaled as the op says.
/// Inside parallelWarps the lanes split each scan (reduceLanesN); the taken
/// experts and the weights stay in registers, so every lane computes the
/// same values and nothing is read back after a store. One thread scanning
/// 8 x 256 experts took 49 us per layer and decode step of Kimi-Linear
/// (bench/results/e2e-kimi-linear-48b-nvidia-h200-20261202T120813Z.json,
/// the decode profile in docs/profile.md).
template <typename RouterLike>
static void routerTopK(RouterLike op, KernelBuilder &kb, Value scores,
                       KernelOperand bias, Value idx, Value wts, Value t,
                       int64_t experts) {
  int64_t topK = op.getTopK();
  auto at = [&](Value e) -> SmallVector<Value> { return {t, e}; };
  auto better = [&](Value s, Value e, Value bestS, Value bestE) {
    Value tie = kb.andi(kb.eqf(s, bestS), kb.lti(e, bestE));
    return kb.ori(kb.gtf(s, bestS), tie);
  };
  // Group-limited routing: only the kept groups' experts are eligible
  // (the others are -inf in the oracle, vLLM and Kimi's gate: never
  // chosen while an eligible expert is left, and top_k never exceeds the
  // eligible count: the verifier).
  int64_t groups = op.getNGroup(), topkGroup = op.getTopkGroup();
  bool grouped = groups > 1 && topkGroup < groups;
  SmallVector<Value> kept;
  if (grouped)
    kept = keptGroups(kb, scores, bias, t, experts, groups, topkGroup);
  auto eligible = [&](Value e) {
    return inKeptGroup(kb, e, experts / groups, kept);
  };
  Value total = kb.f32(0.0);
  SmallVector<Value> chosen, weights;
  for (int64_t j = 0; j < topK; ++j) {
    SmallVector<Value> best = kb.reduceLanesN(
        kb.idx(experts), {kb.f32(-INFINITY), kb.idx(experts)},
        [&](Value e, ValueRange acc) -> SmallVector<Value> {
          Value s = kb.load(scores, at(e));
          if (bias)
            s = kb.add(s, kb.load(bias.full, {e}));
          Value taken = kb.boolean(false);
          for (Value c : chosen)
            taken = kb.ori(taken, kb.eqi(c, e));
          Value take = kb.andi(kb.notb(taken), better(s, e, acc[0], acc[1]));
          if (grouped)
            take = kb.andi(take, eligible(e));
          return {kb.select(take, s, acc[0]), kb.select(take, e, acc[1])};
        },
        [&](ValueRange a, ValueRange o) -> SmallVector<Value> {
          Value take = better(o[0], o[1], a[0], a[1]);
          return {kb.select(take, o[0], a[0]), kb.select(take, o[1], a[1])};
        });
    // Only NaN scores leave the identity's id E: clamp it into the table.
    chosen.push_back(kb.minsi(best[1], kb.idx(experts - 1)));
    weights.push_back(kb.load(scores, at(best[1])));
    total = kb.add(total, weights.back());
  }
  double factor = op.getRoutedScalingFactor().convertToDouble();
  for (int64_t j = 0; j < topK; ++j) {
    Value wj = weights[j];
    if (op.getRenormalize())
      wj = kb.div(wj, kb.add(total, kb.f32(1e-20)));
    kb.storeIndex(chosen[j], idx, {t, kb.idx(j)});
    kb.store(kb.mul(wj, kb.f32(factor)), wts, {t, kb.idx(j)});
  }
}

LogicalResult k3::emitMoERouter(MoERouterOp op, KernelBuilder &kb, In in,
                                Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput(), weight = ops.getWeight();
  Value idx = resultOf(out, op.getIndices()).full,
        wts = resultOf(out, op.getWeights()).full;
  Value scores = out[op->getNumResults()].full; // workspace [T, E]
  int64_t hidden = input.shape[1], experts = weight.shape[0];
  Value tokens = kb.dim(input.shape[0]);
  routerScores(op, kb, input.full, weight.full, scores, tokens, experts,
               hidden);
  // A warp per token scans the experts; the softmax normalises its row in
  // place, which a token's lanes would race on: one thread per token there.
  auto topK = [&](ValueRange iv) {
    if (op.getScore() == RouterScore::softmax)
      routerSoftmax(kb, scores, iv[0], experts);
    routerTopK(op, kb, scores, ops.getCorrectionBias(), idx, wts, iv[0],
               experts);
  };
  if (op.getScore() == RouterScore::softmax)
    kb.parallel({tokens}, topK);
  else
    kb.parallelWarps({tokens}, topK);
  return success();
}

LogicalResult k3::emitMoETopK(MoETopKOp op, KernelBuilder &kb, In in, Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand logits = ops.getLogits();
  Value idx = resultOf(out, op.getIndices()).full,
        wts = resultOf(out, op.getWeights()).full;
  Value scores = out[op->getNumResults()].full; // workspace [T, E]
  int64_t experts = logits.shape[1];
  Value tokens = kb.dim(logits.shape[0]);
  bool softmax = op.getScore() == RouterScore::softmax;
  // Phase 1 as the fused router's, from the given logits.
  kb.parallel({tokens, kb.idx(experts)}, [&](ValueRange iv) {
    Value l = kb.load(logits.full, iv);
    kb.store(softmax ? l : kb.sigmoid(l), scores, iv);
  });
  auto topK = [&](ValueRange iv) {
    if (softmax)
      routerSoftmax(kb, scores, iv[0], experts);
    routerTopK(op, kb, scores, ops.getCorrectionBias(), idx, wts, iv[0],
               experts);
  };
  if (softmax)
    kb.parallel({tokens}, topK);
  else
    kb.parallelWarps({tokens}, topK);
  return success();
}

LogicalResult k3::emitMoEExperts(MoEExpertsOp op, KernelBuilder &kb, In in,
                                 Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand input = ops.getInput(), indices = ops.getIndices(),
                w1 = ops.getW1();
  Value x = input.full, idx = indices.full, wts = ops.getWeights().full;
  int64_t hidden = input.shape[1], topK = indices.shape[1], inter = w1.shape[1];
  Value tokens = kb.dim(input.shape[0]);
  Value y = out[0].full, h = out[1].full;
  WeightElements gate(kb, w1), up(kb, ops.getW3()), down(kb, ops.getW2());
  int64_t experts = w1.shape[0];
  // An id outside [0, E) (another rank's expert under expert parallelism,
  // k3.moe_local_ids) adds nothing: its rows read expert 0 and are zeroed.
  auto expertOf = [&](Value t, Value j) -> std::pair<Value, Value> {
    Value e = kb.loadIndex(idx, {t, j});
    Value valid = kb.andi(kb.gei(e, kb.idx(0)), kb.lti(e, kb.idx(experts)));
    return {kb.select(valid, e, kb.idx(0)), valid};
  };
  // h[t, j, i]: channel i of the j-th chosen expert of token t.
  kb.parallelWarps({tokens, kb.idx(topK), kb.idx(inter)}, [&](ValueRange iv) {
    auto [e, valid] = expertOf(iv[0], iv[1]);
    Value ch =
        emitGLUChannel(kb, op.getActivation(), optionalDouble(op.getBetaAttr()),
                       optionalDouble(op.getLinearBetaAttr()), x, iv[0], gate,
                       up, e, iv[2], hidden);
    kb.store(kb.select(valid, ch, kb.f32(0.0)), h, iv);
  });
  // y[t, d] = sum_j weight_j (W2[e_j] h[t, j])[d], in the experts' order.
  kb.parallelWarps({tokens, kb.idx(hidden)}, [&](ValueRange iv) {
    Value t = iv[0], d = iv[1], acc;
    for (int64_t j = 0; j < topK; ++j) {
      Value jj = kb.idx(j);
      auto [e, valid] = expertOf(t, jj);
      // Each weighted row rounded to the activation type, as
      // k3.moe_grouped_down stores it (docs/precision.md).
      Value a =
          kb.roundTo(kb.mul(emitDownRow(kb, down, e, d, h, {t, jj}, inter),
                            kb.load(wts, {t, jj})),
                     cast<MemRefType>(h.getType()).getElementType());
      a = kb.select(valid, a, kb.f32(0.0));
      acc = j == 0 ? a : kb.add(a, acc);
    }
    kb.store(acc, y, {t, d});
  });
  return success();
}

/// Workspace of the two-phase MLPs and the router.
SmallVector<KernelWorkspace>
mlir::k3::loopNestWorkspace(Operation *op, ArrayRef<SymShape> inShapes) {
  Type f32 = Float32Type::get(op->getContext());
  auto shapes = [&](auto typed) {
    return
        typename decltype(typed)::template GenericAdaptor<ArrayRef<SymShape>>(
            inShapes, typed);
  };
  if (auto o = dyn_cast<GLUMLPOp>(op)) {
    // h in the activations' type, as k3.glu_gate_up stores it.
    auto s = shapes(o);
    Type elem = cast<RankedTensorType>(o.getInput().getType()).getElementType();
    return {{elem, SymShape{s.getInput()[0], s.getWGate()[0]}}};
  }
  if (auto o = dyn_cast<MoEExpertsOp>(op)) {
    // The activated h in the activations' type, as k3.moe_grouped_glu
    // stores it: both forms round at the same place (docs/precision.md).
    auto s = shapes(o);
    Type elem = cast<RankedTensorType>(o.getInput().getType()).getElementType();
    return {{elem, SymShape{s.getInput()[0], s.getIndices()[1], s.getW1()[1]}}};
  }
  if (auto o = dyn_cast<MoERouterOp>(op)) {
    auto s = shapes(o);
    return {{f32, SymShape{s.getInput()[0], s.getWeight()[0]}}};
  }
  if (auto o = dyn_cast<MoETopKOp>(op)) {
    auto s = shapes(o);
    return {{f32, SymShape{s.getLogits()[0], s.getLogits()[1]}}};
  }
  return {};
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
