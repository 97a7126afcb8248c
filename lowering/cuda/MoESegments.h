//===- MoESegments.h - a grouped kernel's row tile and its expert -*- C++ -*-=//
//
// The grouped MoE kernels (MoEGroupedKernel.h, MoEGroupedGEMV.cpp) run one
// block per tile of `tileRows` sorted rows of one expert's segment, from
// k3.moe_dispatch's tables: a block finds its expert from its tile index in
// the tile offsets, all of its threads at once.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_MOESEGMENTS_H
#define K3_LOWERING_CUDA_MOESEGMENTS_H

#include "lowering/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <functional>

namespace mlir::k3 {

/// A row tile of the sorted rows: its expert, its first sorted row and how
/// many of its `tileRows` rows exist; in a slot (storeSegmentSlot) a fourth
/// field, `extra`, that a kernel may use (0 if unset).
struct SegmentTile {
  Value expert, rowStart, validRows, extra = {};
};

/// A row tile found by a whole block, and whether it exists.
struct BlockSegmentTile : SegmentTile {
  /// tile < tile_offsets[E] (block-uniform): only then are the others set.
  Value live;
};

/// One expert's entries of the tables: its tiles [firstTile, endTile) and
/// sorted rows [firstRow, endRow); `inRange` false for a thread's expert
/// index past E (its loads are clamped to expert E - 1).
struct SegmentEntry {
  Value expert, inRange, firstTile, endTile, firstRow, endRow;
};

/// Thread `tid`'s entries of experts tid, tid + threads, ..., every load
/// issued before any is used.
inline SmallVector<SegmentEntry>
loadSegmentEntries(KernelBuilder &kb, Value offsets, Value tileOffsets,
                   int64_t experts, Value tid, int64_t threads) {
  SmallVector<SegmentEntry> entries;
  for (int64_t first = 0; first < experts; first += threads) {
    SegmentEntry n;
    n.expert = kb.addi(tid, kb.idx(first));
    n.inRange = kb.lti(n.expert, kb.idx(experts));
    Value e = kb.minsi(n.expert, kb.idx(experts - 1));
    Value next = kb.addi(e, kb.idx(1));
    n.firstTile = kb.loadIndex(tileOffsets, {e});
    n.endTile = kb.loadIndex(tileOffsets, {next});
    n.firstRow = kb.loadIndex(offsets, {e});
    n.endRow = kb.loadIndex(offsets, {next});
    entries.push_back(n);
  }
  return entries;
}

/// A row tile's (expert, first row, rows, extra) as 4 i32 of a shared memref at
/// `at` (a multiple of 4, 16-byte aligned): one vector store and one vector
/// load, so that LLVM keeps the slots one array.
inline void storeSegmentSlot(KernelBuilder &kb, const SegmentTile &s,
                             Value slots, Value at) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  SmallVector<Value> fields;
  for (Value v :
       {s.expert, s.rowStart, s.validRows, s.extra ? s.extra : kb.idx(0)})
    fields.push_back(arith::IndexCastOp::create(b, loc, b.getI32Type(), v));
  Value packed = vector::FromElementsOp::create(
      b, loc, VectorType::get({4}, b.getI32Type()), fields);
  vector::StoreOp::create(b, loc, packed, slots, ValueRange{at})
      .setAlignment(16);
}
inline SegmentTile loadSegmentSlot(KernelBuilder &kb, Value slots, Value at) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  auto packed = vector::LoadOp::create(
      b, loc, VectorType::get({4}, b.getI32Type()), slots, ValueRange{at});
  packed.setAlignment(16);
  auto field = [&](int64_t i) {
    Value v = vector::ExtractOp::create(b, loc, packed, i);
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), v).getResult();
  };
  return {field(0), field(1), field(2), field(3)};
}

/// Tile `tile` of the tables `offsets` and `tileOffsets` ([E + 1] each):
/// its expert e is the one with tile_offsets[e] <= tile < tile_offsets[e +
/// 1], its rows [offsets[e] + tileRows (tile - tile_offsets[e]),
/// offsets[e + 1]) capped at tileRows. Found by the whole block at once
/// (`threads` threads, this one `tid`): thread t loads the tables' entries
/// of experts t, t + threads, ... and tile_offsets[E] (loadSegmentEntries),
/// so the block waits one memory round trip before its first operand load
/// where a binary search waited floor(log2 E) + 2 dependent ones (Nsight
/// Compute on the grouped down GEMM at T = 8192 had 35 % of its stall
/// cycles on global loads; measured: decode steps 1.6 % faster, the
/// prefill unchanged, bench/results/e2e-checks/
/// moe-tile-search-ab-nvidia-h200-20261204T1812Z.txt). The one expert
/// whose tiles hold `tile` (experts without rows have none) writes its
/// expert, first row and rows to `slots` at `slotAt` (storeSegmentSlot);
/// `barrier` (a block
/// barrier by default) publishes them, so every thread that it
/// synchronises must call this. A warp-specialised kernel's producer
/// warpgroup finds its tiles alone: `threads` 128 and a named barrier over
/// them. `place`, where given, computes the slot from the holding
/// expert's entries instead (a cluster pair's tile, MoEGroupedPersistent.cpp,
/// whose rows are not tile `tile`'s own).
inline BlockSegmentTile locateSegmentTileInBlock(
    KernelBuilder &kb, Value offsets, Value tileOffsets, int64_t experts,
    Value tile, int64_t tileRows, Value tid, int64_t threads, Value slots,
    Value slotAt = Value(), const std::function<void()> &barrier = {},
    const std::function<SegmentTile(const SegmentEntry &)> &place = {}) {
  if (!slotAt)
    slotAt = kb.idx(0);
  Value total = kb.loadIndex(tileOffsets, {kb.idx(experts)});
  for (const SegmentEntry &n :
       loadSegmentEntries(kb, offsets, tileOffsets, experts, tid, threads)) {
    Value holds = kb.andi(
        n.inRange, kb.andi(kb.gei(tile, n.firstTile), kb.lti(tile, n.endTile)));
    kb.ifThen(holds, [&] {
      if (place)
        return storeSegmentSlot(kb, place(n), slots, slotAt);
      Value rowStart = kb.addi(
          n.firstRow, kb.muli(kb.subi(tile, n.firstTile), kb.idx(tileRows)));
      Value rows = kb.minsi(kb.subi(n.endRow, rowStart), kb.idx(tileRows));
      storeSegmentSlot(kb, {n.expert, rowStart, rows}, slots, slotAt);
    });
  }
  if (barrier)
    barrier();
  else
    gpu::BarrierOp::create(kb.builder(), kb.getLoc());
  BlockSegmentTile s;
  static_cast<SegmentTile &>(s) = loadSegmentSlot(kb, slots, slotAt);
  s.live = kb.lti(tile, total);
  return s;
}

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_MOESEGMENTS_H
