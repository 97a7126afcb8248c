//===- GroupShortConvs.cpp - a layer's short convs as one op ----*- C++ -*-===//
//
// After the decode kernels' own fixes a KDA layer of a Kimi-Linear-48B
// decode step still launched three short convolutions of a few
// microseconds each, 60 of a step's ~450 launches
// (bench/results/profile-gpu/kl48b-decode-B1-20261203T1629Z-89113f1.txt).
// They read the three results of one k3.linear_group and are independent:
// one k3.short_conv_group launches them together.
//
// Only functions marked k3.decode. The group is placed at the last member,
// so every operand is defined before it; members whose results are used
// before that point are left alone.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GROUPSHORTCONVS
#include "passes/Passes.h.inc"

namespace {

/// Whether every use of `op`'s results comes after `last` in its block.
bool usedOnlyAfter(ShortConvOp op, Operation *last) {
  for (Operation *user : op->getUsers())
    if (user->getBlock() != last->getBlock() || !last->isBeforeInBlock(user))
      return false;
  return true;
}

/// Replaces `members` (in block order) by one group at the last of them.
void groupShortConvs(ArrayRef<ShortConvOp> members) {
  ShortConvOp last = members.back();
  SmallVector<Value> inputs, weights, states;
  SmallVector<Type> results, finals;
  SmallVector<Location> locs;
  for (ShortConvOp op : members) {
    inputs.push_back(op.getInput());
    weights.push_back(op.getWeight());
    states.push_back(op.getConvState());
    results.push_back(op.getResult().getType());
    finals.push_back(op.getFinalState().getType());
    locs.push_back(op.getLoc());
  }
  OpBuilder b(last);
  auto group = ShortConvGroupOp::create(
      b, b.getFusedLoc(locs), results, finals, inputs, weights, states,
      last.getCuSeqlens(), last.getKernelSizeAttr());
  for (auto [i, op] : llvm::enumerate(members)) {
    ShortConvOp member = op;
    member.getResult().replaceAllUsesWith(group.getResults()[i]);
    member.getFinalState().replaceAllUsesWith(group.getFinalStates()[i]);
    member.erase();
  }
}

struct K3GroupShortConvsPass
    : impl::K3GroupShortConvsBase<K3GroupShortConvsPass> {
  void runOnOperation() override {
    getOperation()->walk([&](func::FuncOp fn) {
      if (K3Dialect::DecodeAttrHelper(fn.getContext()).isAttrPresent(fn))
        groupFunction(fn);
    });
  }

  void groupFunction(func::FuncOp fn) {
    // Candidates keyed by what makes them one launch: the op producing the
    // inputs, the sequences and the kernel size.
    using Key = std::tuple<Operation *, Value, int64_t>;
    llvm::MapVector<Key, SmallVector<ShortConvOp>> byKey;
    fn.walk([&](ShortConvOp op) {
      Operation *producer = op.getInput().getDefiningOp();
      if (producer && op.getConvState() && op.getCuSeqlens())
        byKey[{producer, op.getCuSeqlens(), op.getKernelSize()}].push_back(op);
    });
    for (auto &entry : byKey) {
      SmallVector<ShortConvOp> &ops = entry.second;
      if (ops.size() < 2 || llvm::any_of(ops, [&](ShortConvOp op) {
            return op->getBlock() != ops.front()->getBlock();
          }))
        continue;
      Operation *last = ops.back();
      SmallVector<ShortConvOp> members;
      for (ShortConvOp op : ops)
        if (op == last || usedOnlyAfter(op, last))
          members.push_back(op);
      if (members.size() >= 2)
        groupShortConvs(members);
    }
  }
};

} // namespace
} // namespace mlir::k3
