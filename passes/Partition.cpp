//===- Partition.cpp - the model as one SPMD program ------------*- C++ -*-===//
//
// Tensor parallelism (docs/scaling.md). Attention heads go through
// PartitionHeads.cpp. The MLP blocks split here: a GLU's intermediate width
// is independent per unit, so each rank computes the units of its slice
// (gate and up rows, down columns) and the block's output is the sum of the
// ranks' partial outputs, one all-reduce per block. The weights keep their
// checkpoint names and carry a #k3.weight_shard; the runtime slices them at
// load, so one artifact serves every rank.
//
//===----------------------------------------------------------------------===//
#include "passes/Partition.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3PARTITION
#include "passes/Passes.h.inc"

namespace {

/// Slices `weight`'s rows (dim 0) in `parts` where they divide; fails,
/// changing nothing, where they do not.
LogicalResult shardWeightIfDivisible(WeightOp weight, int64_t parts) {
  int64_t rows = cast<RankedTensorType>(weight.getType()).getDimSize(0);
  if (ShapedType::isDynamic(rows) || rows % parts != 0)
    return failure();
  return shardWeight(weight, 0, parts);
}

/// Slices the weights of the MLP blocks: every reader of each must be a
/// block the pass splits (`splitting`), or slicing it would change another
/// op.
LogicalResult shardBlockWeight(Value w, int64_t dim, int64_t parts,
                               const llvm::DenseSet<Operation *> &splitting) {
  auto weight = w.getDefiningOp<WeightOp>();
  if (!weight)
    return emitError(w.getLoc())
           << "k3-partition: a split block's weight must be a k3.weight";
  for (Operation *user : w.getUsers())
    if (!splitting.contains(user))
      return weight.emitOpError()
             << "is split for tensor parallelism but also read by "
             << user->getName() << ", which is not split";
  return shardWeight(weight, dim, parts);
}

/// The LM head by vocabulary rows: the k3.linear that makes `fn`'s result
/// named `logits` keeps 1/tp of its weight's rows, and an all-gather along
/// the last dimension gives every rank the whole logits (so argmax and
/// sampling stay as they are). Left whole where tp does not divide the
/// vocabulary or the weight has other readers (a tied embedding).
void splitVocabulary(func::FuncOp fn, int64_t tp) {
  if (fn.isExternal())
    return;
  StringAttr key = K3Dialect::NameAttrHelper(fn.getContext()).getName();
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  for (unsigned i = 0; i < fn.getNumResults(); ++i) {
    auto name = fn.getResultAttrOfType<StringAttr>(i, key);
    if (!name || name != "logits")
      continue;
    auto head = ret.getOperand(i).getDefiningOp<LinearOp>();
    auto weight = head ? head.getWeight().getDefiningOp<WeightOp>() : nullptr;
    auto type = head ? cast<RankedTensorType>(head.getType()) : nullptr;
    if (!weight || !weight.getResult().hasOneUse() || type.getRank() != 2 ||
        failed(shardWeightIfDivisible(weight, tp)))
      continue;
    Value full = head.getResult();
    SmallVector<int64_t> shape(type.getShape());
    shape.back() /= tp;
    full.setType(type.clone(shape));
    OpBuilder b(head.getContext());
    b.setInsertionPointAfter(head);
    auto gather = AllGatherOp::create(
        b, head.getLoc(), type, full, b.getStringAttr(kTensorParallel),
        b.getI64IntegerAttr(tp), b.getI64IntegerAttr(type.getRank() - 1));
    full.replaceAllUsesExcept(gather.getResult(), gather);
  }
}

struct K3PartitionPass : impl::K3PartitionBase<K3PartitionPass> {
  using Base::Base;

  void runOnOperation() override {
    if (tp < 1 || tp > 64) {
      getOperation().emitError()
          << "k3-partition: tp must be in [1, 64], got " << int64_t(tp);
      return signalPassFailure();
    }
    if (ep < 1 || ep > 64) {
      getOperation().emitError()
          << "k3-partition: ep must be in [1, 64], got " << int64_t(ep);
      return signalPassFailure();
    }
    if (tp == 1 && ep == 1 && !spmd)
      return;
    // The routed experts by expert (then not by TP: a weight has one shard).
    if (ep > 1 && failed(splitExperts(getOperation(), ep)))
      return signalPassFailure();
    if (tp == 1 && !spmd) {
      if (failed(verify(getOperation())))
        signalPassFailure();
      return;
    }
    if (failed(splitAttentionHeads(getOperation(), tp)))
      return signalPassFailure();
    // The MLP blocks: gate and up split along the intermediate rows, down
    // along its intermediate columns.
    SmallVector<Operation *> blocks;
    getOperation().walk([&](Operation *op) {
      if (isa<GLUMLPOp>(op) || (isa<MoEExpertsOp>(op) && ep == 1))
        blocks.push_back(op);
    });
    llvm::DenseSet<Operation *> splitting(blocks.begin(), blocks.end());
    for (Operation *op : blocks) {
      // [I, D] / [I, D] / [D, I] for a GLU; stacked [E, I, D] / [E, D, I]
      // for the experts.
      int64_t stacked = isa<MoEExpertsOp>(op) ? 1 : 0;
      auto [gate, up, down] =
          stacked ? std::make_tuple(cast<MoEExpertsOp>(op).getW1(),
                                    cast<MoEExpertsOp>(op).getW3(),
                                    cast<MoEExpertsOp>(op).getW2())
                  : std::make_tuple(cast<GLUMLPOp>(op).getWGate(),
                                    cast<GLUMLPOp>(op).getWUp(),
                                    cast<GLUMLPOp>(op).getWDown());
      if (failed(shardBlockWeight(gate, stacked, tp, splitting)) ||
          failed(shardBlockWeight(up, stacked, tp, splitting)) ||
          failed(shardBlockWeight(down, stacked + 1, tp, splitting)))
        return signalPassFailure();
      allReduceResult(op, tp);
    }
    if (vocabSplit && tp > 1)
      for (auto fn : getOperation().getOps<func::FuncOp>())
        splitVocabulary(fn, tp);
    if (failed(verify(getOperation())))
      return signalPassFailure();
  }
};

} // namespace

LogicalResult shardWeight(WeightOp weight, int64_t dim, int64_t parts,
                          int64_t extent, StringRef group) {
  MLIRContext *ctx = weight.getContext();
  auto helper = K3Dialect::ShardAttrHelper(ctx);
  auto want = WeightShardAttr::get(ctx, group, parts, dim, extent);
  if (WeightShardAttr have = helper.getAttr(weight)) {
    if (have == want)
      return success();
    return weight.emitOpError()
           << "is split two ways (" << have << " and " << want << ")";
  }
  auto type = cast<RankedTensorType>(weight.getType());
  int64_t size = type.getDimSize(dim);
  if (ShapedType::isDynamic(size) || size % parts != 0)
    return weight.emitOpError()
           << "dimension " << dim << " (" << size << ") is not divisible by "
           << group << " = " << parts;
  // MXFP4 keeps one E8M0 scale per 32 inputs along its last dimension: a
  // split there must give each rank whole scale blocks.
  if (isa<Float4E2M1FNType>(type.getElementType()) &&
      dim == type.getRank() - 1 && (size / parts) % 32 != 0)
    return weight.emitOpError()
           << "mxfp4 inputs (" << size << ") split over " << group << " = "
           << parts << " leave " << size / parts
           << " a rank, not whole blocks of 32 (one scale each)";
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size / parts;
  weight.getResult().setType(type.clone(shape));
  helper.setAttr(weight, want);
  return success();
}

Value rankArgument(func::FuncOp fn, StringRef group) {
  MLIRContext *ctx = fn.getContext();
  StringAttr key = K3Dialect::NameAttrHelper(ctx).getName();
  std::string name = ("k3.rank." + group).str();
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (auto have = fn.getArgAttrOfType<StringAttr>(i, key);
        have && have.getValue() == name)
      return fn.getArgument(i);
  unsigned n = fn.getNumArguments();
  auto type = RankedTensorType::get({1}, IntegerType::get(ctx, 32));
  auto attrs = DictionaryAttr::get(
      ctx, {NamedAttribute(key, StringAttr::get(ctx, name))});
  (void)fn.insertArgument(n, type, attrs, fn.getLoc());
  return fn.getArgument(n);
}

void allReduceResult(Operation *op, int64_t size, StringRef group) {
  OpBuilder b(op->getContext());
  b.setInsertionPointAfter(op);
  Value partial = op->getResult(0);
  auto sum = AllReduceOp::create(
      b, op->getLoc(), partial.getType(),
      ReductionKindAttr::get(op->getContext(), ReductionKind::sum), partial,
      b.getStringAttr(group), b.getI64IntegerAttr(size));
  partial.replaceAllUsesExcept(sum.getResult(), sum);
}

} // namespace mlir::k3
