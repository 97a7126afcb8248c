//===- CUDAKernels.h - kernels written for the GPU's structure --*- C++ -*-===//
//
// Most kernels reach the GPU as loop nests spread over threads
// (GPUDistribute.h). Ops whose speed depends on the GPU's structure (tensor
// cores, shared memory, warp cooperation) get a dedicated emitter here that
// builds the whole gpu.func body and states its launch shape.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_CUDAKERNELS_H
#define K3_LOWERING_CUDA_CUDAKERNELS_H

#include "dialects/K3/K3Dialect.h"
#include "lowering/KernelBuilder.h"
#include "lowering/KernelPatterns.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <string>

namespace mlir::k3 {

/// Attributes a dedicated kernel sets on its gpu.func:
///  - `k3.launch_grid`: [symbol, a, b, c], grid.x = ceil_div(a * symbol + b, c)
///    (symbol kNumTokens, kNumSeqs, or 0 for a constant a * 0 + b);
///  - `k3.launch_block`: [x, y, z];
///  - `k3.launch_smem`: dynamic shared memory bytes (optional).
constexpr llvm::StringLiteral kLaunchGridAttr = "k3.launch_grid";
constexpr llvm::StringLiteral kLaunchBlockAttr = "k3.launch_block";
constexpr llvm::StringLiteral kLaunchSmemAttr = "k3.launch_smem";

/// Tuning of the dedicated kernels, read off each op's #k3.kernel_config by
/// its pattern (Patterns.cpp); the rules that choose and check the values
/// are in lowering/KernelConfigRules.cpp (reasoning and measurements in
/// docs/kda-cuda.md).
struct CUDAKernelOptions {
  /// Warps per block of the tensor-core KDA chain (16 value columns each):
  /// 1, 2, 4 or 8; 0 chooses from the shape and smCount.
  int64_t kdaMMAWarps = 0;
  /// Streaming multiprocessors of the target GPU (132: H100 SXM, H200),
  /// for shape-dependent defaults.
  int64_t smCount = 132;
  /// cp.async shared-memory stages of the chain, 2..4.
  int64_t kdaMMAStages = 3;
  /// Resident blocks per SM the KDA operand kernel's registers allow.
  int64_t kdaOperandsBlocksPerSM = 5;
  /// The recurrent KDA kernel's tile "BV,P[,S[,C]]"; empty: chosen from
  /// K and V.
  std::string kdaRecurrentTile;
  /// Outlining a decode entry (one token per sequence): the recurrent KDA
  /// kernel stages one token per chunk unless kdaRecurrentTile says
  /// otherwise (measured 2.2-3.0 TB/s against 1.7-2.1 with 16-token
  /// staging, docs/kda-cuda.md).
  bool decode = false;
  /// k3.linear: "generic" (the distributed loop nest) or "mma-3xtf32"
  /// (LinearMMA.cpp: tensor cores at f32 accuracy).
  std::string linearKernel = "generic";
};

/// The recurrent `k3.kda` with its state columns in registers
/// (KDARecurrent.cpp); false for shapes it does not cover.
FailureOr<bool> emitKDARecurrentCUDA(KDAOp op, gpu::GPUFuncOp fn,
                                     KernelBuilder &kb,
                                     ArrayRef<KernelOperand> inputs,
                                     ArrayRef<KernelOperand> outputs,
                                     const CUDAKernelOptions &options);

/// The two halves of the tensor-core KDA (KDAMMAOperands.cpp,
/// KDAMMARecurrence.cpp): these ops exist only for the CUDA target.
FailureOr<bool> emitKDAMMAOperandsCUDA(KDAMMAOperandsOp op, gpu::GPUFuncOp fn,
                                       KernelBuilder &kb,
                                       ArrayRef<KernelOperand> inputs,
                                       ArrayRef<KernelOperand> outputs,
                                       const CUDAKernelOptions &options);
FailureOr<bool> emitKDAMMARecurrenceCUDA(KDAMMARecurrenceOp op,
                                         gpu::GPUFuncOp fn, KernelBuilder &kb,
                                         ArrayRef<KernelOperand> inputs,
                                         ArrayRef<KernelOperand> outputs,
                                         const CUDAKernelOptions &options);

/// k3.linear on the tensor cores with the 3xTF32 split (LinearMMA.cpp);
/// false for shapes it does not cover.
FailureOr<bool> emitLinearMMACUDA(LinearOp op, gpu::GPUFuncOp fn,
                                  KernelBuilder &kb,
                                  ArrayRef<KernelOperand> inputs,
                                  ArrayRef<KernelOperand> outputs,
                                  const CUDAKernelOptions &options);

/// k3.linear with TMA and wgmma (LinearWGMMA.cpp).
void populateLinearWGMMAPattern(KernelPatternSet &patterns);

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_CUDAKERNELS_H
