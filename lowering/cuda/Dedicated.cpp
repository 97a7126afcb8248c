//===- Dedicated.cpp - choose a dedicated CUDA kernel -----------*- C++ -*-===//
#include "lowering/cuda/CUDAKernels.h"

using namespace mlir;
using namespace mlir::k3;

FailureOr<bool> mlir::k3::emitDedicatedCUDAKernel(Operation *op,
                                                  gpu::GPUFuncOp fn,
                                                  KernelBuilder &kb,
                                                  ArrayRef<KernelOperand> inputs,
                                                  ArrayRef<KernelOperand> outputs) {
  if (auto kda = dyn_cast<KDAOp>(op))
    return emitKDARecurrentCUDA(kda, fn, kb, inputs, outputs);
  // Every other op uses its distributed loop nest.
  return false;
}
