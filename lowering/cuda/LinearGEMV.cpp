//===- LinearGEMV.cpp - k3.linear for a few tokens, at bandwidth -------===//
//
// y[t, o] = sum_i x[t, i] w[o, i] when the token count is small (decode
// steps, short prompts): the time is the weight bytes over the memory
// bandwidth, so the kernel reads each weight once per TT tokens, 16 bytes
// per lane per load, and nothing else is worth optimising (config kernel
// `linear_gemv`, tile [R, TT]).
//
// A warp owns R consecutive output rows and TT consecutive tokens. Lane l
// walks the row's K in 16-byte vectors, l, l + 32, ...: the warp reads 512
// contiguous bytes per row and step (coalesced), up to 4 steps' loads in
// flight per iteration (a constant trip count), multiplies each weight
// vector with the same columns of its TT tokens (x is small and stays in
// L1/L2), and keeps R x TT f32 partial sums; a butterfly of shuffles sums
// them over the warp and lane 0 stores them. Tokens past the last one read
// the last token again (a clamped index, no divergence) and are not
// stored. Blocks: `warps` warps on consecutive row groups; the grid is
// ceil(T / TT) token tiles x ceil(N / (warps R)) row tiles, linear in T.
//
// Tile [R, TT, S]: S warps of a block share one group of R rows, each
// over a slice of K's whole steps (the last one also takes K's partial
// step); lane 0 of each keeps its sums in shared memory and, after a
// barrier, the group's first warp adds the S partials in slice order and
// stores them: S times the warps, and so the loads in flight, of one warp
// per row group, for narrow GEMVs (a tuning option: on the whole decode
// step it was slower, KernelConfigRules.cpp's defaultGEMVTile).
//
// k3.linear_group (k3-group-linears) is the same grid over its weights'
// rows one after another: a warp's R rows lie in one weight (R divides
// each N), and a warp-uniform branch picks it.
//
// Covered: f32, bf16 or f16 weights and inputs, K a multiple of the
// 16-byte vector (8 bf16 / 4 f32 elements), N a multiple of R; any T.
// Tile R = 16 (bf16 weights and inputs) multiplies on the tensor cores
// instead (LinearGEMVMMA.cpp).
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/GEMVSegments.h"
#include "lowering/cuda/LaneDots.h"
#include "lowering/cuda/MMA.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The kernel body, step by step.
class GEMVKernel {
public:
  GEMVKernel(const KernelEmission &e, Value rows, LinearGEMVTile tile)
      : kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb}, fn(e.fn),
        rows(rows), tile(tile), nIn(e.inputs[1].shape[1]) {
    x = em.contiguousView(e.inputs[0].base, {rows, kb.idx(nIn)});
    segments = gemvSegments(em, e, rows);
    nOut = segments.back().first + segments.back().n;
    vec = linearGEMVVectorElements(
        cast<MemRefType>(segments[0].w.getType()).getElementType());
  }

  void emit() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value lane = em.remu(tid, 32), warp = em.divu(tid, 32);
    const int64_t rowTiles = linearGEMVRowTiles(nOut, tile);
    const int64_t slices = tile.slices, groups = tile.warps / slices;
    t0 = kb.muli(em.divu(bid, rowTiles), kb.idx(tile.tokens));
    // Warps g S .. g S + S - 1 share row group g, each a slice of K.
    Value slice = em.remu(warp, slices), g = em.divu(warp, slices);
    Value group = kb.addi(kb.muli(em.remu(bid, rowTiles), kb.idx(groups)), g);
    n0 = kb.muli(group, kb.idx(tile.rows));
    Value live = kb.lti(t0, rows);
    Value partials;
    if (slices > 1)
      partials = em.workgroupArray(fn, b.getF32Type(),
                                   tile.warps * tile.rows * tile.tokens);
    // Warp-uniform: a warp past the last tokens, or past its segment's
    // rows, has nothing to do (R divides every segment: no warp straddles
    // two).
    kb.ifThen(live, [&] {
      forSegments([&](const GEMVSegment &s, Value r0) {
        SmallVector<Value> sums = accumulate(s, r0, lane, slice);
        for (Value &v : sums)
          v = em.warpSum(v);
        if (slices == 1)
          store(s, r0, lane, sums);
        else
          keepPartials(partials, warp, lane, sums);
      });
    });
    if (slices == 1)
      return;
    // Every thread reaches the barrier; slice 0 adds the slices' sums in
    // slice order (the same result on every run) and stores them.
    gpu::BarrierOp::create(b, loc);
    kb.ifThen(kb.andi(live, kb.eqi(slice, kb.idx(0))), [&] {
      forSegments([&](const GEMVSegment &s, Value r0) {
        store(s, r0, lane, gatherPartials(partials, g));
      });
    });
  }

private:
  /// The token of slot `t` of this tile, clamped to the last token.
  Value token(int64_t t) {
    return kb.minsi(kb.addi(t0, kb.idx(t)), kb.subi(rows, kb.idx(1)));
  }

  /// Runs `body(segment, first row in it)` in the segment of the warp's
  /// rows.
  void forSegments(function_ref<void(const GEMVSegment &, Value)> body) {
    forGEMVSegment(kb, segments, n0, body);
  }

  /// The lane's R x TT partial sums of rows r0.. of `s` over its slice of
  /// K (LaneDots.h); the last slice takes K's partial step.
  SmallVector<Value> accumulate(const GEMVSegment &s, Value r0, Value lane,
                                Value slice) {
    SmallVector<ViewRow> weights, xs;
    for (int64_t r = 0; r < tile.rows; ++r)
      weights.push_back({s.w, {kb.addi(r0, kb.idx(r))}});
    for (int64_t t = 0; t < tile.tokens; ++t)
      xs.push_back({x, {token(t)}});
    if (tile.slices == 1)
      return laneDotProducts(em, weights, xs, nIn, vec, lane);
    int64_t steps = nIn / (32 * vec) / tile.slices;
    LaneDotSlice part{kb.muli(slice, kb.idx(steps)), steps,
                      kb.eqi(slice, kb.idx(tile.slices - 1))};
    return laneDotProducts(em, weights, xs, nIn, vec, lane, part);
  }

  /// Lane 0 keeps the warp's sums in shared memory, R x TT per warp.
  void keepPartials(Value partials, Value warp, Value lane,
                    ArrayRef<Value> sums) {
    kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
      Value base = kb.muli(warp, kb.idx(sums.size()));
      for (auto [i, v] : llvm::enumerate(sums))
        kb.store(v, partials, {kb.addi(base, kb.idx(i))});
    });
  }

  /// Row group g's sums: its S warps' partials added in slice order.
  SmallVector<Value> gatherPartials(Value partials, Value g) {
    const int64_t n = tile.rows * tile.tokens;
    Value base = kb.muli(g, kb.idx(tile.slices * n));
    SmallVector<Value> sums;
    for (int64_t i = 0; i < n; ++i) {
      Value acc = kb.load(partials, {kb.addi(base, kb.idx(i))});
      for (int64_t k = 1; k < tile.slices; ++k)
        acc =
            kb.add(acc, kb.load(partials, {kb.addi(base, kb.idx(k * n + i))}));
      sums.push_back(acc);
    }
    return sums;
  }

  /// Lane 0 writes the warp's sums of the tokens that exist.
  void store(const GEMVSegment &s, Value r0, Value lane, ArrayRef<Value> sums) {
    kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
      for (int64_t t = 0; t < tile.tokens; ++t) {
        Value tok = kb.addi(t0, kb.idx(t));
        kb.ifThen(kb.lti(tok, rows), [&] {
          for (int64_t r = 0; r < tile.rows; ++r)
            kb.store(sums[r * tile.tokens + t], s.y,
                     {tok, kb.addi(r0, kb.idx(r))});
        });
      }
    });
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  FunctionOpInterface fn;
  Value rows;
  LinearGEMVTile tile;
  int64_t nOut = 0, nIn, vec = 8;
  SmallVector<GEMVSegment> segments;
  Value x, t0, n0;
};

/// k3.linear and k3.linear_group: the GEMV over their weights' rows.
template <typename OpTy> struct LinearGEMVPattern : OpKernelPattern<OpTy> {
  LinearGEMVPattern() : OpKernelPattern<OpTy>(KernelKind::linear_gemv) {}
  LogicalResult emit(OpTy op, typename OpKernelPattern<OpTy>::Adaptor,
                     KernelEmission &e) const override {
    KernelBuilder &kb = e.kb;
    // Rows: every leading dimension of x, as one linear size.
    Value rows =
        kb.numElements(ArrayRef<int64_t>(e.inputs[0].shape).drop_back());
    auto form = kb.linearForm(rows);
    if (!form)
      return op.emitOpError() << "linear_gemv needs a row count linear in "
                                 "one runtime size";
    LinearGEMVTile tile = linearGEMVTile(e.config);
    int64_t nOut = 0;
    for (size_t i = 0; i < e.outputs.size(); ++i)
      nOut += e.inputs[1 + i].shape[0];
    const int64_t rowTiles = linearGEMVRowTiles(nOut, tile);
    // ceil(rows / TT) token tiles x rowTiles row tiles.
    e.setLaunch(*form, rowTiles, (tile.tokens - 1) * rowTiles, tile.tokens,
                {32 * tile.warps, 1, 1});
    if (tile.rows == kGEMVMMARows)
      emitLinearGEMVMMA(e, rows, tile);
    else
      GEMVKernel(e, rows, tile).emit();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateLinearGEMVPattern(KernelPatternSet &patterns) {
  patterns.add<LinearGEMVPattern<LinearOp>>();
  patterns.add<LinearGEMVPattern<LinearGroupOp>>();
}
