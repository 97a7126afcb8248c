//===- RouterTopK.h - a warp's top-k of one token's router row --*- C++ -*-===//
//
// The MoE router's selection for one token by one warp, shared by the fused
// router kernel (moe_router_rows / moe_router_mma, logits in shared memory)
// and k3.moe_topk's kernel (moe_topk_rows, logits in global memory): lane l
// holds experts l, l + 32, ... in registers: the score (sigmoid, or
// softmax over the row: max and sum by shuffles) and the score plus the
// correction bias. k rounds: each lane's best untaken expert, then the
// warp's (larger biased score, or equal with a lower id: the loop nest's
// and the oracle's tie rule), whose lane marks it taken. The weights are
// the unbiased scores, renormalised and scaled as the op says; lane 0
// writes them with the ids. Group-limited routing (n_group > 1) first
// scores each group from the lanes' registers (a second pass over the
// group's experts: each lane's best two, merged over the warp by
// shuffles), keeps the topk_group best groups (ties: the lower group id)
// and sets the other groups' biased scores to -inf.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_ROUTERTOPK_H
#define K3_LOWERING_CUDA_ROUTERTOPK_H

#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Operands.h"

#include <functional>

namespace mlir::k3 {

/// What the selection needs from k3.moe_router or k3.moe_topk.
struct RouterSelection {
  RouterScore score;
  int64_t topK;
  bool renormalize;
  double factor;
  KernelOperand bias; // optional
  Value idx, wts;     // [T, top_k] results
  int64_t experts;
  // Group-limited routing: experts / nGroup contiguous experts a group,
  // the topkGroup best groups eligible; 1 / 1: every expert.
  int64_t nGroup = 1, topkGroup = 1;
};

/// Token t's selection by the calling warp (lane `lane`); logitAt(e) reads
/// the logit of expert e < experts.
void emitWarpTopK(KernelBuilder &kb, MMAEmitter &em, const RouterSelection &sel,
                  Value lane, Value t,
                  const std::function<Value(Value)> &logitAt);

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_ROUTERTOPK_H
