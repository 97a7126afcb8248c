//===- MoESegments.h - a grouped kernel's row tile and its expert -*- C++ -*-=//
//
// The grouped MoE kernels (MoEGroupedWGMMA.cpp, MoEGroupedGEMV.cpp) run one
// block per tile of `tileRows` sorted rows of one expert's segment, from
// k3.moe_dispatch's tables: a block finds its expert from its tile index by
// a binary search over the tile offsets.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_MOESEGMENTS_H
#define K3_LOWERING_CUDA_MOESEGMENTS_H

#include "lowering/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

namespace mlir::k3 {

/// A row tile of the sorted rows: its expert, its first sorted row and how
/// many of its `tileRows` rows exist.
struct SegmentTile {
  Value expert, rowStart, validRows;
};

/// Tile `tile` (below tile_offsets[E]) of the tables `offsets` and
/// `tileOffsets` ([E + 1] each): its expert is the last e with
/// tile_offsets[e] <= tile (experts without rows share their successor's
/// offset and are passed over: floor(log2 E) + 1 halvings), its rows
/// [offsets[e] + tileRows (tile - tile_offsets[e]), offsets[e + 1]) capped
/// at tileRows.
inline SegmentTile locateSegmentTile(KernelBuilder &kb, Value offsets,
                                     Value tileOffsets, int64_t experts,
                                     Value tile, int64_t tileRows) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  Value lo = kb.idx(0), hi = kb.idx(experts);
  for (int64_t span = experts; span > 0; span /= 2) {
    Value mid = arith::DivUIOp::create(b, loc, kb.addi(lo, hi), kb.idx(2));
    Value le = kb.gei(tile, kb.loadIndex(tileOffsets, {mid}));
    lo = kb.select(le, mid, lo);
    hi = kb.select(le, hi, mid);
  }
  SegmentTile s;
  s.expert = lo;
  Value firstTile = kb.loadIndex(tileOffsets, {lo});
  s.rowStart = kb.addi(kb.loadIndex(offsets, {lo}),
                       kb.muli(kb.subi(tile, firstTile), kb.idx(tileRows)));
  Value end = kb.loadIndex(offsets, {kb.addi(lo, kb.idx(1))});
  s.validRows = kb.minsi(kb.subi(end, s.rowStart), kb.idx(tileRows));
  return s;
}

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_MOESEGMENTS_H
