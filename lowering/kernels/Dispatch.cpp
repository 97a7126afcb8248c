//===- Dispatch.cpp - choose the kernel emitter of an op --------*- C++ -*-===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::k3;

LogicalResult mlir::k3::emitKernelBody(Operation *op, KernelBuilder &kb, In in,
                                       Out out) {
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](EmbeddingOp o) { return emitEmbedding(o, kb, in, out); })
      .Case([&](LinearOp o) { return emitLinear(o, kb, in, out); })
      .Case([&](LinearGroupOp o) { return emitLinearGroup(o, kb, in, out); })
      .Case([&](RMSNormOp o) { return emitRMSNorm(o, kb, in, out); })
      .Case([&](GatedRMSNormOp o) { return emitGatedRMSNorm(o, kb, in, out); })
      .Case([&](AddOp o) { return emitAdd(o, kb, in, out); })
      .Case([&](LastTokensOp o) { return emitLastTokens(o, kb, in, out); })
      .Case([&](LastTokenContextOp o) {
        return emitLastTokenContext(o, kb, in, out);
      })
      .Case([&](AddRMSNormOp o) { return emitAddRMSNorm(o, kb, in, out); })
      .Case([&](PartialRMSNormOp o) {
        return emitPartialRMSNorm(o, kb, in, out);
      })
      .Case([&](SigmoidGateOp o) { return emitSigmoidGate(o, kb, in, out); })
      .Case([&](ArgmaxOp o) { return emitArgmax(o, kb, in, out); })
      .Case([&](AttnResPushOp o) { return emitAttnResPush(o, kb, in, out); })
      .Case([&](AttnResMixOp o) { return emitAttnResMix(o, kb, in, out); })
      .Case([&](tensor::ExtractSliceOp o) {
        return emitExtractSlice(o, kb, in, out);
      })
      .Case([&](tensor::ConcatOp o) { return emitConcat(o, kb, in, out); })
      .Case([&](StateWriteOp o) {
        return emitCopy(kb, operandsOf(o, in).getValue(), out[0]);
      })
      .Case([&](ShortConvOp o) { return emitShortConv(o, kb, in, out); })
      .Case([&](ShortConvGroupOp o) {
        return emitShortConvGroup(o, kb, in, out);
      })
      .Case([&](KDAGateOp o) { return emitKDAGate(o, kb, in, out); })
      .Case([&](KDAOp o) { return emitKDARecurrent(o, kb, in, out); })
      .Case([&](KDAContextInputsOp o) {
        return emitKDAContextInputs(o, kb, in, out);
      })
      .Case([&](KDAContextFoldOp o) {
        return emitKDAContextFold(o, kb, in, out);
      })
      .Case([&](ShortConvContextFoldOp o) {
        return emitShortConvContextFold(o, kb, in, out);
      })
      .Case(
          [&](ShortConvTailOp o) { return emitShortConvTail(o, kb, in, out); })
      .Case([&](ContextOffsetsOp o) {
        return emitContextOffsets(o, kb, in, out);
      })
      .Case([&](LatentCacheSegmentOp o) {
        return emitLatentCacheSegment(o, kb, in, out);
      })
      .Case([&](KDAChunkPrepareOp o) {
        return emitKDAChunkPrepare(o, kb, in, out);
      })
      .Case([&](KDAChunkGramOp o) { return emitKDAChunkGram(o, kb, in, out); })
      .Case([&](TriSolveOp o) { return emitTriSolve(o, kb, in, out); })
      .Case([&](TriInverseOp o) { return emitTriInverse(o, kb, in, out); })
      .Case([&](ChunkTrilMatmulOp o) {
        return emitChunkTrilMatmul(o, kb, in, out);
      })
      .Case(
          [&](KDAChunkStateOp o) { return emitKDAChunkState(o, kb, in, out); })
      .Case([&](KDAChunkOutputOp o) {
        return emitKDAChunkOutput(o, kb, in, out);
      })
      .Case([&](KDASegmentSummaryOp o) {
        return emitKDASegmentSummary(o, kb, in, out);
      })
      .Case([&](KDASegmentScanOp o) {
        return emitKDASegmentScan(o, kb, in, out);
      })
      .Case([&](CausalAttentionOp o) {
        return emitCausalAttention(o, kb, in, out);
      })
      .Case([&](LatentAttentionOp o) {
        return emitLatentAttention(o, kb, in, out);
      })
      .Case([&](MLAPrefillAttentionOp o) {
        return emitMLAPrefillAttention(o, kb, in, out);
      })
      .Case([&](LatentCacheAppendOp o) {
        return emitLatentCacheAppend(o, kb, in, out);
      })
      .Case([&](GLUMLPOp o) { return emitGLUMLP(o, kb, in, out); })
      .Case([&](GLUGateUpOp o) { return emitGLUGateUp(o, kb, in, out); })
      .Case([&](MoERouterOp o) { return emitMoERouter(o, kb, in, out); })
      .Case([&](MoETopKOp o) { return emitMoETopK(o, kb, in, out); })
      .Case([&](MoEExpertsOp o) { return emitMoEExperts(o, kb, in, out); })
      .Case([&](MoEDispatchOp o) { return emitMoEDispatch(o, kb, in, out); })
      .Case(
          [&](MoEGroupedGLUOp o) { return emitMoEGroupedGLU(o, kb, in, out); })
      .Case([&](MoEGroupedDownOp o) {
        return emitMoEGroupedDown(o, kb, in, out);
      })
      .Case([&](MoECombineOp o) { return emitMoECombine(o, kb, in, out); })
      .Case([&](MoECombineAddRMSNormOp o) {
        return emitMoECombineAddRMSNorm(o, kb, in, out);
      })
      .Case([&](MoELocalIdsOp o) { return emitMoELocalIds(o, kb, in, out); })
      .Case([&](MoEBucketOp o) { return emitMoEBucket(o, kb, in, out); })
      .Case([&](MoEUnbucketOp o) { return emitMoEUnbucket(o, kb, in, out); })
      .Case<KDAMMAOperandsOp, KDAMMARecurrenceOp>([&](Operation *o) {
        return o->emitOpError()
               << "has only a CUDA kernel (k3-kda-mma-split is part of the "
                  "target=cuda pipeline)";
      })
      .Default([&](Operation *o) {
        return o->emitOpError() << "has no kernel generator";
      });
}

std::pair<Value, Value> mlir::k3::emitSequenceOf(KernelBuilder &kb,
                                                 Value cuSeqlens, Value t) {
  SmallVector<Value> r = kb.reduceN(
      kb.idx(0), kb.seqs(), {kb.idx(0), kb.idx(0)},
      [&](Value n, ValueRange acc) -> SmallVector<Value> {
        Value start = kb.loadIndex(cuSeqlens, {n});
        Value inside = kb.gei(t, start);
        return {kb.select(inside, start, acc[0]), kb.select(inside, n, acc[1])};
      });
  return {r[0], r[1]};
}
