//===- PartitionExperts.cpp - routed experts over the ep group --*- C++ -*-===//
//
// Expert parallelism over replicated tokens (docs/scaling.md): every rank
// holds the whole batch and computes the same routing, so no all-to-all is
// needed. Rank r keeps experts [r n, (r + 1) n) of each k3.moe_experts (its
// stacks sliced along E, n = E / ep), turns the router's ids into its own
// (k3.moe_local_ids: other ranks' pairs become -1 and are skipped), and one
// all-reduce over `ep` sums the ranks' partial outputs. The rank comes from
// the entry input `k3.rank.ep`, which the runtime fills for each rank, so
// one artifact serves every rank.
//
//===----------------------------------------------------------------------===//
#include "passes/Partition.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::k3 {

namespace {

/// Slices `w`'s experts (dim 0) over the ep group; `moe` must be its only
/// reader.
LogicalResult shardExperts(Value w, MoEExpertsOp moe, int64_t parts,
                           StringRef group) {
  auto weight = w.getDefiningOp<WeightOp>();
  if (!weight)
    return moe.emitOpError()
           << "is split by expert but a weight of it is not a k3.weight";
  for (Operation *user : w.getUsers())
    if (user != moe.getOperation())
      return weight.emitOpError()
             << "is split by expert but also read by " << user->getName();
  return shardWeight(weight, 0, parts, /*extent=*/0, group);
}

} // namespace

FailureOr<int64_t> shardRoutedExperts(MoEExpertsOp moe, int64_t parts,
                                      StringRef group) {
  int64_t experts = cast<RankedTensorType>(moe.getW1().getType()).getDimSize(0);
  if (ShapedType::isDynamic(experts) || experts % parts != 0)
    return moe.emitOpError()
           << "has " << experts << " routed experts, not divisible by " << group
           << " = " << parts;
  for (Value w : {moe.getW1(), moe.getW3(), moe.getW2()})
    if (failed(shardExperts(w, moe, parts, group)))
      return failure();
  return experts / parts;
}

LogicalResult splitExpertsOverReplicatedTokens(MoEExpertsOp moe, Value rank,
                                               int64_t parts, StringRef group) {
  FailureOr<int64_t> perRank = shardRoutedExperts(moe, parts, group);
  if (failed(perRank))
    return failure();
  OpBuilder b(moe);
  Value indices = moe.getIndices();
  auto local = MoELocalIdsOp::create(b, moe.getLoc(), indices.getType(),
                                     indices, rank, *perRank);
  moe.getIndicesMutable().assign(local.getResult());
  allReduceResult(moe, parts, group);
  return success();
}

LogicalResult splitExperts(ModuleOp module, int64_t ep) {
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    SmallVector<MoEExpertsOp> moes;
    fn.walk([&](MoEExpertsOp m) { moes.push_back(m); });
    if (moes.empty())
      continue;
    Value rank = rankArgument(fn, kExpertParallel);
    for (MoEExpertsOp moe : moes)
      if (failed(
              splitExpertsOverReplicatedTokens(moe, rank, ep, kExpertParallel)))
        return failure();
  }
  return success();
}

} // namespace mlir::k3
