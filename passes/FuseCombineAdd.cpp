//===- FuseCombineAdd.cpp - an add of a combine as its addend ---*- C++ -*-===//
//
// In the prefill entry each MoE layer ended in `k3.add(combine, shared)`:
// the combine wrote the routed sum [T, D], a loop-nest kernel read it back
// with the shared expert's output and wrote the layer's output, 0.09 ms
// and one launch per layer at T = 8192
// (bench/results/profile-gpu/kl48b-prefill-T8192-20261203T1925Z-327ab3c.txt).
// The combine takes the shared expert's output as its addend instead.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3FUSECOMBINEADD
#include "passes/Passes.h.inc"

namespace {

/// Folds `add` into the combine it reads, if it reads one it can take.
void fuseCombineAdd(AddOp add) {
  for (auto [routed, other] : {std::pair(add.getLhs(), add.getRhs()),
                               std::pair(add.getRhs(), add.getLhs())}) {
    auto combine = routed.getDefiningOp<MoECombineOp>();
    if (!combine || combine.getAddend() || !combine->hasOneUse() ||
        combine.getType() != add.getType() || other.getType() != add.getType())
      continue;
    OpBuilder b(add);
    auto fused = MoECombineOp::create(
        b, b.getFusedLoc({combine.getLoc(), add.getLoc()}), add.getType(),
        combine.getRows(), combine.getPositions(), other);
    add.getResult().replaceAllUsesWith(fused.getResult());
    add.erase();
    combine.erase();
    return;
  }
}

struct K3FuseCombineAddPass : impl::K3FuseCombineAddBase<K3FuseCombineAddPass> {
  void runOnOperation() override {
    SmallVector<AddOp> adds;
    getOperation()->walk([&](AddOp add) { adds.push_back(add); });
    for (AddOp add : adds)
      fuseCombineAdd(add);
  }
};

} // namespace
} // namespace mlir::k3
