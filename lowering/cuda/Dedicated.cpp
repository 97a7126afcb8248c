//===- Dedicated.cpp - choose a dedicated CUDA kernel -----------*- C++ -*-===//
#include "lowering/cuda/CUDAKernels.h"

using namespace mlir;
using namespace mlir::k3;

FailureOr<bool> mlir::k3::emitDedicatedCUDAKernel(Operation *op,
                                                  gpu::GPUFuncOp fn,
                                                  KernelBuilder &kb,
                                                  ArrayRef<KernelOperand> inputs,
                                                  ArrayRef<KernelOperand> outputs) {
  // k3.kda that k3-kda-mma-split left (or kda=recurrent): the recurrent
  // kernel.
  if (auto kda = dyn_cast<KDAOp>(op))
    return emitKDARecurrentCUDA(kda, fn, kb, inputs, outputs);
  if (auto ops = dyn_cast<KDAMMAOperandsOp>(op))
    return emitKDAMMAOperandsCUDA(ops, fn, kb, inputs, outputs);
  if (auto rec = dyn_cast<KDAMMARecurrenceOp>(op))
    return emitKDAMMARecurrenceCUDA(rec, fn, kb, inputs, outputs);
  // Every other op uses its distributed loop nest.
  return false;
}
