//===- GPUDistribute.h - loop nests to GPU threads --------------*- C++ -*-===//
#ifndef K3_LOWERING_GPUDISTRIBUTE_H
#define K3_LOWERING_GPUDISTRIBUTE_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace mlir::k3 {

/// Threads per block of distributed kernels.
constexpr int64_t kGPUBlockSize = 256;

/// Turns the kernel `fn`, whose work is a sequence of top-level
/// `scf.parallel` loops, into one kernel per loop ("phase": consecutive
/// loops may depend on each other, and only a new launch orders them on a
/// GPU). In each phase the loop's iterations are spread over all threads of
/// the grid by a grid-stride loop, so any grid size is correct; the phase
/// carries `k3.grid` ([symbol, a, b]: a * symbol + b iterations) when the
/// count is linear in one runtime size. Returns the phases in order; the
/// first is `fn` itself. Inner loops stay sequential in each thread.
SmallVector<gpu::GPUFuncOp> distributeOverThreads(gpu::GPUFuncOp fn);

} // namespace mlir::k3

#endif // K3_LOWERING_GPUDISTRIBUTE_H
