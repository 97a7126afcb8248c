//===- GPUDistribute.h - loop nests to GPU threads --------------*- C++ -*-===//
#ifndef K3_LOWERING_GPUDISTRIBUTE_H
#define K3_LOWERING_GPUDISTRIBUTE_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

namespace mlir::k3 {

/// Blocks per SM of a grid-stride kernel whose iteration count the compiler
/// cannot tell: the grid is this many times the device's SM count (read off
/// the device at run time).
constexpr int64_t kGridStrideBlocksPerSM = 8;

/// Turns the kernel `fn`, whose work is a sequence of top-level
/// `scf.parallel` loops, into one kernel per loop ("phase": consecutive
/// loops may depend on each other, and only a new launch orders them on a
/// GPU). In each phase the loop's iterations are spread over all threads of
/// the grid by a grid-stride loop, so any grid size is correct; each phase
/// gets its #k3.launch_shape: `blockThreads` threads per block, and one
/// iteration per thread when the iteration count is linear in one runtime
/// size (`k3.extent`), else kGridStrideBlocksPerSM blocks per SM. Returns
/// the phases in order; the first is `fn` itself. Inner loops stay
/// sequential in each thread.
SmallVector<gpu::GPUFuncOp> distributeOverThreads(gpu::GPUFuncOp fn,
                                                  int64_t blockThreads);

} // namespace mlir::k3

#endif // K3_LOWERING_GPUDISTRIBUTE_H
