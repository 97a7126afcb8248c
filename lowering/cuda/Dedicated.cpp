//===- Dedicated.cpp - choose a dedicated CUDA kernel -----------*- C++ -*-===//
#include "lowering/cuda/CUDAKernels.h"

#include <cstdio>

using namespace mlir;
using namespace mlir::k3;

FailureOr<bool> mlir::k3::emitDedicatedCUDAKernel(
    Operation *op, gpu::GPUFuncOp fn, KernelBuilder &kb,
    ArrayRef<KernelOperand> inputs, ArrayRef<KernelOperand> outputs,
    const CUDAKernelOptions &options) {
  // k3.kda that k3-kda-mma-split left (or kda=recurrent): the recurrent
  // kernel.
  if (auto kda = dyn_cast<KDAOp>(op))
    return emitKDARecurrentCUDA(kda, fn, kb, inputs, outputs, options);
  if (auto ops = dyn_cast<KDAMMAOperandsOp>(op))
    return emitKDAMMAOperandsCUDA(ops, fn, kb, inputs, outputs, options);
  if (auto rec = dyn_cast<KDAMMARecurrenceOp>(op))
    return emitKDAMMARecurrenceCUDA(rec, fn, kb, inputs, outputs, options);
  if (auto lin = dyn_cast<LinearOp>(op))
    if (options.linearKernel == "mma-3xtf32")
      return emitLinearMMACUDA(lin, fn, kb, inputs, outputs, options);
  // Every other op uses its distributed loop nest.
  return false;
}

LogicalResult CUDAKernelOptions::verify(Operation *where) const {
  if (kdaMMAWarps != 0 && kdaMMAWarps != 1 && kdaMMAWarps != 2 &&
      kdaMMAWarps != 4 && kdaMMAWarps != 8)
    return where->emitError() << "cuda-kda-mma-warps must be 0 (from the "
                                 "shape), 1, 2, 4 or 8, got "
                              << kdaMMAWarps;
  if (smCount < 1 || smCount > 1024)
    return where->emitError()
           << "cuda-sm-count must be in [1, 1024], got " << smCount;
  if (kdaMMAStages < 2 || kdaMMAStages > 4)
    return where->emitError()
           << "cuda-kda-mma-stages must be in [2, 4], got " << kdaMMAStages;
  if (kdaOperandsBlocksPerSM < 1 || kdaOperandsBlocksPerSM > 16)
    return where->emitError()
           << "cuda-kda-operands-blocks-per-sm must be in [1, 16], got "
           << kdaOperandsBlocksPerSM;
  if (linearKernel != "generic" && linearKernel != "mma-3xtf32")
    return where->emitError() << "cuda-linear must be generic or mma-3xtf32, "
                                 "got '"
                              << linearKernel << "'";
  if (!kdaRecurrentTile.empty()) {
    long bv = 0, p = 0, sz = 0, c = 0;
    char tail = 0;
    int got = std::sscanf(kdaRecurrentTile.c_str(), "%ld,%ld,%ld,%ld%c", &bv,
                          &p, &sz, &c, &tail);
    if (got < 2 || got > 4 || bv <= 0 || p <= 0 || (got >= 3 && sz <= 0) ||
        (got == 4 && c != 1 && c != 4))
      return where->emitError()
             << "cuda-kda-recurrent-tile must be \"BV,P[,S[,C]]\" with "
                "positive BV, P, S and C in {1, 4}, got '"
             << kdaRecurrentTile << "'";
  }
  return success();
}
