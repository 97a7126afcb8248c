//===- PartitionHeads.cpp - attention heads over TP ranks -------*- C++ -*-===//
//
// Heads are independent in KDA and in MLA: a rank that holds heads
// [r H / tp, (r + 1) H / tp) needs exactly those rows of every projection
// into them, those channels of the short convolutions and states, and those
// columns of the output projection, whose partial sums one all-reduce adds
// (Megatron's column-then-row split). The split is found by propagation:
// the attention ops require their per-head operands split along the head
// dimension, and each op on the way says which of its operands and results
// that splits, until the column-split projections (a weight's rows) and the
// row-split projection (a weight's columns) close the region. Values change
// type in place; anything the rules do not cover is an error that names it.
//
//===----------------------------------------------------------------------===//
#include "passes/Partition.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::k3 {
namespace {

class HeadSplitter {
public:
  explicit HeadSplitter(int64_t tp) : tp(tp) {}

  LogicalResult run(ModuleOp module) {
    SmallVector<Operation *> seeds;
    module.walk([&](Operation *op) {
      if (isa<KDAOp, LatentAttentionOp>(op))
        seeds.push_back(op);
    });
    for (Operation *op : seeds) {
      handled.insert(op);
      LogicalResult seeded = isa<KDAOp>(op)
                                 ? seedKDA(cast<KDAOp>(op))
                                 : seedLatent(cast<LatentAttentionOp>(op));
      if (failed(seeded))
        return failure();
    }
    while (!worklist.empty()) {
      Value v = worklist.pop_back_val();
      int64_t d = split.lookup(v);
      Operation *def = v.getDefiningOp();
      if (def && handled.insert(def).second && failed(visit(def, v, d)))
        return failure();
      for (Operation *user : llvm::make_early_inc_range(v.getUsers()))
        if (handled.insert(user).second && failed(visit(user, v, d)))
          return failure();
    }
    fixExpandShapes();
    for (Operation *op : rowSplit)
      allReduceResult(op, tp);
    return success();
  }

private:
  /// Records that `v` is split along `d`: its type shrinks there (a weight
  /// also gets its shard); its producer and users are visited next.
  LogicalResult mark(Value v, int64_t d, Operation *why) {
    if (auto it = split.find(v); it != split.end()) {
      if (it->second == d)
        return success();
      return why->emitOpError()
             << "k3-partition: needs a value split along dimension " << d
             << " that is already split along " << it->second;
    }
    if (isa<BlockArgument>(v))
      return why->emitOpError() << "k3-partition: would split a function "
                                   "argument by heads";
    auto type = cast<RankedTensorType>(v.getType());
    int64_t size = type.getDimSize(d);
    if (ShapedType::isDynamic(size) || size % tp != 0)
      return why->emitOpError()
             << "k3-partition: dimension " << d << " (" << size
             << ") of a per-head value is not divisible by tp = " << tp;
    if (auto w = v.getDefiningOp<WeightOp>()) {
      if (failed(shardWeight(w, d, tp)))
        return failure();
    } else {
      SmallVector<int64_t> shape(type.getShape());
      shape[d] = size / tp;
      v.setType(type.clone(shape));
    }
    split[v] = d;
    worklist.push_back(v);
    return success();
  }

  /// A KDA layer's per-head operands and results split along the heads.
  LogicalResult seedKDA(KDAOp op) {
    int64_t heads = op.getQ().getType().getDimSize(2);
    for (Value v : {op.getQ(), op.getK(), op.getV(), op.getG()})
      if (failed(mark(v, 2, op)))
        return failure();
    if (failed(mark(op.getBeta(), 2, op)) ||
        failed(mark(op.getOutput(), 2, op)) ||
        failed(mark(op.getFinalState(), 1, op)))
      return failure();
    if (Value s = op.getInitialState(); s && failed(mark(s, 1, op)))
      return failure();
    // An in-op gate reads A_log per head and dt_bias per channel.
    if (Value a = op.getALog(); a && failed(splitALog(op, a, heads)))
      return failure();
    if (Value b = op.getDtBias(); b && failed(mark(b, 0, op)))
      return failure();
    return success();
  }

  /// MLA's queries and output split along the heads, with kv_b's rows (the
  /// heads' key and value expansions); the latent and its cache are every
  /// head's and stay whole.
  LogicalResult seedLatent(LatentAttentionOp op) {
    if (failed(mark(op.getQ(), 1, op)) || failed(mark(op.getResult(), 1, op)) ||
        failed(mark(op.getKvB(), 0, op)))
      return failure();
    op.setNumHeads(op.getNumHeads() / tp);
    return success();
  }

  /// A_log holds one entry per head, K3's padded to max(H, head dim): the
  /// ranks' slices cover its first H entries.
  LogicalResult splitALog(Operation *op, Value aLog, int64_t heads) {
    auto w = aLog.getDefiningOp<WeightOp>();
    auto type = cast<RankedTensorType>(aLog.getType());
    if (!w || type.getRank() != 1 || type.isDynamicDim(0) || heads % tp)
      return op->emitOpError()
             << "k3-partition: A_log must be a 1-D k3.weight with heads "
                "divisible by tp = "
             << tp;
    if (split.count(aLog))
      return success();
    // Only the rank's heads' entries, [H / tp]: the weight read as the
    // first H of the checkpoint's, then split like any other.
    int64_t extent = type.getDimSize(0);
    w.getResult().setType(type.clone({heads}));
    if (failed(shardWeight(w, 0, tp, extent)))
      return failure();
    split[aLog] = 0;
    worklist.push_back(aLog);
    return success();
  }

  /// The rule of `op`, reached through `v` split along `d`.
  LogicalResult visit(Operation *op, Value v, int64_t d) {
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case<WeightOp, StateReadOp, StateWriteOp>(
            [](Operation *) { return success(); })
        .Case<LinearOp>([&](LinearOp l) { return visitLinear(l, v, d); })
        .Case<ShortConvOp>([&](ShortConvOp c) -> LogicalResult {
          if (failed(mark(c.getInput(), 1, c)) ||
              failed(mark(c.getResult(), 1, c)) ||
              failed(mark(c.getWeight(), 0, c)) ||
              failed(mark(c.getFinalState(), 1, c)))
            return failure();
          if (Value s = c.getConvState())
            return mark(s, 1, c);
          return success();
        })
        .Case<KDAGateOp>([&](KDAGateOp g) -> LogicalResult {
          int64_t heads = g.getInput().getType().getDimSize(1);
          if (failed(splitALog(g, g.getALog(), heads)) ||
              failed(mark(g.getInput(), 1, g)) ||
              failed(mark(g.getResult(), 1, g)) ||
              failed(mark(g.getDtBias(), 0, g)))
            return failure();
          return success();
        })
        .Case<SigmoidGateOp>([&](SigmoidGateOp g) -> LogicalResult {
          if (failed(mark(g.getInput(), d, g)) ||
              failed(mark(g.getGate(), d, g)) ||
              failed(mark(g.getResult(), d, g)))
            return failure();
          return success();
        })
        .Case<GatedRMSNormOp>([&](GatedRMSNormOp n) -> LogicalResult {
          // [T, H, V]: the heads; the weight is per channel of a head.
          if (d != 1)
            return n.emitOpError() << "k3-partition: splits a gated norm "
                                      "along its heads (dimension 1) only";
          if (failed(mark(n.getInput(), 1, n)) ||
              failed(mark(n.getGate(), 1, n)) ||
              failed(mark(n.getResult(), 1, n)))
            return failure();
          return success();
        })
        .Case<tensor::ExpandShapeOp>([&](tensor::ExpandShapeOp e) {
          return visitReshape(e, e.getSrc(), e.getResult(), v, d,
                              /*expands=*/true);
        })
        .Case<tensor::CollapseShapeOp>([&](tensor::CollapseShapeOp c) {
          return visitReshape(c, c.getSrc(), c.getResult(), v, d,
                              /*expands=*/false);
        })
        .Default([&](Operation *other) -> LogicalResult {
          return other->emitOpError()
                 << "k3-partition: cannot split by attention heads (a "
                    "per-head value reaches it)";
        });
  }

  /// A projection into the heads (its result split: its weight's rows) or
  /// out of them (its input split: its weight's columns, then a sum).
  LogicalResult visitLinear(LinearOp l, Value v, int64_t d) {
    auto in = cast<RankedTensorType>(l.getInput().getType());
    int64_t last = in.getRank() - 1;
    if (v == l.getResult() && d == last)
      return mark(l.getWeight(), 0, l);
    if (v == l.getInput() && d == last) {
      rowSplit.push_back(l);
      return mark(l.getWeight(), 1, l);
    }
    return l.emitOpError() << "k3-partition: a projection of per-head values "
                              "must split its last dimension";
  }

  /// A reshape moves the split between the dimension of one group of the
  /// expanded shape and the collapsed dimension of that group: the
  /// group's leading non-unit dimension is the one split (heads before
  /// head dims), so each rank's part stays contiguous.
  LogicalResult visitReshape(Operation *op, Value src, Value result, Value v,
                             int64_t d, bool expands) {
    Value expanded = expands ? result : src, collapsed = expands ? src : result;
    auto groups =
        expands ? cast<tensor::ExpandShapeOp>(op).getReassociationIndices()
                : cast<tensor::CollapseShapeOp>(op).getReassociationIndices();
    auto expandedType = cast<RankedTensorType>(expanded.getType());
    for (auto [g, group] : llvm::enumerate(groups)) {
      bool hit = v == expanded ? llvm::is_contained(group, d) : int64_t(g) == d;
      if (!hit)
        continue;
      // Reached from the expanded side, the split dimension must lead its
      // group (unit dimensions before it); from the collapsed side, the
      // group's first dimension that is not 1 is split (the expanded value
      // is not split yet, so its sizes are the original ones).
      int64_t lead = group.back();
      for (int64_t e : group) {
        if (v == expanded ? e == d : expandedType.getDimSize(e) != 1) {
          lead = e;
          break;
        }
        if (expandedType.getDimSize(e) != 1)
          return op->emitOpError()
                 << "k3-partition: splits dimension " << d
                 << ", which is not the leading one of its group";
      }
      if (failed(mark(expanded, lead, op)) ||
          failed(mark(collapsed, int64_t(g), op)))
        return failure();
      if (expands)
        expandShapes.push_back(cast<tensor::ExpandShapeOp>(op));
      return success();
    }
    return op->emitOpError() << "k3-partition: no group holds dimension " << d;
  }

  /// An expand_shape's static sizes follow its (split) result type.
  void fixExpandShapes() {
    for (tensor::ExpandShapeOp e : expandShapes) {
      SmallVector<int64_t> sizes(e.getStaticOutputShape());
      for (auto [i, s] : llvm::enumerate(sizes))
        if (!ShapedType::isDynamic(s))
          s = e.getResultType().getDimSize(i);
      e.setStaticOutputShape(sizes);
    }
  }

  const int64_t tp;
  llvm::DenseMap<Value, int64_t> split;
  llvm::DenseSet<Operation *> handled;
  SmallVector<Value> worklist;
  SmallVector<tensor::ExpandShapeOp> expandShapes;
  SmallVector<Operation *> rowSplit;
};

} // namespace

LogicalResult splitAttentionHeads(ModuleOp module, int64_t tp) {
  return HeadSplitter(tp).run(module);
}

} // namespace mlir::k3
