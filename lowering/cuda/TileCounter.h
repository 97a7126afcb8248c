//===- TileCounter.h - a persistent kernel's claimed tiles ------*- C++ -*-===//
//
// The counter scheduler of persistent kernels (TileScheduler::counter): a
// block claims its next tile from a device-wide counter instead of taking
// tiles bid, bid + grid, ... With unequal tiles (a grouped GEMM's expert
// segments end in short tiles whose halves skip their products) strided
// blocks drift apart, and the tiles in flight spread over more experts'
// weights than L2 holds: on an H100 at T = 8192 the strided persistent
// gate/up GEMM moved 4.0 GB from DRAM where the block-per-tile kernel,
// whose resident blocks are always a window of the tile order, moved 2.9
// (bench/results/e2e-checks/
// ncu-moe-grouped-kimi-T8192-*-nvidia-h100-20261206T0900Z.txt). Claimed
// tiles keep that window.
//
// The counter is two i32 of a global in the kernel's module (zero when the
// module loads): [0] the next tile, [1] the blocks done. A block's last
// claim returns a tile past the end; it then counts itself done, and the
// last block to finish sets both back to zero for the kernel's next
// launch (launches of one kernel never overlap: a stream, or a graph's
// chain, orders them). A fence (membar.gl) between a block's last claim
// and its count, and before the reset, keeps every claim before the
// reset: NVPTX emits memref.atomic_rmw's atomics relaxed.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_TILECOUNTER_H
#define K3_LOWERING_CUDA_TILECOUNTER_H

#include "lowering/KernelBuilder.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

namespace mlir::k3 {

class TileCounter {
public:
  /// Declares the counter of kernel `fn` in its module.
  TileCounter(KernelBuilder &kb, FunctionOpInterface fn);

  /// The next unclaimed tile (one thread).
  Value claim();

  /// After the block's last claim (the same thread): counts the block
  /// done; the grid's last block resets the counter.
  void finish();

private:
  Value word(int64_t i, Value operand, arith::AtomicRMWKind kind);

  KernelBuilder &kb;
  memref::GlobalOp global;
};

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_TILECOUNTER_H
