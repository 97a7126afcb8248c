//===- GroupLimit.h - group-limited routing's choice of groups -*- C++ -*-===//
//
// Shared by the CPU loop nests (lowering/kernels/MoE.cpp) and the CUDA warp
// top-k (lowering/cuda/RouterTopK.cpp), which compute the group scores
// their own way (a loop over the group's experts; a butterfly over a
// warp's lanes) and then choose the same groups (docs/moe.md, "Grouped
// top-k").
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_KERNELS_GROUPLIMIT_H
#define K3_LOWERING_KERNELS_GROUPLIMIT_H

#include "lowering/KernelBuilder.h"

namespace mlir::k3 {

/// The best two of two sets, each given as its (best, second best): how
/// both forms reduce a group's choice scores.
inline std::pair<Value, Value> mergeBestTwo(KernelBuilder &kb, Value bestA,
                                            Value secondA, Value bestB,
                                            Value secondB) {
  Value lesserBest = kb.select(kb.gtf(bestA, bestB), bestB, bestA);
  return {kb.maxf(bestA, bestB),
          kb.maxf(lesserBest, kb.maxf(secondA, secondB))};
}

/// A group's score from its best two choice scores: their sum with a
/// correction bias (noaux_tc), the best alone without (vLLM).
inline Value groupScore(KernelBuilder &kb, Value best, Value second,
                        bool bias) {
  return bias ? kb.add(best, second) : best;
}

/// The ids of the `count` best groups by `groupScores` (one f32 each, the
/// group count static): `count` rounds each take the best untaken group,
/// ties to the lower group id (the first found scanning up). `found` rather
/// than a -inf start: a group scoring -inf (or NaN) is still kept when no
/// better one is left.
inline SmallVector<Value>
keepBestGroups(KernelBuilder &kb, ArrayRef<Value> groupScores, int64_t count) {
  int64_t groups = int64_t(groupScores.size());
  SmallVector<Value> taken(groups, kb.boolean(false)), kept;
  for (int64_t j = 0; j < count; ++j) {
    Value found = kb.boolean(false), best = kb.f32(-INFINITY),
          bestId = kb.idx(0);
    for (int64_t g = 0; g < groups; ++g) {
      Value better = kb.ori(kb.notb(found), kb.gtf(groupScores[g], best));
      Value take = kb.andi(kb.notb(taken[g]), better);
      best = kb.select(take, groupScores[g], best);
      bestId = kb.select(take, kb.idx(g), bestId);
      found = kb.ori(found, take);
    }
    for (int64_t g = 0; g < groups; ++g)
      taken[g] = kb.ori(taken[g], kb.eqi(bestId, kb.idx(g)));
    kept.push_back(bestId);
  }
  return kept;
}

/// Whether expert `expert` lies in one of the `kept` groups of `perGroup`
/// consecutive experts.
inline Value inKeptGroup(KernelBuilder &kb, Value expert, int64_t perGroup,
                         ArrayRef<Value> kept) {
  Value group = kb.divui(expert, perGroup), in = kb.boolean(false);
  for (Value g : kept)
    in = kb.ori(in, kb.eqi(group, g));
  return in;
}

} // namespace mlir::k3

#endif // K3_LOWERING_KERNELS_GROUPLIMIT_H
