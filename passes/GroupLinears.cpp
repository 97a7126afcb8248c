//===- GroupLinears.cpp - the linears of one input as one op ----*- C++ -*-===//
//
// A decode step of Kimi-Linear-48B ran about 700 kernels, most of them GEMVs
// of a few microseconds: per KDA layer six projections of the same
// normalised row (q, k, v 2304 -> 4096; f_a, g_a -> 128; b -> 32), each a
// launch with its own ramp and tail
// (bench/results/profile-gpu/kl48b-decode-B1-20261202T2207Z-db42aea.txt).
// One k3.linear_group reads the row once and spreads all the weights' rows
// over one grid.
//
// Functions marked k3.decode: their linears run on the GEMV kernel (one
// weight pass per step). With `prefill` (the CUDA pipeline) the other
// functions too, for the wgmma GEMM, where every member has its tiles
// (otherwise the group would leave that kernel). The group is placed at
// its first member, so
// every use of a member's result stays dominated; the weights of later
// members (k3.weight, no operands) move before it where they came later.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GROUPLINEARS
#include "passes/Passes.h.inc"

namespace {

/// Replaces `members` (linears of one input, in block order) by one group.
void groupLinears(ArrayRef<LinearOp> members) {
  LinearOp first = members.front();
  SmallVector<Value> weights;
  SmallVector<Type> types;
  for (LinearOp op : members) {
    hoistWeightBefore(op.getWeight(), first);
    weights.push_back(op.getWeight());
    types.push_back(op.getResult().getType());
  }
  OpBuilder b(first);
  SmallVector<Location> locs;
  for (LinearOp op : members)
    locs.push_back(op.getLoc());
  auto group = LinearGroupOp::create(b, b.getFusedLoc(locs), types,
                                     first.getInput(), weights);
  for (auto [i, op] : llvm::enumerate(members)) {
    LinearOp member = op;
    member.getResult().replaceAllUsesWith(group.getResult(i));
    member.erase();
  }
}

/// The wgmma GEMM's shapes (KernelConfigRules' linearWGMMAApplies): bf16
/// 2-D input and weight, K a multiple of 64, N of 8, an f32 or bf16 result.
bool tensorCoreTiles(LinearOp op) {
  auto in = cast<RankedTensorType>(op.getInput().getType());
  auto w = cast<RankedTensorType>(op.getWeight().getType());
  Type out = cast<RankedTensorType>(op.getResult().getType()).getElementType();
  return in.getRank() == 2 && in.getElementType().isBF16() &&
         w.getElementType().isBF16() && w.hasStaticShape() &&
         w.getDimSize(0) % 8 == 0 && w.getDimSize(1) % 64 == 0 &&
         (out.isF32() || out.isBF16());
}

struct K3GroupLinearsPass : impl::K3GroupLinearsBase<K3GroupLinearsPass> {
  using Base::Base;

  void runOnOperation() override {
    getOperation()->walk([&](func::FuncOp fn) {
      if (K3Dialect::DecodeAttrHelper(fn.getContext()).isAttrPresent(fn))
        groupFunction(fn, /*tensorCore=*/false);
      else if (prefill)
        groupFunction(fn, /*tensorCore=*/true);
    });
  }

  void groupFunction(func::FuncOp fn, bool tensorCore) {
    llvm::MapVector<Value, SmallVector<LinearOp>> byInput;
    fn.walk([&](LinearOp op) {
      if (!tensorCore || tensorCoreTiles(op))
        byInput[op.getInput()].push_back(op);
    });
    for (auto &[input, ops] : byInput) {
      SmallVector<LinearOp> members;
      for (LinearOp op : ops)
        if (op->getBlock() == ops.front()->getBlock() &&
            weightMovableBefore(op.getWeight(), ops.front()))
          members.push_back(op);
      if (members.size() >= 2)
        groupLinears(members);
    }
  }
};

} // namespace
} // namespace mlir::k3
