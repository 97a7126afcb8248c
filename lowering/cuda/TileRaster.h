//===- TileRaster.h - the order of a GEMM's output tiles --------*- C++ -*-===//
//
// Which output tile (row tile, column tile) the i-th block, or the i-th
// step of a persistent block, of a Hopper GEMM computes. Blocks become
// resident in the order of their index, so this order decides what the
// blocks resident at once share in L2:
//
// - row-major (a row tile's column tiles first): the resident blocks hold
//   a few row tiles of x and stream all of W. Where W is larger than L2
//   (an LM head's 163840 rows, K3's q/k/v at 12288 x 7168) each wave of
//   row tiles reads W from DRAM again: at T = 8192 an LM head of 2.35 GB
//   read 64 times.
// - grouped (Triton's GROUP_M): consecutive tiles walk `group` row tiles,
//   then the next column tile, so a wave holds a band of `group` row tiles
//   over a few column tiles: W is read once per band, and the band's rows
//   (group x 128 x K bf16: 29 MB at K = 7168, group 16) stay in L2 while
//   it streams.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_TILERASTER_H
#define K3_LOWERING_CUDA_TILERASTER_H

#include "lowering/cuda/WGMMA.h"

namespace mlir::k3 {

/// A tile's place in the grid of output tiles, in tiles.
struct TileCoordinates {
  Value rowTile, columnTile;
};

/// Row tiles of `tileRows` rows over `rows` rows: ceil(rows / tileRows).
inline Value rowTilesOf(WGMMAEmitter &em, Value rows, int64_t tileRows) {
  return em.divuIdx(em.kb.addi(rows, em.idx(tileRows - 1)), tileRows);
}

/// Tile `tile` of `rowTiles` (a runtime count) x `columnTiles`, in bands of
/// `group` row tiles (`group` <= 1: row-major). A tile at or past rowTiles x
/// columnTiles gets a row tile >= rowTiles, so that the blocks a grid has
/// past the last row tile stay idle as they do row-major.
inline TileCoordinates rasterTile(WGMMAEmitter &em, Value tile, Value rowTiles,
                                  int64_t columnTiles, int64_t group) {
  KernelBuilder &kb = em.kb;
  if (group <= 1)
    return {em.divuIdx(tile, columnTiles), em.remuIdx(tile, columnTiles)};
  int64_t span = group * columnTiles;
  Value first = kb.muli(em.divuIdx(tile, span), em.idx(group));
  // The band's row tiles: `group`, fewer in the last band; at least one, so
  // that the division below is defined for tiles past the end.
  Value bandRows =
      kb.maxsi(kb.minsi(kb.subi(rowTiles, first), em.idx(group)), em.idx(1));
  Value local = em.remuIdx(tile, span);
  Value row = kb.addi(
      first, arith::RemUIOp::create(em.b, em.loc, local, bandRows).getResult());
  Value column =
      arith::DivUIOp::create(em.b, em.loc, local, bandRows).getResult();
  Value inside = kb.lti(tile, kb.muli(rowTiles, em.idx(columnTiles)));
  return {kb.select(inside, row, rowTiles), column};
}

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_TILERASTER_H
