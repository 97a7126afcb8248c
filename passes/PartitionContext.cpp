//===- PartitionContext.cpp - the prefill on sequence segments -*- C++ -*-===//
//
// Context parallelism (docs/scaling.md, seed §7.5). The runtime gives rank r
// of the cp group the r-th segment of every sequence of a prefill call, so
// every op that works per token runs unchanged on the rank's tokens. The
// token mixers are affine in their state: each rank runs its segment from
// a known state, one all-gather over cp shares what every segment does to
// a state, and each rank folds the segments before its own into its
// incoming state (K3ContextOps.td). MLA's attention reads the cache, which
// an all-reduce of the ranks' shares fills with every segment's latents. The
// decode entry was cloned before, so it stays whole and runs replicated on
// every rank, which holds every sequence's whole state after the fold.
//
//===----------------------------------------------------------------------===//
#include "passes/Partition.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3PARTITIONCONTEXT
#include "passes/Passes.h.inc"

namespace {

/// `x` with a leading unit dimension, all-gathered over cp along it:
/// [cp, ...], entry r from rank r. (A collective resizes static dimensions
/// only; the sequence count is dynamic.)
Value gatherOverRanks(OpBuilder &b, Location loc, Value x, int64_t cp) {
  auto type = cast<RankedTensorType>(x.getType());
  SmallVector<int64_t> shape{1};
  llvm::append_range(shape, type.getShape());
  SmallVector<ReassociationIndices> groups{{0, 1}};
  SmallVector<OpFoldResult> sizes{b.getIndexAttr(1)};
  for (int64_t d = 0; d < type.getRank(); ++d) {
    if (d > 0)
      groups.push_back({d + 1});
    if (type.isDynamicDim(d))
      sizes.push_back(tensor::DimOp::create(b, loc, x, d).getResult());
    else
      sizes.push_back(b.getIndexAttr(type.getDimSize(d)));
  }
  Value one = tensor::ExpandShapeOp::create(b, loc, type.clone(shape), x,
                                            groups, sizes);
  shape[0] = cp;
  return AllGatherOp::create(b, loc, type.clone(shape), one,
                             b.getStringAttr(kContextParallel),
                             b.getI64IntegerAttr(cp), b.getI64IntegerAttr(0))
      .getResult();
}

struct ContextSplit {
  ContextSplit(func::FuncOp fn, int64_t cp)
      : fn(fn), rank(rankArgument(fn, kContextParallel)), cp(cp) {}
  func::FuncOp fn;
  Value rank;
  int64_t cp;
  /// Every rank's cu_seqlens [cp, N + 1], gathered once per cu_seqlens.
  llvm::DenseMap<Value, Value> gatheredCu;

  Value allCuSeqlens(Value cu) {
    Value &all = gatheredCu[cu];
    if (!all) {
      OpBuilder b(fn.getContext());
      b.setInsertionPointAfterValue(cu);
      all = gatherOverRanks(b, cu.getLoc(), cu, cp);
    }
    return all;
  }

  /// The convolution runs from the folded incoming state; the segment's
  /// tail (k3.short_conv_tail) is what the ranks gather for the fold.
  LogicalResult split(ShortConvOp conv) {
    Value cu = conv.getCuSeqlens();
    if (!cu)
      return conv.emitOpError() << "has no cu_seqlens: context parallelism "
                                   "(k3-partition-context) cuts sequences";
    OpBuilder b(conv);
    Location loc = conv.getLoc();
    Type stateType = conv.getFinalState().getType();
    auto tail = ShortConvTailOp::create(b, loc, stateType, conv.getInput(), cu,
                                        conv.getKernelSizeAttr());
    Value tails = gatherOverRanks(b, loc, tail.getResult(), cp);
    auto fold = ShortConvContextFoldOp::create(
        b, loc, stateType, stateType, tails, allCuSeqlens(cu), rank,
        conv.getConvState(), b.getI64IntegerAttr(cp));
    conv.getFinalState().replaceAllUsesWith(fold.getFinalState());
    conv.getConvStateMutable().assign(fold.getIncoming());
    return success();
  }

  /// The k3.kda runs on the segment from [0 | I] with values [v | 0]
  /// (k3.kda_context_inputs), its final states are gathered, and
  /// k3.kda_context_fold folds them and corrects its outputs.
  LogicalResult split(KDAOp kda) {
    Value cu = kda.getCuSeqlens();
    if (!cu)
      return kda.emitOpError() << "has no cu_seqlens: context parallelism "
                                  "(k3-partition-context) cuts sequences";
    auto q = cast<RankedTensorType>(kda.getQ().getType());
    auto v = cast<RankedTensorType>(kda.getV().getType());
    int64_t keyDim = q.getDimSize(3);
    if (ShapedType::isDynamic(keyDim) || ShapedType::isDynamic(v.getDimSize(3)))
      return kda.emitOpError() << "needs static key and value dimensions for "
                                  "context parallelism";
    OpBuilder b(kda);
    Location loc = kda.getLoc();
    auto widen = [&](Value x, Type elem) {
      auto t = cast<RankedTensorType>(x.getType());
      SmallVector<int64_t> shape(t.getShape());
      shape.back() += keyDim;
      return RankedTensorType::get(shape, elem);
    };
    auto inputs = KDAContextInputsOp::create(
        b, loc, widen(kda.getV(), v.getElementType()),
        widen(kda.getFinalState(), b.getF32Type()), kda.getV(), cu,
        b.getI64IntegerAttr(keyDim));
    Type outElem =
        cast<RankedTensorType>(kda.getOutput().getType()).getElementType();
    auto segment = cast<KDAOp>(b.clone(*kda));
    segment.getVMutable().assign(inputs.getValues());
    segment.getInitialStateMutable().assign(inputs.getInitialState());
    segment.getOutput().setType(widen(kda.getOutput(), outElem));
    segment.getFinalState().setType(inputs.getInitialState().getType());
    Value all = gatherOverRanks(b, loc, segment.getFinalState(), cp);
    auto fold = KDAContextFoldOp::create(
        b, loc, kda.getOutput().getType(), kda.getFinalState().getType(),
        segment.getOutput(), all, rank, kda.getInitialState(), cu,
        b.getI64IntegerAttr(cp));
    kda->replaceAllUsesWith(fold->getResults());
    kda->erase();
    return success();
  }

  /// MLA reads every earlier latent of its sequence: the ranks' shares of
  /// the cache (the prefix, and each its segment's rows), summed over cp,
  /// are the cache holding all of them, and each rank's tokens attend from
  /// their own positions in it.
  LogicalResult split(LatentAttentionOp attn) {
    Value cu = attn.getCuSeqlens(), cache = attn.getLatentCache(),
          lens = attn.getCacheLens();
    if (!cu || !cache)
      return attn.emitOpError()
             << "needs cu_seqlens and a latent cache for context parallelism "
                "(the segments before a rank's reach it through the cache)";
    OpBuilder b(attn);
    Location loc = attn.getLoc();
    Value all = allCuSeqlens(cu);
    auto at = ContextOffsetsOp::create(b, loc, lens.getType(), all, rank, lens,
                                       b.getI64IntegerAttr(cp));
    auto share = LatentCacheSegmentOp::create(
        b, loc, cache.getType(), attn.getLatent(), cache, all, rank, lens,
        b.getI64IntegerAttr(cp));
    auto sum = AllReduceOp::create(
        b, loc, cache.getType(),
        ReductionKindAttr::get(b.getContext(), ReductionKind::sum), share,
        b.getStringAttr(kContextParallel), b.getI64IntegerAttr(cp));
    attn.getLatentCacheMutable().assign(sum.getResult());
    attn.getCacheLensMutable().assign(at.getResult());
    return success();
  }

  /// `x` [G, C, ...] sent bucket g to rank g, received in rank order.
  Value exchange(OpBuilder &b, Location loc, Value x) {
    return AllToAllOp::create(b, loc, x.getType(), x,
                              b.getStringAttr(kContextParallel),
                              b.getI64IntegerAttr(cp), b.getI64IntegerAttr(0),
                              b.getI64IntegerAttr(0))
        .getResult();
  }

  /// Expert parallelism over the ranks' own tokens: each routed row to the
  /// rank that holds its expert and back.
  LogicalResult splitExperts(MoEExpertsOp moe, int64_t maxTokens,
                             int64_t maxSeqs) {
    FailureOr<int64_t> perRank = shardRoutedExperts(moe, cp, kContextParallel);
    if (failed(perRank))
      return failure();
    auto x = cast<RankedTensorType>(moe.getInput().getType());
    auto idx = cast<RankedTensorType>(moe.getIndices().getType());
    int64_t topK = idx.getDimSize(1), hidden = x.getDimSize(1);
    if (ShapedType::isDynamic(topK) || ShapedType::isDynamic(hidden))
      return moe.emitOpError() << "needs a static top-k and hidden size to "
                                  "bucket its rows";
    // A rank's part of a sequence of L tokens is at most ceil(L / cp) <=
    // L / cp + 1 of them, so a part of a call has at most ceil(max-tokens /
    // cp) + max-seqs; each token's choices are distinct experts, so at most
    // min(top-k, n) of its pairs go to one rank.
    int64_t partTokens = (maxTokens + cp - 1) / cp + maxSeqs;
    int64_t capacity = partTokens * std::min(topK, *perRank);
    OpBuilder b(moe);
    Location loc = moe.getLoc();
    auto bucket = MoEBucketOp::create(
        b, loc,
        RankedTensorType::get({cp, capacity, hidden}, x.getElementType()),
        RankedTensorType::get({cp, capacity, 1}, b.getI32Type()),
        RankedTensorType::get({cp, capacity, 1}, b.getF32Type()), idx,
        moe.getInput(), moe.getIndices(), moe.getWeights(), *perRank);
    SmallVector<ReassociationIndices> rowsOf{{0, 1}, {2}};
    auto flat = [&](Value v) {
      return tensor::CollapseShapeOp::create(b, loc, exchange(b, loc, v),
                                             rowsOf)
          .getResult();
    };
    Value rows = flat(bucket.getRows()), ids = flat(bucket.getIds()),
          weights = flat(bucket.getRowWeights());
    auto local = cast<MoEExpertsOp>(b.clone(*moe));
    local.getInputMutable().assign(rows);
    local.getIndicesMutable().assign(ids);
    local.getWeightsMutable().assign(weights);
    local.getResult().setType(local.getInput().getType());
    Value back = tensor::ExpandShapeOp::create(
        b, loc, bucket.getRows().getType(), local.getResult(), rowsOf);
    auto sum = MoEUnbucketOp::create(b, loc, moe.getType(),
                                     exchange(b, loc, back), bucket.getSlots());
    moe.replaceAllUsesWith(sum.getResult());
    moe.erase();
    return success();
  }
};

/// Ops that read a sequence's other tokens and have no rule above: running
/// them on a segment alone would be silently wrong.
/// Whether `op` reads `fn`'s input named cu_seqlens.
bool readsSequences(Operation *op, func::FuncOp fn) {
  StringAttr key = K3Dialect::NameAttrHelper(fn.getContext()).getName();
  for (Value v : op->getOperands()) {
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg || arg.getOwner() != &fn.getBody().front())
      continue;
    auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), key);
    if (name && name == "cu_seqlens")
      return true;
  }
  return false;
}

LogicalResult refuseOtherMixers(func::FuncOp fn) {
  WalkResult r = fn.walk([&](Operation *op) {
    if (isa<KDAOp, ShortConvOp, LatentAttentionOp>(op) ||
        !readsSequences(op, fn))
      return WalkResult::advance();
    op->emitOpError() << "mixes the tokens of a sequence and has no "
                         "context-parallel form yet (k3-partition-context "
                         "splits k3.kda, k3.short_conv and "
                         "k3.latent_attention; docs/scaling.md)";
    return WalkResult::interrupt();
  });
  return failure(r.wasInterrupted());
}

struct K3PartitionContextPass
    : impl::K3PartitionContextBase<K3PartitionContextPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (cp < 1 || cp > 64) {
      module.emitError() << "k3-partition-context: cp must be in [1, 64], got "
                         << int64_t(cp);
      return signalPassFailure();
    }
    if (cp == 1)
      return;
    auto fn = module.lookupSymbol<func::FuncOp>(entry);
    if (!fn || fn.isExternal()) {
      module.emitError() << "k3-partition-context: no entry '" << entry << "'";
      return signalPassFailure();
    }
    if (failed(refuseOtherMixers(fn)))
      return signalPassFailure();
    ContextSplit split(fn, cp);
    SmallVector<Operation *> mixers;
    fn.walk([&](Operation *op) {
      if (isa<KDAOp, ShortConvOp, LatentAttentionOp>(op))
        mixers.push_back(op);
    });
    for (Operation *op : mixers) {
      LogicalResult done =
          TypeSwitch<Operation *, LogicalResult>(op)
              .Case<KDAOp, ShortConvOp, LatentAttentionOp>(
                  [&](auto mixer) { return split.split(mixer); });
      if (failed(done))
        return signalPassFailure();
    }
    if (experts && failed(splitAllExperts(module, fn)))
      return signalPassFailure();
    if (failed(verify(module)))
      signalPassFailure();
  }

  /// The prefill's experts by all-to-all; the other entries' (decode: every
  /// rank holds the same tokens) by their rank's pairs and an all-reduce.
  LogicalResult splitAllExperts(ModuleOp module, func::FuncOp prefill) {
    if (maxTokens < 1)
      return module.emitError()
             << "k3-partition-context: experts needs max-tokens (the size "
                "of a rank's buckets)";
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      SmallVector<MoEExpertsOp> moes;
      fn.walk([&](MoEExpertsOp m) { moes.push_back(m); });
      if (moes.empty())
        continue;
      ContextSplit split(fn, cp);
      for (MoEExpertsOp moe : moes) {
        LogicalResult done = fn == prefill
                                 ? split.splitExperts(moe, maxTokens, maxSeqs)
                                 : splitExpertsOverReplicatedTokens(
                                       moe, split.rank, cp, kContextParallel);
        if (failed(done))
          return failure();
      }
    }
    return success();
  }
};

} // namespace
} // namespace mlir::k3
