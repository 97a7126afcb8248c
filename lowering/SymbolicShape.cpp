//===- SymbolicShape.cpp - shapes in terms of the runtime sizes -*- C++ -*-===//
#include "lowering/SymbolicShape.h"

#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::k3;

std::string mlir::k3::symShapeToString(ArrayRef<int64_t> shape) {
  std::string s;
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (i)
      s += "x";
    if (d == kNumTokens)
      s += "T";
    else if (d == kNumSeqs)
      s += "N";
    else if (d == kNumSeqsPlus1)
      s += "N1";
    else
      s += std::to_string(d);
  }
  return s;
}

int64_t mlir::k3::evalSymDim(int64_t dim, int64_t numTokens, int64_t numSeqs) {
  switch (dim) {
  case kNumTokens:
    return numTokens;
  case kNumSeqs:
    return numSeqs;
  case kNumSeqsPlus1:
    return numSeqs + 1;
  default:
    return dim;
  }
}

int64_t mlir::k3::evalSymNumElements(ArrayRef<int64_t> shape, int64_t numTokens,
                                     int64_t numSeqs) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= evalSymDim(d, numTokens, numSeqs);
  return n;
}

const SymShape &SymbolicShapes::lookup(Value v) const {
  auto it = shapes.find(v);
  assert(it != shapes.end() && "value not analysed");
  return it->second;
}

std::optional<int64_t> SymbolicShapes::lookupIndex(Value v) const {
  auto it = indices.find(v);
  if (it == indices.end())
    return std::nullopt;
  return it->second;
}

LogicalResult SymbolicShapes::set(Value v, SymShape shape, Operation *where) {
  auto type = cast<RankedTensorType>(v.getType());
  if ((int64_t)shape.size() != type.getRank())
    return where->emitOpError() << "internal: symbolic rank mismatch";
  // The type's static sizes win; a dynamic size must have been resolved.
  for (auto [i, d] : llvm::enumerate(shape)) {
    if (!type.isDynamicDim(i)) {
      d = type.getDimSize(i);
      continue;
    }
    if (d == ShapedType::kDynamic)
      return where->emitOpError()
             << "cannot express dimension " << i << " of result type " << type
             << " in terms of num_tokens and num_seqs";
  }
  shapes[v] = std::move(shape);
  return success();
}

/// Shape with the static sizes of `type` and `fill` elsewhere.
static SymShape fromType(Type t, int64_t fill = ShapedType::kDynamic) {
  auto type = cast<RankedTensorType>(t);
  SymShape s;
  for (int64_t d : type.getShape())
    s.push_back(ShapedType::isDynamic(d) ? fill : d);
  return s;
}

LogicalResult SymbolicShapes::analyze(func::FuncOp fn) {
  for (BlockArgument arg : fn.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type)
      return fn.emitOpError()
             << "model argument " << arg.getArgNumber() << " must be a tensor";
    MLIRContext *ctx = fn.getContext();
    auto name = fn.getArgAttrOfType<StringAttr>(
        arg.getArgNumber(), K3Dialect::NameAttrHelper(ctx).getName());
    int64_t sym = ShapedType::kDynamic;
    if (name && name.getValue() == "token_ids")
      sym = kNumTokens;
    else if (name && name.getValue() == "cu_seqlens")
      sym = kNumSeqsPlus1;
    else if (name && name.getValue() == "context_lens")
      sym = kNumSeqs;
    else if (auto dims = fn.getArgAttrOfType<DenseI64ArrayAttr>(
                 arg.getArgNumber(),
                 K3Dialect::DimsAttrHelper(ctx).getName())) {
      // Explicit symbolic shape (kernel-level test models): -1 = T, -2 = N,
      // -3 = N + 1, as OutlineKernels records them.
      if ((int64_t)dims.size() != type.getRank())
        return fn.emitOpError() << "k3.dims of argument " << arg.getArgNumber()
                                << " has the wrong rank";
      if (failed(set(arg, SymShape(dims.asArrayRef()), fn)))
        return failure();
      continue;
    } else if (!type.hasStaticShape())
      return fn.emitOpError()
             << "dynamic model argument " << arg.getArgNumber()
             << " needs k3.name = \"token_ids\", \"cu_seqlens\" or "
                "\"context_lens\"";
    if (failed(set(arg, fromType(type, sym), fn)))
      return failure();
  }
  for (Operation &op : fn.getBody().front())
    if (failed(visit(&op)))
      return failure();
  return success();
}

LogicalResult SymbolicShapes::visit(Operation *op) {
  auto same = [&](Value result, Value from) {
    return set(result, lookup(from), op);
  };
  // Result shape: the leading `n` dims of `from` followed by the type's.
  auto leading = [&](Value result, Value from, unsigned n) {
    SymShape s = fromType(result.getType());
    for (unsigned i = 0; i < n; ++i)
      s[i] = lookup(from)[i];
    return set(result, s, op);
  };
  // Per-sequence results: N, or the batch size without cu_seqlens.
  auto perSeq = [&](Value result, Value cuSeqlens, Value batchFrom) {
    SymShape s = fromType(result.getType());
    s[0] = cuSeqlens ? int64_t(kNumSeqs) : lookup(batchFrom)[0];
    if (s[0] == kNumTokens)
      s[0] = kNumSeqs; // one token per sequence (decode without cu_seqlens)
    return set(result, s, op);
  };

  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case<arith::ConstantIndexOp>([&](auto c) -> LogicalResult {
        indices[c] = c.value();
        return success();
      })
      .Case<arith::ConstantOp>([&](auto c) -> LogicalResult {
        if (auto i = dyn_cast<IntegerAttr>(c.getValue()))
          if (c.getType().isIndex())
            indices[c] = i.getInt();
        return success();
      })
      .Case<tensor::DimOp>([&](tensor::DimOp d) -> LogicalResult {
        auto idx = lookupIndex(d.getIndex());
        if (!idx || !contains(d.getSource()))
          return d.emitOpError() << "needs a constant index into an analysed "
                                    "tensor";
        indices[d] = lookup(d.getSource())[*idx];
        return success();
      })
      .Case<WeightOp>([&](WeightOp w) -> LogicalResult {
        return set(w, fromType(w.getType()), op);
      })
      .Case<StateReadOp>([&](StateReadOp r) -> LogicalResult {
        SymShape s = fromType(r.getType());
        s[0] = kNumSeqs;
        return set(r, s, op);
      })
      .Case<EmbeddingOp>([&](EmbeddingOp e) -> LogicalResult {
        return leading(e.getResult(), e.getIds(), 1);
      })
      .Case<RMSNormOp, PartialRMSNormOp, GatedRMSNormOp, KDAGateOp,
            SigmoidGateOp, AddOp>(
          [&](Operation *o) { return same(o->getResult(0), o->getOperand(0)); })
      .Case<LinearOp>([&](LinearOp l) -> LogicalResult {
        return leading(l.getResult(), l.getInput(),
                       cast<RankedTensorType>(l.getType()).getRank() - 1);
      })
      .Case<LinearGroupOp>([&](LinearGroupOp l) -> LogicalResult {
        int64_t lead = cast<RankedTensorType>(l.getInput().getType()).getRank();
        for (Value r : l.getResults())
          if (failed(leading(r, l.getInput(), lead - 1)))
            return failure();
        return success();
      })
      .Case<ShortConvOp>([&](ShortConvOp c) -> LogicalResult {
        if (failed(same(c.getResult(), c.getInput())))
          return failure();
        SymShape s = fromType(c.getFinalState().getType());
        s[0] = c.getCuSeqlens() ? int64_t(kNumSeqs) : int64_t(1);
        return set(c.getFinalState(), s, op);
      })
      .Case<ShortConvGroupOp>([&](ShortConvGroupOp c) -> LogicalResult {
        for (auto [r, x] : llvm::zip(c.getResults(), c.getInputs()))
          if (failed(same(r, x)))
            return failure();
        for (Value fs : c.getFinalStates()) {
          SymShape s = fromType(fs.getType());
          s[0] = int64_t(kNumSeqs);
          if (failed(set(fs, s, op)))
            return failure();
        }
        return success();
      })
      .Case<KDAOp>([&](KDAOp k) -> LogicalResult {
        if (failed(leading(k.getOutput(), k.getQ(), 3)))
          return failure();
        return perSeq(k.getFinalState(), k.getCuSeqlens(), k.getQ());
      })
      .Case<KDAContextInputsOp>([&](KDAContextInputsOp k) -> LogicalResult {
        if (failed(leading(k.getValues(), k.getV(), 3)))
          return failure();
        return perSeq(k.getInitialState(), k.getCuSeqlens(), k.getV());
      })
      .Case<KDAContextFoldOp>([&](KDAContextFoldOp k) -> LogicalResult {
        if (failed(leading(k.getOutput(), k.getSegmentOutput(), 3)))
          return failure();
        return perSeq(k.getFinalState(), k.getCuSeqlens(),
                      k.getSegmentOutput());
      })
      .Case<ShortConvTailOp>([&](ShortConvTailOp c) -> LogicalResult {
        SymShape s = fromType(c.getResult().getType());
        s[0] = int64_t(kNumSeqs);
        return set(c.getResult(), s, op);
      })
      .Case<ContextOffsetsOp>([&](ContextOffsetsOp c) {
        return same(c.getResult(), c.getContextLens());
      })
      .Case<LatentCacheSegmentOp>([&](LatentCacheSegmentOp c) {
        return same(c.getResult(), c.getLatentCache());
      })
      .Case<ShortConvContextFoldOp>(
          [&](ShortConvContextFoldOp c) -> LogicalResult {
            for (Value r : {c.getIncoming(), c.getFinalState()}) {
              SymShape s = fromType(r.getType());
              s[0] = int64_t(kNumSeqs);
              if (failed(set(r, s, op)))
                return failure();
            }
            return success();
          })
      .Case<CausalAttentionOp>([&](CausalAttentionOp a) -> LogicalResult {
        return leading(a.getResult(), a.getQ(), 2);
      })
      .Case<MLAPrefillAttentionOp>([&](MLAPrefillAttentionOp a) {
        return leading(a.getResult(), a.getQ(), 2);
      })
      .Case<LatentCacheAppendOp>([&](LatentCacheAppendOp a) {
        return same(a.getResult(), a.getCache());
      })
      .Case<LatentAttentionOp>([&](LatentAttentionOp a) -> LogicalResult {
        if (failed(leading(a.getResult(), a.getQ(), 2)))
          return failure();
        if (Value c = a.getLatentCache())
          return same(a.getLatentCacheOut(), c);
        return success();
      })
      .Case<GLUMLPOp, MoEExpertsOp>(
          [&](Operation *o) { return same(o->getResult(0), o->getOperand(0)); })
      .Case<MoERouterOp>([&](MoERouterOp r) -> LogicalResult {
        if (failed(leading(r.getIndices(), r.getInput(), 1)))
          return failure();
        return leading(r.getWeights(), r.getInput(), 1);
      })
      .Case<MoETopKOp>([&](MoETopKOp r) -> LogicalResult {
        if (failed(leading(r.getIndices(), r.getLogits(), 1)))
          return failure();
        return leading(r.getWeights(), r.getLogits(), 1);
      })
      .Case<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp>(
          [&](Operation *o) -> LogicalResult {
            // The input's shape with the dimensions the collective resizes
            // (static ones: the runtime's buffers are sized for them).
            Value in = o->getOperand(0), r = o->getResult(0);
            auto type = cast<RankedTensorType>(r.getType());
            SymShape s = lookup(in);
            auto inType = cast<RankedTensorType>(in.getType());
            for (int64_t d = 0; d < type.getRank(); ++d) {
              if (type.getDimSize(d) == inType.getDimSize(d))
                continue;
              if (type.isDynamicDim(d) || inType.isDynamicDim(d))
                return o->emitOpError()
                       << "resizes dynamic dimension " << d
                       << "; a partitioned model splits static ones";
              s[d] = type.getDimSize(d);
            }
            return set(r, s, op);
          })
      .Case<MoEDispatchOp>([&](MoEDispatchOp d) -> LogicalResult {
        if (failed(same(d.getRowSource(), d.getIndices())) ||
            failed(same(d.getPositions(), d.getIndices())) ||
            failed(set(d.getOffsets(), fromType(d.getOffsets().getType()), op)))
          return failure();
        return set(d.getTileOffsets(), fromType(d.getTileOffsets().getType()),
                   op);
      })
      .Case<MoEGroupedGLUOp, MoEGroupedDownOp>([&](Operation *o) {
        // [T, slots, width]: T from the input rows; the K routed slots (plus
        // the shared expert's) are static.
        return leading(o->getResult(0), o->getOperand(0), 1);
      })
      .Case<GLUGateUpOp>([&](GLUGateUpOp g) -> LogicalResult {
        return leading(g.getResult(), g.getInput(), 1);
      })
      .Case<MoEBucketOp>([&](MoEBucketOp b) -> LogicalResult {
        for (Value r : {b.getRows(), b.getIds(), b.getRowWeights()})
          if (failed(set(r, fromType(r.getType()), op)))
            return failure();
        return same(b.getSlots(), b.getIndices());
      })
      .Case<MoEUnbucketOp>([&](MoEUnbucketOp u) -> LogicalResult {
        return leading(u.getResult(), u.getSlots(), 1);
      })
      .Case<MoELocalIdsOp>([&](MoELocalIdsOp l) -> LogicalResult {
        return same(l.getResult(), l.getIndices());
      })
      .Case<MoECombineOp>([&](MoECombineOp c) -> LogicalResult {
        return leading(c.getResult(), c.getPositions(), 1);
      })
      .Case<MoECombineAddRMSNormOp>(
          [&](MoECombineAddRMSNormOp c) -> LogicalResult {
            if (failed(same(c.getSum(), c.getInput())))
              return failure();
            return same(c.getResult(), c.getInput());
          })
      .Case<AttnResMixOp>([&](AttnResMixOp m) -> LogicalResult {
        return same(m.getResult(), m.getPartial());
      })
      .Case<AttnResPushOp>([&](AttnResPushOp p) -> LogicalResult {
        SymShape s = lookup(p.getBlocks());
        if (s[0] < 0)
          return p.emitOpError() << "needs a constant number of closed blocks";
        s[0] += 1;
        s[1] = lookup(p.getPartial())[0];
        s[2] = lookup(p.getPartial())[1];
        return set(p, s, op);
      })
      .Case<LastTokensOp>([&](LastTokensOp l) -> LogicalResult {
        SymShape s = fromType(l.getType());
        s[0] = kNumSeqs;
        return set(l, s, op);
      })
      .Case<LastTokenContextOp>([&](LastTokenContextOp l) -> LogicalResult {
        if (failed(same(l.getLastContextLens(), l.getContextLens())))
          return failure();
        return same(l.getLastCuSeqlens(), l.getCuSeqlens());
      })
      .Case<AddRMSNormOp>([&](AddRMSNormOp a) -> LogicalResult {
        if (failed(same(a.getSum(), a.getInput())))
          return failure();
        return same(a.getResult(), a.getInput());
      })
      .Case<ArgmaxOp>([&](ArgmaxOp a) -> LogicalResult {
        return leading(a.getResult(), a.getLogits(), 1);
      })
      .Case<tensor::EmptyOp>([&](tensor::EmptyOp e) -> LogicalResult {
        SymShape s = fromType(e.getType());
        unsigned dyn = 0;
        for (auto [i, d] : llvm::enumerate(s))
          if (d == ShapedType::kDynamic) {
            auto v = lookupIndex(e.getDynamicSizes()[dyn++]);
            if (!v)
              return e.emitOpError() << "size must be a runtime size or a "
                                        "constant";
            d = *v;
          }
        return set(e, s, op);
      })
      .Case<tensor::CastOp>([&](tensor::CastOp c) -> LogicalResult {
        return same(c.getResult(), c.getSource());
      })
      .Case<tensor::ExpandShapeOp>(
          [&](tensor::ExpandShapeOp e) -> LogicalResult {
            SymShape s = fromType(e.getType());
            const SymShape &src = lookup(e.getSrc());
            for (auto [srcDim, group] :
                 llvm::enumerate(e.getReassociationIndices())) {
              for (int64_t d : group)
                if (s[d] == ShapedType::kDynamic)
                  s[d] = src[srcDim];
            }
            return set(e, s, op);
          })
      .Case<tensor::CollapseShapeOp>(
          [&](tensor::CollapseShapeOp c) -> LogicalResult {
            SymShape s = fromType(c.getType());
            const SymShape &src = lookup(c.getSrc());
            for (auto [dstDim, group] :
                 llvm::enumerate(c.getReassociationIndices())) {
              if (s[dstDim] != ShapedType::kDynamic)
                continue;
              int64_t sym = ShapedType::kDynamic;
              for (int64_t d : group) {
                if (src[d] < 0)
                  sym = src[d];
                else if (src[d] != 1)
                  return c.emitOpError() << "collapses a runtime size with a "
                                            "static size other than 1";
              }
              s[dstDim] = sym;
            }
            return set(c, s, op);
          })
      .Case<tensor::ExtractSliceOp>(
          [&](tensor::ExtractSliceOp e) -> LogicalResult {
            SymShape s;
            for (OpFoldResult ofr : e.getMixedSizes()) {
              if (auto a = dyn_cast<Attribute>(ofr)) {
                s.push_back(cast<IntegerAttr>(a).getInt());
                continue;
              }
              auto v = lookupIndex(cast<Value>(ofr));
              if (!v)
                return e.emitOpError()
                       << "slice sizes must be runtime sizes or "
                          "constants";
              s.push_back(*v);
            }
            if (s.size() != (size_t)e.getType().getRank())
              return e.emitOpError()
                     << "rank-reducing slices are not supported";
            return set(e, s, op);
          })
      .Case<tensor::ConcatOp>([&](tensor::ConcatOp c) -> LogicalResult {
        SymShape s = lookup(c.getInputs().front());
        uint64_t dim = c.getDim();
        if (s[dim] < 0)
          return c.emitOpError() << "concatenates along a runtime size";
        s[dim] = 0;
        for (Value in : c.getInputs()) {
          if (lookup(in)[dim] < 0)
            return c.emitOpError() << "concatenates along a runtime size";
          s[dim] += lookup(in)[dim];
        }
        return set(c, s, op);
      })
      // Chunkwise KDA (K3ChunkOps.td): token-indexed results follow their
      // first operand's [B, T, H]; per-sequence results are [N, ...].
      .Case<KDAChunkPrepareOp, KDAChunkGramOp, TriSolveOp, TriInverseOp,
            ChunkTrilMatmulOp, KDAChunkOutputOp>([&](Operation *o) {
        for (Value r : o->getResults())
          if (failed(leading(r, o->getOperand(0), 3)))
            return failure();
        return success();
      })
      .Case<KDAChunkStateOp>([&](KDAChunkStateOp s) -> LogicalResult {
        if (failed(leading(s.getVNew(), s.getU(), 3)) ||
            failed(leading(s.getOInter(), s.getU(), 3)))
          return failure();
        return perSeq(s.getFinalState(), s.getCuSeqlens(), s.getU());
      })
      .Case<KDASegmentSummaryOp>([&](KDASegmentSummaryOp s) -> LogicalResult {
        if (failed(perSeq(s.getTransition(), s.getCuSeqlens(), s.getU())))
          return failure();
        return perSeq(s.getContribution(), s.getCuSeqlens(), s.getU());
      })
      .Case<KDAMMAOperandsOp>([&](KDAMMAOperandsOp o) -> LogicalResult {
        return leading(o.getPacked(), o.getQ(), 3);
      })
      .Case<KDAMMARecurrenceOp>([&](KDAMMARecurrenceOp r) -> LogicalResult {
        if (failed(leading(r.getOutput(), r.getPacked(), 3)))
          return failure();
        return perSeq(r.getFinalState(), r.getCuSeqlens(), r.getPacked());
      })
      .Case<KDASegmentScanOp>([&](KDASegmentScanOp s) -> LogicalResult {
        return leading(s.getStarts(), s.getContribution(), 1);
      })
      .Case<StateWriteOp, func::ReturnOp>([](Operation *) { return success(); })
      .Default([&](Operation *o) -> LogicalResult {
        return o->emitOpError() << "is not supported in a K3 model function";
      });
}
