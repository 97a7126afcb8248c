//===- SharedResultTile.h - a consumer's result tile ------------*- C++ -*-===//
//
// A consumer warpgroup's 64 x `columns` bf16 results in shared memory, for
// the persistent wgmma schedules' epilogue through TMA stores
// (LinearWGMMA.cpp, MoEGroupedPersistent.cpp): 64 x 64 boxes in the
// 128-byte swizzle, written by the warpgroup's threads, published to the
// async proxy, and stored by its thread 0 as one bulk group that runs on
// while the next tile multiplies.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_SHAREDRESULTTILE_H
#define K3_LOWERING_CUDA_SHAREDRESULTTILE_H

#include "lowering/cuda/MMA.h"
#include "lowering/cuda/WGMMA.h"

namespace mlir::k3 {

/// The first of the consumers' named barriers over their result tiles (one
/// each: 3 and 4; WGMMAPipeline's consumers use 1, a grouped kernel's
/// producer 2).
constexpr int32_t kSharedTileBarrier = 3;

class SharedResultTile {
public:
  /// Consumer `consumer`'s tile (thread `t` of its 128): the consumers'
  /// tiles follow one another from byte `first` of `smem` (after the
  /// stages).
  SharedResultTile(WGMMAEmitter &em, Value smem, Value first, Value consumer,
                   Value t, int64_t columns);

  /// Bytes of one consumer's tile.
  static int64_t bytes(int64_t columns) { return 64 * columns * 2; }

  /// Before the threads write: thread 0 waits until the last tile's stores
  /// have read the tile, then the consumer's barrier.
  void acquire();
  /// Row `row` (of 64), columns from `col` (a vector of bf16 that stays in
  /// one 16-byte chunk).
  void write(Value row, Value col, Value v);
  Value read(VectorType type, Value row, Value col);
  /// The threads' writes made visible to the async proxy and to the
  /// consumer's threads.
  void publish();
  /// Thread 0's TMA stores of every box through `map` at (`column`, `row`)
  /// of the result, as one bulk group.
  void store(Value map, Value column, Value row);
  /// Before the block exits: thread 0 (t = 0) waits until every store
  /// completed.
  static void drain(WGMMAEmitter &em, Value t);

private:
  /// The element offset of (row, col): box col / 64, its 16-byte chunk
  /// XOR row % 8 (a warp's 8 rows of 4 lanes land on 32 distinct banks).
  Value at(Value row, Value col);
  void barrier();

  WGMMAEmitter &em;
  MMAEmitter mma;
  Value smem, offset, consumer, lead, tile;
  int64_t columns;
};

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_SHAREDRESULTTILE_H
