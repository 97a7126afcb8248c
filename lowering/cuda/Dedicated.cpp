//===- Dedicated.cpp - choose a dedicated CUDA kernel -----------*- C++ -*-===//
#include "lowering/cuda/CUDAKernels.h"

#include <cstdlib>
#include <string_view>

using namespace mlir;
using namespace mlir::k3;

FailureOr<bool> mlir::k3::emitDedicatedCUDAKernel(Operation *op,
                                                  gpu::GPUFuncOp fn,
                                                  KernelBuilder &kb,
                                                  ArrayRef<KernelOperand> inputs,
                                                  ArrayRef<KernelOperand> outputs) {
  if (auto kda = dyn_cast<KDAOp>(op)) {
    // The single-kernel tensor-core form (KDAChunkMMA.cpp) only on request
    // (K3_KDA_CUDA_KERNEL=fused, for comparisons): the split form
    // (k3-kda-mma-split) is the default for the shapes both cover.
    const char *pick = std::getenv("K3_KDA_CUDA_KERNEL");
    if (pick && std::string_view(pick) == "fused") {
      FailureOr<bool> chunked = emitKDAChunkMMACUDA(kda, fn, kb, inputs, outputs);
      if (failed(chunked) || *chunked)
        return chunked;
    }
    return emitKDARecurrentCUDA(kda, fn, kb, inputs, outputs);
  }
  if (auto ops = dyn_cast<KDAMMAOperandsOp>(op))
    return emitKDAMMAOperandsCUDA(ops, fn, kb, inputs, outputs);
  if (auto rec = dyn_cast<KDAMMARecurrenceOp>(op))
    return emitKDAMMARecurrenceCUDA(rec, fn, kb, inputs, outputs);
  // Every other op uses its distributed loop nest.
  return false;
}
