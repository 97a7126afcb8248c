//===- PlanMemory.cpp - static memory plan of the model function -*- C++ -*-=//
//
// After outlining, the model function is a straight line of launches on
// tensors. Each tensor gets a buffer: entry inputs and outputs have their
// own, weights and decode state are the runtime's, and activations share
// one arena. A value lives from its producing launch to its last use (uses
// of reshapes count for their source); two values may overlap in the arena
// only when their lifetimes are disjoint. Since a launch's inputs are live
// at the launch, no kernel ever writes over one of its inputs.
//
//===----------------------------------------------------------------------===//
#include "lowering/ModelFunction.h"
#include "lowering/Passes.h"
#include "lowering/SymbolicShape.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3PLANMEMORY
#include "lowering/Passes.h.inc"

namespace {

constexpr int64_t kAlignment = 256;

/// Buffers start on 256-byte boundaries; an empty tensor still occupies
/// one slot so that it has an address of its own.
int64_t alignUp(int64_t v) {
  return std::max<int64_t>(kAlignment,
                           (v + kAlignment - 1) / kAlignment * kAlignment);
}

/// The ranks of an SPMD program: the product of its groups' sizes (read
/// off its collectives and weight shards; 1 for a plain model).
int64_t ranksOf(ModuleOp module) {
  llvm::StringMap<int64_t> sizes;
  module.walk([&](Operation *op) {
    auto group = op->getAttrOfType<StringAttr>("group");
    auto size = op->getAttrOfType<IntegerAttr>("group_size");
    if (group && size)
      sizes[group.getValue()] = size.getInt();
    if (auto w = dyn_cast<WeightOp>(op))
      if (WeightShardAttr s =
              K3Dialect::ShardAttrHelper(op->getContext()).getAttr(w))
        sizes[s.getGroup()] = s.getParts();
  });
  int64_t ranks = 1;
  for (auto &kv : sizes)
    ranks *= kv.getValue();
  return ranks;
}

/// The device bytes of the module's weights (each name once), and of those
/// the MXFP4 ones: codes at half a byte an element plus a scale byte per
/// 32 elements; what each device of the program holds (a partitioned
/// program's weights are one rank's shards).
std::pair<int64_t, int64_t> weightBytes(ModuleOp module) {
  llvm::StringSet<> seen;
  int64_t all = 0, mxfp4 = 0;
  module.walk([&](WeightOp w) {
    if (!seen.insert(w.getName()).second)
      return;
    RankedTensorType t = w.getType();
    int64_t n = t.getNumElements();
    if (isa<Float4E2M1FNType>(t.getElementType())) {
      mxfp4 += n / 2 + n / 32;
      all += n / 2 + n / 32;
    } else {
      all += n * ((t.getElementTypeBitWidth() + 7) / 8);
    }
  });
  return {all, mxfp4};
}

int64_t elementBytes(Type t) {
  return (cast<RankedTensorType>(t).getElementTypeBitWidth() + 7) / 8;
}

struct Interval {
  Value value;
  int64_t bytes, start, end, order, offset = -1;
};

struct K3PlanMemoryPass : impl::K3PlanMemoryBase<K3PlanMemoryPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (maxTokens < 1 || maxSeqs < 1) {
      module.emitError() << "max-tokens and max-seqs must be positive";
      return signalPassFailure();
    }
    SmallVector<func::FuncOp, 2> fns = modelEntries(module, entry);
    if (fns.empty())
      return signalPassFailure();
    for (func::FuncOp fn : fns)
      if (failed(planFunction(module, fn)))
        return signalPassFailure();
    // The entries share the weights: one line for the module.
    if (report) {
      auto [all, mxfp4] = weightBytes(module);
      int64_t ranks = ranksOf(module);
      llvm::errs() << "k3-plan-memory: weights " << all << " bytes per device ("
                   << (ranks == 1 ? std::string("1 device")
                                  : "each of " + std::to_string(ranks) +
                                        " ranks' devices")
                   << "), of which MXFP4 " << mxfp4 << " bytes\n";
    }
  }

  /// Plans one entry's activations in the (shared) arena.
  LogicalResult planFunction(ModuleOp module, func::FuncOp fn) {
    Builder b(module.getContext());
    Block &body = fn.getBody().front();

    // Values returned or written to state have buffers of their own.
    llvm::DenseSet<Value> pinned;
    for (Operation &op : body) {
      if (auto ret = dyn_cast<func::ReturnOp>(op))
        for (Value v : ret.getOperands())
          pinned.insert(bufferRoot(v));
      if (auto w = dyn_cast<StateWriteOp>(op)) {
        // A copy launch's result, or (StateInPlace.h) the result of the
        // launch that updates the state in place, which others may read.
        Value v = w.getValue();
        if (!v.getDefiningOp<LaunchOp>()) {
          w.emitOpError() << "expects its value from a launch: a dedicated "
                             "copy or an in-place update "
                             "(run --k3-outline-kernels)";
          return failure();
        }
        pinned.insert(v);
      }
    }

    // Lifetimes of arena values, in op positions.
    llvm::DenseMap<Operation *, int64_t> position;
    int64_t pos = 0;
    for (Operation &op : body)
      position[&op] = pos++;
    llvm::DenseMap<Value, Interval> live;
    for (Operation &op : body) {
      // Launches produce activations; an empty tensor is the (size-0) list
      // of closed AttnRes blocks before the first block closes.
      if (!isa<LaunchOp, tensor::EmptyOp>(op) && !isCollective(&op))
        continue;
      ArrayAttr shapesAttr =
          K3Dialect::ShapesAttrHelper(op.getContext()).getAttr(&op);
      if (!shapesAttr) {
        op.emitOpError() << "has no k3.shapes (run --k3-outline-kernels)";
        return failure();
      }
      for (auto [r, s] : llvm::zip(op.getResults(), shapesAttr)) {
        if (pinned.contains(r))
          continue;
        auto shape = cast<DenseI64ArrayAttr>(s).asArrayRef();
        int64_t bytes = evalSymNumElements(shape, maxTokens, maxSeqs) *
                        elementBytes(r.getType());
        int64_t order = live.size();
        live[r] = {r, alignUp(bytes), position[&op], position[&op], order};
      }
    }
    for (Operation &op : body)
      for (Value operand : op.getOperands()) {
        auto it = live.find(bufferRoot(operand));
        if (it != live.end())
          it->second.end = std::max(it->second.end, position[&op]);
      }

    // Largest first, each at the lowest offset free over its lifetime.
    SmallVector<Interval *> order;
    for (auto &kv : live)
      order.push_back(&kv.second);
    llvm::sort(order, [&](Interval *a, Interval *c) {
      if (a->bytes != c->bytes)
        return a->bytes > c->bytes;
      return a->order < c->order;
    });
    SmallVector<Interval *> placed;
    int64_t arena = 0, naive = 0;
    for (Interval *iv : order) {
      SmallVector<std::pair<int64_t, int64_t>> busy;
      for (Interval *p : placed)
        if (p->start <= iv->end && iv->start <= p->end)
          busy.push_back({p->offset, p->offset + p->bytes});
      llvm::sort(busy);
      int64_t offset = 0;
      for (auto [lo, hi] : busy) {
        if (offset + iv->bytes <= lo)
          break;
        offset = std::max(offset, hi);
      }
      iv->offset = offset;
      placed.push_back(iv);
      arena = std::max(arena, offset + iv->bytes);
      naive += iv->bytes;
    }

    MLIRContext *ctx = module.getContext();
    K3Dialect::BufferAttrHelper bufferAttr(ctx);
    for (auto &kv : live) {
      Operation *def = kv.first.getDefiningOp();
      unsigned idx = cast<OpResult>(kv.first).getResultNumber();
      SmallVector<Attribute> offsets;
      if (ArrayAttr existing = bufferAttr.getAttr(def))
        offsets.assign(existing.begin(), existing.end());
      offsets.resize(def->getNumResults(), b.getI64IntegerAttr(-1));
      offsets[idx] = b.getI64IntegerAttr(kv.second.offset);
      bufferAttr.setAttr(def, b.getArrayAttr(offsets));
    }
    // Entries run one at a time and share the arena: its size is the
    // largest plan.
    int64_t shared = arena;
    K3Dialect::ArenaBytesAttrHelper arenaAttr(ctx);
    if (IntegerAttr prev = arenaAttr.getAttr(module))
      shared = std::max(shared, prev.getInt());
    arenaAttr.setAttr(module, b.getI64IntegerAttr(shared));
    K3Dialect::MaxTokensAttrHelper(ctx).setAttr(module,
                                                b.getI64IntegerAttr(maxTokens));
    K3Dialect::MaxSeqsAttrHelper(ctx).setAttr(module,
                                              b.getI64IntegerAttr(maxSeqs));
    if (report)
      llvm::errs() << "k3-plan-memory: " << live.size()
                   << " activation buffers, arena " << arena
                   << " bytes (without reuse " << naive << " bytes) at "
                   << maxTokens.getValue() << " tokens, " << maxSeqs.getValue()
                   << " sequences\n";
    return success();
  }
};

} // namespace
} // namespace mlir::k3
