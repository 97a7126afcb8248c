//===- FuseCombineRMSNorm.cpp - a combine into the next norm ----*- C++ -*-===//
//
// Every MoE layer but the last ends in a combine whose [T, D] output only
// the next layer's pre-norm `k3.add_rms_norm` reads. The combine's kernel
// already holds each token's whole row (a block per token), so it can add
// the residual and normalise the sum itself: one launch per MoE layer
// fewer (a few microseconds each in a decode step of launch-bound kernels,
// docs/moe.md) and the combine's output is neither written nor read back.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSECOMBINERMSNORM
#include "passes/Passes.h.inc"

namespace {

/// Folds the combine that `norm` adds (as either operand) into one
/// k3.moe_combine_add_rms_norm, where the combine has no other reader and
/// its type is the sum's.
void fuseCombineRMSNorm(AddRMSNormOp norm) {
  for (auto [routed, other] :
       {std::pair(norm.getResidual(), norm.getInput()),
        std::pair(norm.getInput(), norm.getResidual())}) {
    auto combine = routed.getDefiningOp<MoECombineOp>();
    if (!combine || !combine->hasOneUse() ||
        combine.getType() != norm.getSum().getType() ||
        other.getType() != norm.getSum().getType())
      continue;
    OpBuilder b(norm);
    auto fused = MoECombineAddRMSNormOp::create(
        b, b.getFusedLoc({combine.getLoc(), norm.getLoc()}),
        norm.getSum().getType(), norm.getResult().getType(), combine.getRows(),
        combine.getPositions(), other, norm.getWeight(), combine.getAddend(),
        norm.getEpsilonAttr());
    norm.getSum().replaceAllUsesWith(fused.getSum());
    norm.getResult().replaceAllUsesWith(fused.getResult());
    norm.erase();
    combine.erase();
    return;
  }
}

struct K3FuseCombineRMSNormPass
    : impl::K3FuseCombineRMSNormBase<K3FuseCombineRMSNormPass> {
  void runOnOperation() override {
    SmallVector<AddRMSNormOp> norms;
    getOperation()->walk([&](AddRMSNormOp n) { norms.push_back(n); });
    for (AddRMSNormOp n : norms)
      fuseCombineRMSNorm(n);
  }
};

} // namespace
} // namespace mlir::k3
