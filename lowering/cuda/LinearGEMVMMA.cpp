//===- LinearGEMVMMA.cpp - a bf16 GEMV of a few tokens, mma.sync -*- C++ -*-=//
//
// k3.linear and k3.linear_group for a few tokens with bf16 weights and
// inputs, config kernel `linear_gemv` with tile R = 16: the GEMV of
// LinearGEMV.cpp with its products on the tensor cores (WarpMMADots.h).
// The CUDA-core form spends a conversion and TT fused multiply-adds per
// weight element, for tokens of the tile that may not exist (a decode
// step at B = 1 computed its one token four times), and the instructions,
// not the bytes, bounded it at 29-47 % of the DRAM peak
// (bench/results/profile-gpu/ncu-kl48b-decode-B1-20261203T1242Z-f9d92c8.txt).
//
// A warp owns 16 consecutive output rows of one weight and the tile's TT
// tokens, in mma tiles of 8 (TT <= 16: one or two B fragments per step,
// each weight load used by both); lane (g, c) stores rows g and g + 8 of
// tokens 2 c and 2 c + 1 of each tile. Tile [16, TT, S]: S warps split K
// in whole steps of 32 columns (the last one also takes K's partial step)
// and add their fragments in shared memory in slice order
// (FragmentPartials), so that narrow weights (2304 outputs: 144 warps
// without a split) still have a few warps per SM with loads in flight.
// The grid is ceil(T / TT) token tiles x ceil(N / (16 warps / S)) row
// tiles, linear in T.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/GEMVSegments.h"
#include "lowering/cuda/WarpMMADots.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The kernel body, step by step.
class GEMVMMAKernel {
public:
  GEMVMMAKernel(const KernelEmission &e, Value rows, LinearGEMVTile tile)
      : kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb}, fn(e.fn),
        rows(rows), tile(tile), nIn(e.inputs[1].shape[1]),
        tiles((tile.tokens + 7) / 8) {
    x = em.contiguousView(e.inputs[0].base, {rows, kb.idx(nIn)});
    segments = gemvSegments(em, e, rows);
    nOut = segments.back().first + segments.back().n;
  }

  void emit() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value lane = em.remu(tid, 32), warp = em.divu(tid, 32);
    g = em.divu(lane, 4);
    c = em.remu(lane, 4);
    const int64_t rowTiles = linearGEMVRowTiles(nOut, tile);
    const int64_t slices = tile.slices, groups = tile.warps / slices;
    t0 = kb.muli(em.divu(bid, rowTiles), kb.idx(tile.tokens));
    Value slice = em.remu(warp, slices), group = em.divu(warp, slices);
    n0 =
        kb.muli(kb.addi(kb.muli(em.remu(bid, rowTiles), kb.idx(groups)), group),
                kb.idx(16));
    live = kb.lti(t0, rows);
    if (slices > 1)
      partials.emplace(em, fn, tile.warps, tiles);
    if (tiles == 1)
      return emitTiles(1, lane, warp, slice, group);
    // A block of at most 8 tokens (the one block at T <= 8, the last one
    // where T mod 16 is 1-8) multiplies one mma tile of them: the TT = 16
    // kernel then issues what the TT = 8 one does for a decode step of a
    // few sequences, and a block of 9-16 tokens reads each weight once.
    // The branch is uniform per block.
    Value few = kb.lti(kb.subi(rows, t0), kb.idx(9));
    auto branch = scf::IfOp::create(b, loc, TypeRange{}, few,
                                    /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    emitTiles(1, lane, warp, slice, group);
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    emitTiles(tiles, lane, warp, slice, group);
  }

private:
  /// The products of `used` 8-token mma tiles of the block's tokens, and
  /// their stores (through the K split's partials where S > 1).
  void emitTiles(int64_t used, Value lane, Value warp, Value slice,
                 Value group) {
    const int64_t slices = tile.slices;
    // Warp-uniform: a warp past its segment's rows has nothing to do (16
    // divides every segment).
    kb.ifThen(live, [&] {
      forSegments([&](const GEMVSegment &s, Value r0) {
        SmallVector<Acc> d = products(s, r0, lane, slice, used);
        if (slices == 1)
          store(s, r0, d);
        else
          partials->keep(warp, lane, d);
      });
    });
    if (slices == 1)
      return;
    gpu::BarrierOp::create(b, loc);
    kb.ifThen(kb.andi(live, kb.eqi(slice, kb.idx(0))), [&] {
      forSegments([&](const GEMVSegment &s, Value r0) {
        store(s, r0, partials->gather(group, slices, lane, used));
      });
    });
  }

  void forSegments(function_ref<void(const GEMVSegment &, Value)> body) {
    forGEMVSegment(kb, segments, n0, body);
  }

  /// Slot `i` of the tile: whether it is a token, and its row (clamped).
  std::pair<Value, Value> slotToken(Value i) {
    Value tok = kb.addi(t0, i);
    Value valid = kb.andi(kb.lti(tok, rows), kb.lti(i, kb.idx(tile.tokens)));
    return {valid, kb.minsi(tok, kb.subi(rows, kb.idx(1)))};
  }

  SmallVector<Acc> products(const GEMVSegment &s, Value r0, Value lane,
                            Value slice, int64_t used) {
    MMALaneRows w;
    for (int64_t r = 0; r < 2; ++r)
      w.rows[r] = {s.w, {kb.addi(r0, kb.addi(g, kb.idx(8 * r)))}};
    SmallVector<MMALaneToken> toks;
    for (int64_t j = 0; j < used; ++j) {
      auto [valid, row] = slotToken(kb.addi(g, kb.idx(8 * j)));
      toks.push_back({{x, {row}}, valid});
    }
    if (tile.slices == 1)
      return warpMMAProducts(em, {w}, toks, nIn, lane);
    int64_t steps = mmaWholeSteps(nIn) / tile.slices;
    MMASlice part{kb.muli(slice, kb.idx(steps)), steps,
                  kb.eqi(slice, kb.idx(tile.slices - 1))};
    return warpMMAProducts(em, {w}, toks, nIn, lane, part);
  }

  /// Lane (g, c): rows g and g + 8 of tokens 2 c and 2 c + 1 of each
  /// tile, where they exist.
  void store(const GEMVSegment &s, Value r0, ArrayRef<Acc> d) {
    for (int64_t j = 0; j < int64_t(d.size()); ++j)
      for (int64_t t = 0; t < 2; ++t) {
        Value i = kb.addi(kb.muli(c, kb.idx(2)), kb.idx(8 * j + t));
        auto [valid, tok] = slotToken(i);
        kb.ifThen(valid, [&] {
          for (int64_t r = 0; r < 2; ++r)
            kb.store(d[j][2 * r + t], s.y,
                     {tok, kb.addi(r0, kb.addi(g, kb.idx(8 * r)))});
        });
      }
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  FunctionOpInterface fn;
  Value rows;
  LinearGEMVTile tile;
  int64_t nOut = 0, nIn, tiles;
  SmallVector<GEMVSegment> segments;
  Value x, t0, n0, g, c, live;
  std::optional<FragmentPartials> partials;
};

} // namespace

void mlir::k3::emitLinearGEMVMMA(const KernelEmission &e, Value rows,
                                 const LinearGEMVTile &tile) {
  GEMVMMAKernel(e, rows, tile).emit();
}
