//===- Kernels.h - kernel body emitters, one per op -------------*- C++ -*-===//
//
// `in` holds the op's tensor operands in order, `out` its results. Each
// emitter writes every element of every output. Emitters of k3 ops name
// their operands through the op's ODS adaptor (Operands.h: operandsOf) and
// the results of multi-result ops through its result accessors (resultOf).
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_KERNELS_KERNELS_H
#define K3_LOWERING_KERNELS_KERNELS_H

#include "dialects/K3/K3Dialect.h"
#include "lowering/KernelBuilder.h"
#include "lowering/KernelPatterns.h"
#include "lowering/kernels/WeightElements.h"

#include <functional>

#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::k3 {

using In = ArrayRef<KernelOperand>;
using Out = ArrayRef<KernelOperand>;

// Dense.cpp
LogicalResult emitEmbedding(EmbeddingOp, KernelBuilder &, In, Out);
LogicalResult emitLinear(LinearOp, KernelBuilder &, In, Out);
LogicalResult emitLinearGroup(LinearGroupOp, KernelBuilder &, In, Out);
LogicalResult emitRMSNorm(RMSNormOp, KernelBuilder &, In, Out);
LogicalResult emitGatedRMSNorm(GatedRMSNormOp, KernelBuilder &, In, Out);
LogicalResult emitAdd(AddOp, KernelBuilder &, In, Out);
LogicalResult emitSigmoidGate(SigmoidGateOp, KernelBuilder &, In, Out);
LogicalResult emitArgmax(ArgmaxOp, KernelBuilder &, In, Out);
/// Copies `src` to `dst` (the kernel of a state write).
LogicalResult emitCopy(KernelBuilder &, const KernelOperand &src,
                       const KernelOperand &dst);
LogicalResult emitAttnResPush(AttnResPushOp, KernelBuilder &, In, Out);
LogicalResult emitExtractSlice(tensor::ExtractSliceOp, KernelBuilder &, In,
                               Out);
LogicalResult emitConcat(tensor::ConcatOp, KernelBuilder &, In, Out);

// Fused.cpp (graph-level fusions, K3FusedOps.td)
LogicalResult emitLastTokens(LastTokensOp, KernelBuilder &, In, Out);
LogicalResult emitLastTokenContext(LastTokenContextOp, KernelBuilder &, In,
                                   Out);
LogicalResult emitAddRMSNorm(AddRMSNormOp, KernelBuilder &, In, Out);
LogicalResult emitPartialRMSNorm(PartialRMSNormOp, KernelBuilder &, In, Out);

// KDA.cpp
LogicalResult emitShortConv(ShortConvOp, KernelBuilder &, In, Out);
LogicalResult emitShortConvGroup(ShortConvGroupOp, KernelBuilder &, In, Out);
LogicalResult emitKDAGate(KDAGateOp, KernelBuilder &, In, Out);
LogicalResult emitKDARecurrent(KDAOp, KernelBuilder &, In, Out);
LogicalResult emitKDAContextInputs(KDAContextInputsOp, KernelBuilder &, In,
                                   Out);
LogicalResult emitKDAContextFold(KDAContextFoldOp, KernelBuilder &, In, Out);
LogicalResult emitShortConvContextFold(ShortConvContextFoldOp, KernelBuilder &,
                                       In, Out);
LogicalResult emitContextOffsets(ContextOffsetsOp, KernelBuilder &, In, Out);
LogicalResult emitShortConvTail(ShortConvTailOp, KernelBuilder &, In, Out);
LogicalResult emitLatentCacheSegment(LatentCacheSegmentOp, KernelBuilder &, In,
                                     Out);

// Chunk.cpp (the chunkwise KDA form, K3ChunkOps.td)
LogicalResult emitKDAChunkPrepare(KDAChunkPrepareOp, KernelBuilder &, In, Out);
LogicalResult emitKDAChunkGram(KDAChunkGramOp, KernelBuilder &, In, Out);
LogicalResult emitTriSolve(TriSolveOp, KernelBuilder &, In, Out);
LogicalResult emitTriInverse(TriInverseOp, KernelBuilder &, In, Out);
LogicalResult emitChunkTrilMatmul(ChunkTrilMatmulOp, KernelBuilder &, In, Out);
LogicalResult emitKDAChunkState(KDAChunkStateOp, KernelBuilder &, In, Out);
LogicalResult emitKDAChunkOutput(KDAChunkOutputOp, KernelBuilder &, In, Out);
LogicalResult emitKDASegmentSummary(KDASegmentSummaryOp, KernelBuilder &, In,
                                    Out);
LogicalResult emitKDASegmentScan(KDASegmentScanOp, KernelBuilder &, In, Out);

// Attention.cpp
LogicalResult emitCausalAttention(CausalAttentionOp, KernelBuilder &, In, Out);
LogicalResult emitMLAPrefillAttention(MLAPrefillAttentionOp, KernelBuilder &,
                                      In, Out);
LogicalResult emitLatentCacheAppend(LatentCacheAppendOp, KernelBuilder &, In,
                                    Out);
LogicalResult emitLatentAttention(LatentAttentionOp, KernelBuilder &, In, Out);

// MoE.cpp
LogicalResult emitGLUMLP(GLUMLPOp, KernelBuilder &, In, Out);
LogicalResult emitMoERouter(MoERouterOp, KernelBuilder &, In, Out);
LogicalResult emitMoETopK(MoETopKOp, KernelBuilder &, In, Out);
LogicalResult emitMoEExperts(MoEExpertsOp, KernelBuilder &, In, Out);
LogicalResult emitGLUGateUp(GLUGateUpOp, KernelBuilder &, In, Out);
LogicalResult emitMoEDispatch(MoEDispatchOp, KernelBuilder &, In, Out);
LogicalResult emitMoEGroupedGLU(MoEGroupedGLUOp, KernelBuilder &, In, Out);
LogicalResult emitMoEGroupedDown(MoEGroupedDownOp, KernelBuilder &, In, Out);
LogicalResult emitMoECombine(MoECombineOp, KernelBuilder &, In, Out);
LogicalResult emitMoECombineAddRMSNorm(MoECombineAddRMSNormOp, KernelBuilder &,
                                       In, Out);
// MoELocalIds.cpp
LogicalResult emitMoELocalIds(MoELocalIdsOp, KernelBuilder &, In, Out);
LogicalResult emitMoEBucket(MoEBucketOp, KernelBuilder &, In, Out);
LogicalResult emitMoEUnbucket(MoEUnbucketOp, KernelBuilder &, In, Out);
/// The gate and up projections of row `t` of `x` for intermediate channel
/// `i`, activated: act(W_gate[i] . x_t, W_up[i] . x_t); `expert` selects
/// the slice of stacked weights (or is null for plain 2-D weights).
Value emitGLUChannel(KernelBuilder &kb, GLUActivation act,
                     std::optional<double> beta, std::optional<double> lbeta,
                     Value x, Value t, const WeightElements &wGate,
                     const WeightElements &wUp, Value expert, Value i,
                     int64_t hidden);
/// sum_i W_down[d, i] h[hIdx..., i] over the `inter` channels (`expert`
/// selects the slice of stacked weights, or is null).
Value emitDownRow(KernelBuilder &kb, const WeightElements &wDown, Value expert,
                  Value d, Value h, ArrayRef<Value> hIdx, int64_t inter);
LogicalResult emitAttnResMix(AttnResMixOp, KernelBuilder &, In, Out);

/// Workspace the loop nest of `op` needs (MoE.cpp: the MLPs' activated
/// channels, the router's scores), given its operands' shapes.
SmallVector<KernelWorkspace> loopNestWorkspace(Operation *op,
                                               ArrayRef<SymShape> inShapes);

/// The GLU activation of gate `a` and up `u` (f32), shared by MLPs and
/// experts: SiLU(a) * u, or SiTU (K3-SPEC.md §4). `sigmoid`, where given,
/// replaces KernelBuilder::sigmoid (a GPU kernel's special-function-unit
/// form).
Value emitGLUActivation(KernelBuilder &kb, GLUActivation act,
                        std::optional<double> beta,
                        std::optional<double> linearBeta, Value a, Value u,
                        const std::function<Value(Value)> &sigmoid = {});

/// Log-decay of channel `i` of head `h` from the raw gate value `z`, in
/// either parametrisation of k3.kda_gate (K3-SPEC.md §2 step 2).
Value emitDecayGate(KernelBuilder &kb, DecayGateKind kind,
                    std::optional<double> lowerBound, Value aLog, Value dtBias,
                    Value h, Value i, Value headDim, Value z);

/// 1 / sqrt(|x[b, t, h, :]|^2 + 1e-6), the L2 normalisation of q and k.
Value emitInvL2Norm(KernelBuilder &kb, Value x, Value b, Value t, Value h,
                    Value headDim);

/// An optional f64 attribute as a std::optional.
inline std::optional<double> optionalDouble(FloatAttr a) {
  if (!a)
    return std::nullopt;
  return a.getValueAsDouble();
}

/// First token of the sequence that token `t` belongs to, and its index:
/// the largest n with cu_seqlens[n] <= t.
/// Softmax attention of one query over keys [start, stop): `score(s)` is
/// key s's scaled logit, `value(s, d)` channel d of its value. The weighted
/// sum is kept in f32 scratch (the result may be bf16), then `write(d, y)`
/// gets each channel divided by the weights' sum. Two passes over the keys
/// (the maximum, then the sums), as the oracle's softmax.
void emitSoftmaxRow(KernelBuilder &kb, Value start, Value stop, int64_t dv,
                    llvm::function_ref<Value(Value)> score,
                    llvm::function_ref<Value(Value, Value)> value,
                    llvm::function_ref<void(Value, Value)> write);

std::pair<Value, Value> emitSequenceOf(KernelBuilder &kb, Value cuSeqlens,
                                       Value t);

} // namespace mlir::k3

#endif // K3_LOWERING_KERNELS_KERNELS_H
