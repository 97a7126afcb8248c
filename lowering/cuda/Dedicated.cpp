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
    const char *force = std::getenv("K3_KDA_CUDA_KERNEL");
    if (!force || std::string_view(force) != "recurrent") {
      FailureOr<bool> chunked = emitKDAChunkMMACUDA(kda, fn, kb, inputs, outputs);
      if (failed(chunked) || *chunked)
        return chunked;
    }
    return emitKDARecurrentCUDA(kda, fn, kb, inputs, outputs);
  }
  // Every other op uses its distributed loop nest.
  return false;
}
