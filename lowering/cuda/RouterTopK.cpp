//===- RouterTopK.cpp - a warp's top-k of one router row --------*- C++ -*-===//
#include "lowering/cuda/RouterTopK.h"
#include "lowering/kernels/GroupLimit.h"

#include <cmath>

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The lane's experts (l, l + 32, ...), their scores and biased scores
/// (-inf past the last expert).
struct LaneExperts {
  SmallVector<Value> ids, score, biased;
};

LaneExperts scoreLane(KernelBuilder &kb, MMAEmitter &em,
                      const RouterSelection &sel, Value lane,
                      const std::function<Value(Value)> &logitAt) {
  int64_t slots = (sel.experts + 31) / 32;
  LaneExperts out;
  SmallVector<Value> &ids = out.ids, &score = out.score, &biased = out.biased;
  for (int64_t i = 0; i < slots; ++i) {
    Value e = kb.addi(lane, kb.idx(32 * i));
    Value in = kb.lti(e, kb.idx(sel.experts));
    Value at = kb.minsi(e, kb.idx(sel.experts - 1));
    ids.push_back(e);
    score.push_back(kb.select(in, logitAt(at), kb.f32(-INFINITY)));
  }
  if (sel.score == RouterScore::softmax) {
    Value m = kb.f32(-INFINITY);
    for (Value s : score)
      m = kb.maxf(m, s);
    for (int64_t off = 16; off >= 1; off /= 2)
      m = kb.maxf(m, em.shuffleXor(m, off));
    Value z = kb.f32(0.0);
    for (Value &s : score) {
      s = kb.exp(kb.sub(s, m)); // -inf (past E) gives 0
      z = kb.add(z, s);
    }
    Value inv = kb.div(kb.f32(1.0), em.warpSum(z));
    for (Value &s : score)
      s = kb.mul(s, inv);
  } else {
    for (Value &s : score)
      s = kb.sigmoid(s);
  }
  for (int64_t i = 0; i < slots; ++i) {
    Value in = kb.lti(ids[i], kb.idx(sel.experts));
    Value s = score[i];
    if (sel.bias)
      s = kb.add(s, kb.load(sel.bias.full,
                            {kb.minsi(ids[i], kb.idx(sel.experts - 1))}));
    biased.push_back(kb.select(in, s, kb.f32(-INFINITY)));
  }
  return out;
}

/// Group-limited routing (docs/moe.md, "Grouped top-k"): the biased
/// scores of experts outside the kept groups become -inf. Group g's score
/// is the sum of its two best biased scores with a bias, its best without:
/// each lane's best two among its slots in the group (slots that cannot
/// hold one of the group's experts are skipped at compile time), merged
/// over the warp by a butterfly of shuffles, so every lane holds every
/// group score. topkGroup rounds then take the best untaken group (ties:
/// the lower group id, the first found scanning up), the same in every
/// lane.
void maskGroups(KernelBuilder &kb, MMAEmitter &em, const RouterSelection &sel,
                LaneExperts &lx) {
  int64_t groups = sel.nGroup, perGroup = sel.experts / groups;
  int64_t slots = int64_t(lx.ids.size());
  Value minusInf = kb.f32(-INFINITY);
  auto merge = [&](Value &hi, Value &lo, Value ohi, Value olo) {
    std::tie(hi, lo) = mergeBestTwo(kb, hi, lo, ohi, olo);
  };
  SmallVector<Value> scoresOfGroups;
  for (int64_t g = 0; g < groups; ++g) {
    int64_t first = g * perGroup, last = first + perGroup - 1;
    Value hi = minusInf, lo = minusInf;
    for (int64_t i = 0; i < slots; ++i) {
      // Slot i holds expert 32 i + lane, lane in [0, 32).
      if (32 * i + 31 < first || 32 * i > last)
        continue;
      Value e = lx.ids[i];
      Value in = kb.andi(kb.gei(e, kb.idx(first)), kb.lti(e, kb.idx(last + 1)));
      merge(hi, lo, kb.select(in, lx.biased[i], minusInf), minusInf);
    }
    for (int64_t off = 16; off >= 1; off /= 2) {
      Value ohi = em.shuffleXor(hi, off), olo = em.shuffleXor(lo, off);
      merge(hi, lo, ohi, olo);
    }
    scoresOfGroups.push_back(groupScore(kb, hi, lo, bool(sel.bias)));
  }
  SmallVector<Value> kept = keepBestGroups(kb, scoresOfGroups, sel.topkGroup);
  for (int64_t i = 0; i < slots; ++i)
    lx.biased[i] = kb.select(inKeptGroup(kb, lx.ids[i], perGroup, kept),
                             lx.biased[i], minusInf);
}

} // namespace

void mlir::k3::emitWarpTopK(KernelBuilder &kb, MMAEmitter &em,
                            const RouterSelection &sel, Value lane, Value t,
                            const std::function<Value(Value)> &logitAt) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  LaneExperts lx = scoreLane(kb, em, sel, lane, logitAt);
  if (sel.nGroup > 1 && sel.topkGroup < sel.nGroup)
    maskGroups(kb, em, sel, lx);
  SmallVector<Value> &ids = lx.ids, &score = lx.score, &biased = lx.biased;
  int64_t slots = int64_t(ids.size());
  int64_t k = sel.topK;
  SmallVector<Value> chosenIds, chosenW;
  Value total = kb.f32(0.0);
  for (int64_t j = 0; j < k; ++j) {
    // The lane's best untaken slot (first maximum), then the warp's.
    Value bv = kb.f32(-INFINITY), bi = kb.idx(sel.experts), bs = kb.f32(0.0);
    for (int64_t i = 0; i < slots; ++i) {
      Value better = kb.gtf(biased[i], bv);
      bv = kb.select(better, biased[i], bv);
      bi = kb.select(better, ids[i], bi);
      bs = kb.select(better, score[i], bs);
    }
    Value bi32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), bi);
    for (int64_t off = 16; off >= 1; off /= 2) {
      Value ov = em.shuffleXor(bv, off), oi = em.shuffleXor(bi32, off),
            os = em.shuffleXor(bs, off);
      Value eq =
          arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, ov, bv);
      Value lower =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, oi, bi32);
      Value take = kb.ori(kb.gtf(ov, bv), kb.andi(eq, lower));
      bv = kb.select(take, ov, bv);
      bi32 = kb.select(take, oi, bi32);
      bs = kb.select(take, os, bs);
    }
    Value winner = arith::IndexCastOp::create(b, loc, b.getIndexType(), bi32);
    for (int64_t i = 0; i < slots; ++i)
      biased[i] =
          kb.select(kb.eqi(ids[i], winner), kb.f32(-INFINITY), biased[i]);
    chosenIds.push_back(winner);
    chosenW.push_back(bs);
    total = kb.add(total, bs);
  }
  double factor = sel.factor;
  kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
    for (int64_t j = 0; j < k; ++j) {
      Value wj = chosenW[j];
      if (sel.renormalize)
        wj = kb.div(wj, kb.add(total, kb.f32(1e-20)));
      kb.storeIndex(chosenIds[j], sel.idx, {t, kb.idx(j)});
      kb.store(kb.mul(wj, kb.f32(factor)), sel.wts, {t, kb.idx(j)});
    }
  });
}
