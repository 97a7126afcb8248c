//===- CUDAKernels.h - kernels written for the GPU's structure --*- C++ -*-===//
//
// Most kernels reach the GPU as loop nests spread over threads
// (GPUDistribute.h). Ops whose speed depends on the GPU's structure (tensor
// cores, shared memory, warp cooperation) get a dedicated emitter here that
// builds the whole gpu.func body from typed tile-level building blocks
// (MMA.h, nvgpu and k3gpu ops) and states its launch. Each reads its tuning
// from the op's #k3.kernel_config, which k3-select-kernel-config chose and
// checked (KernelConfigRules.cpp; reasoning and measurements in
// docs/kda-cuda.md). Patterns.cpp makes each a kernel pattern.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_CUDAKERNELS_H
#define K3_LOWERING_CUDA_CUDAKERNELS_H

#include "dialects/K3/K3Dialect.h"
#include "lowering/KernelBuilder.h"
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace mlir::k3 {

/// The recurrent `k3.kda` with its state columns in registers
/// (KDARecurrent.cpp; config kernel `kda_recurrent`, tile [BV, P, S, C]).
LogicalResult emitKDARecurrentCUDA(KDAOp op, const KernelEmission &e);

/// The two halves of the tensor-core KDA (KDAMMAOperands.cpp,
/// KDAMMARecurrence.cpp; kernels `kda_mma_operands`, `kda_mma_chain`).
LogicalResult emitKDAMMAOperandsCUDA(KDAMMAOperandsOp op,
                                     const KernelEmission &e);
LogicalResult emitKDAMMARecurrenceCUDA(KDAMMARecurrenceOp op,
                                       const KernelEmission &e);

/// k3.linear on the tensor cores with the 3xTF32 split (LinearMMA.cpp;
/// kernel `linear_mma_3xtf32`).
LogicalResult emitLinearMMACUDA(LinearOp op, const KernelEmission &e);

/// k3.linear with TMA and wgmma (LinearWGMMA.cpp).
void populateLinearWGMMAPattern(KernelPatternSet &patterns);
void populateLinearGEMVPattern(KernelPatternSet &patterns);
/// The GEMV's body with tile R = kGEMVMMARows: bf16 on the tensor cores
/// (LinearGEMVMMA.cpp); the caller sets the launch.
void emitLinearGEMVMMA(const KernelEmission &e, Value rows,
                       const LinearGEMVTile &tile);
void populateArgmaxRowsPattern(KernelPatternSet &patterns);
void populateLatentAttentionRowsPattern(KernelPatternSet &patterns);
void populateLatentAttentionSplitPattern(KernelPatternSet &patterns);
void populateRMSNormRowsPatterns(KernelPatternSet &patterns);
/// The grouped MoE ops (MoEDispatchRows.cpp, MoEGroupedWGMMA.cpp).
void populateMoEDispatchRowsPattern(KernelPatternSet &patterns);
/// k3.moe_combine, a block per token (MoECombineRows.cpp).
void populateMoECombineRowsPattern(KernelPatternSet &patterns);
void populateMoEGroupedWGMMAPatterns(KernelPatternSet &patterns);
/// The same ops and k3.glu_gate_up for a few tokens (MoEGroupedGEMV.cpp).
void populateMoEGroupedGEMVPatterns(KernelPatternSet &patterns);
/// k3.moe_router, a block per token (MoERouterRows.cpp).
void populateMoERouterRowsPattern(KernelPatternSet &patterns);
void populateShortConvRowsPattern(KernelPatternSet &patterns);
/// k3.mla_prefill_attention as flash attention with wgmma
/// (MLAFlashWGMMA.cpp).
void populateMLAFlashWGMMAPattern(KernelPatternSet &patterns);

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_CUDAKERNELS_H
