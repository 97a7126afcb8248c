//===- MoEGroupedGEMV.cpp - the MoE GEMMs of a few tokens -------*- C++ -*-===//
//
// k3.moe_grouped_glu and k3.moe_grouped_down for a decode step (config
// kernel `moe_grouped_gemv`), and k3.glu_gate_up, the shared expert's
// gate/up, in the same form (`glu_gemv`). A few tokens touch at most T K
// experts: the time is those experts' weight bytes over the memory
// bandwidth, so each touched expert's rows are read once per tile of TT
// sorted rows, 16 bytes per lane per load (LaneDots.h), and nothing else
// matters. The fused loop nest read them once per (token, slot), 2 bytes per
// lane per load: 0.65-1.8 TB/s at B = 1 and its reads grew with B
// (bench/results/profile-gpu/history/
// kl48b-decode-B1-20261202T1224Z-3d32040.txt).
//
// - Schedule: a block per (row tile, row group). Row tiles are
//   k3.moe_dispatch's tiles of TT rows (its tile_rows; the kernel's tile
//   [R, TT]); there are at most T K of them (each has a row), so the grid
//   is T K x ceil(N / (warps R)) blocks, linear in T; a block past the
//   last tile returns at once. The dense form has ceil(T / TT) row tiles.
// - A warp owns R consecutive output rows (gate/up: R channels of W1 and
//   the same R of W3) of the tile's expert and multiplies them with the
//   tile's TT rows: x gathered by token (row_source / K) for gate/up, h's
//   own sorted rows for down. Rows past the segment read its last row
//   again (a clamped index, no divergence) and are not stored.
// - A shared expert in the same launch (k3-fuse-shared-expert): ceil(T /
//   TT) more tiles before the routed ones (the grid grows to T (K + 1) row
//   tiles), each TT tokens of the dense form, written to rows T K + t with
//   weight one. The branch is block-uniform.
// - Lane 0 stores: gate/up act(gate, up) in h's type; down the routing
//   weight times the sum, in f32, for k3.moe_combine.
//
// Covered: f32, bf16 or f16 rows and weights, the reduction a multiple of
// the 16-byte vector, N a multiple of R. MXFP4 routed weights (f4E2M1FN)
// read only their packed bytes and multiply on the tensor cores: a warp's
// R = 16 rows of each weight by the tile's TT <= 8 tokens with mma.sync
// (MXFP4WarpMMA.h); each lane stores its fragment's outputs. bf16 rows
// and weights with tile R = 16 multiply on the tensor cores the same way
// (WarpMMADots.h; the shared expert's tiles too), and tile [16, TT, S]
// splits K over S warps of a block, added in shared memory in slice order.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/LaneDots.h"
#include "lowering/cuda/MMA.h"
#include "lowering/cuda/MXFP4Tile.h"
#include "lowering/cuda/MXFP4WarpMMA.h"
#include "lowering/cuda/MoESegments.h"
#include "lowering/cuda/WarpMMADots.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// What differs between the three ops.
struct GEMVForm {
  bool glu = true;    // gate/up with the GLU (else down)
  bool dense = false; // k3.glu_gate_up: one expert, every row
  KernelOperand rows; // x [T, D] (gathered by token) or h [T, K, I]
  KernelOperand indices, rowSource, offsets, tileOffsets; // routed forms
  SmallVector<KernelOperand> weights; // W1 and W3, or W2: [E,] N, K
  SmallVector<KernelOperand> shared;  // the shared expert's: N, K
  KernelOperand rowWeights;           // down: [T, K]
  KernelOperand result;               // h [T, (K,) I] or y [T, K, D]
  int64_t tileRows = 1;               // TT
  // The GLU of the gate/up form.
  GLUActivation act = GLUActivation::silu;
  std::optional<double> beta, linearBeta;
};

/// Which rows a block's tile covers.
enum class TileKind {
  Routed, // sorted rows of one expert's segment
  Dense,  // k3.glu_gate_up: TT tokens
  Shared, // the shared expert: TT tokens, rows T K + t
};

class GroupedGEMVKernel {
public:
  GroupedGEMVKernel(const GEMVForm &f, KernelEmission &e)
      : f(f), e(e), kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        tile(linearGEMVTile(e.config)) {
    tile.tokens = f.tileRows;
    const SymShape &w = f.weights[0].shape;
    nOut = w[w.size() - 2];
    nIn = w.back();
    mxfp4 = isa<Float4E2M1FNType>(f.weights[0].stored);
    mma = !mxfp4 && tile.rows == kGEMVMMARows;
    vec = linearGEMVVectorElements(f.weights[0].stored);
    if (!f.dense) {
      experts = f.offsets.shape[0] - 1;
      topK = f.indices.shape[1];
    }
  }

  LogicalResult emit(Operation *op) {
    if (mxfp4 && !f.shared.empty())
      return op->emitOpError() << "the grouped GEMV runs a shared expert "
                                  "beside float routed experts only";
    auto tokens = kb.linearForm(kb.dim(f.rows.shape[0]));
    if (!tokens)
      return op->emitOpError() << "the grouped GEMV needs a token count "
                                  "linear in one runtime size";
    const int64_t rowTiles = linearGEMVRowTiles(nOut, tile);
    // Routed: at most T K tiles (each has a row); a shared expert's
    // ceil(T / TT) <= T more.
    int64_t slots = topK + (f.shared.empty() ? 0 : 1);
    if (f.dense)
      e.setLaunch(*tokens, rowTiles, (f.tileRows - 1) * rowTiles, f.tileRows,
                  {32 * tile.warps, 1, 1});
    else
      e.setLaunch(*tokens, slots * rowTiles, 0, 1, {32 * tile.warps, 1, 1});
    makeViews();
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Value lane = em.remu(tid, 32);
    warp = em.divu(tid, 32);
    Value mTile = em.divu(bid, rowTiles);
    // Warps g S .. g S + S - 1 share row group g, each a slice of K (the
    // tensor-core form; S = 1 otherwise).
    slice = em.remu(warp, tile.slices);
    group = em.divu(warp, tile.slices);
    n0 = kb.muli(kb.addi(kb.muli(em.remu(bid, rowTiles),
                                 kb.idx(tile.warps / tile.slices)),
                         group),
                 kb.idx(tile.rows));
    if (tile.slices > 1)
      partials.emplace(em, e.fn, tile.warps, f.glu ? 2 : 1);
    // Block-uniform (the tile) and warp-uniform (the rows) conditions.
    Value rowsLive = kb.lti(n0, kb.idx(nOut));
    if (f.dense) {
      Value live = kb.lti(kb.muli(mTile, kb.idx(f.tileRows)), tokenCount);
      kb.ifThen(live,
                [&] { multiplyTile(TileKind::Dense, mTile, lane, rowsLive); });
      return success();
    }
    // The shared expert's ceil(T / TT) tiles come first: blocks start in
    // index order, and its tiles are the ones every token needs.
    Value sharedTiles = kb.idx(0);
    if (!f.shared.empty()) {
      sharedTiles =
          em.divu(kb.addi(tokenCount, kb.idx(f.tileRows - 1)), f.tileRows);
      kb.ifThen(kb.lti(mTile, sharedTiles),
                [&] { multiplyTile(TileKind::Shared, mTile, lane, rowsLive); });
    }
    Value tileSlots = em.workgroupArray(e.fn, b.getI32Type(), 4);
    kb.ifThen(kb.gei(mTile, sharedTiles), [&] {
      Value routedTile = kb.subi(mTile, sharedTiles);
      routed = locateSegmentTileInBlock(kb, f.offsets.full, f.tileOffsets.full,
                                        experts, routedTile, f.tileRows, tid,
                                        32 * tile.warps, tileSlots);
      kb.ifThen(routed.live, [&] {
        multiplyTile(TileKind::Routed, routedTile, lane, rowsLive);
      });
    });
    return success();
  }

private:
  /// The warp's R output rows of tile `mTile` (of kind `kind`) over its TT
  /// rows, where the warp has rows (`rowsLive`, warp-uniform). The branch
  /// on the tile is block-uniform: the split-K form's barrier is reached
  /// by every thread.
  void multiplyTile(TileKind kind, Value mTile, Value lane, Value rowsLive) {
    locate(kind, mTile);
    if (mma)
      return multiplyTileMMA(lane, rowsLive);
    kb.ifThen(rowsLive, [&] {
      if (mxfp4 && kind == TileKind::Routed)
        return storeFragments(mxfp4WarpProducts(em, mxfp4LaneRows(lane),
                                                laneToken(lane), nIn, lane),
                              lane);
      SmallVector<Value> sums =
          laneDotProducts(em, weightRows(), inputRows(), nIn, vec, lane);
      for (Value &s : sums)
        s = em.warpSum(s);
      kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] { store(sums); });
    });
  }

  /// bf16 on the tensor cores (WarpMMADots.h): 16 rows of each weight by
  /// the tile's TT <= 8 rows; with S > 1 the group's slices add their
  /// fragments in shared memory.
  void multiplyTileMMA(Value lane, Value rowsLive) {
    LaneToken t = laneToken(lane);
    SmallVector<MMALaneToken> token{{{t.x, {t.row}}, t.valid}};
    if (tile.slices == 1) {
      kb.ifThen(rowsLive, [&] {
        storeFragments(warpMMAProducts(em, mmaLaneRows(lane), token, nIn, lane),
                       lane);
      });
      return;
    }
    int64_t steps = mmaWholeSteps(nIn) / tile.slices;
    MMASlice part{kb.muli(slice, kb.idx(steps)), steps,
                  kb.eqi(slice, kb.idx(tile.slices - 1))};
    kb.ifThen(rowsLive, [&] {
      partials->keep(
          warp, lane,
          warpMMAProducts(em, mmaLaneRows(lane), token, nIn, lane, part));
    });
    gpu::BarrierOp::create(b, loc);
    kb.ifThen(kb.andi(rowsLive, kb.eqi(slice, kb.idx(0))), [&] {
      storeFragments(partials->gather(group, tile.slices, lane), lane);
    });
  }

  void makeViews() {
    tokenCount = kb.dim(f.rows.shape[0]);
    for (const KernelOperand &w : f.weights)
      weightViews.push_back(
          mxfp4 ? em.contiguousView(w.base, {kb.idx(mxfp4WeightBytes(w))})
                : em.contiguousView(w));
    for (const KernelOperand &w : f.shared)
      sharedViews.push_back(em.contiguousView(w));
    if (f.dense) {
      x = em.contiguousView(f.rows);
      out = em.contiguousView(f.result.base, {tokenCount, kb.idx(nOut)});
      return;
    }
    pairs = kb.numElements(f.indices.shape);
    rowSource = kb.view(f.rowSource.base, {pairs});
    // Gate/up gathers x's rows by token; down reads h's sorted rows (and
    // the shared expert's after them).
    Value resultRows = kb.numElements(ArrayRef(f.result.shape).drop_back());
    x = f.glu ? em.contiguousView(f.rows)
              : em.contiguousView(f.rows.base, {resultRows, kb.idx(nIn)});
    out = em.contiguousView(f.result.base, {resultRows, kb.idx(nOut)});
    if (f.rowWeights)
      rowWeights = kb.view(f.rowWeights.base, {pairs});
  }

  /// The tile's expert (none for the dense and shared tiles) and rows.
  void locate(TileKind kind, Value mTile) {
    tileKind = kind;
    expert = Value();
    if (kind != TileKind::Routed) {
      rowStart = kb.muli(mTile, kb.idx(f.tileRows));
      validRows = kb.minsi(kb.subi(tokenCount, rowStart), kb.idx(f.tileRows));
      return;
    }
    // Found by the whole block before the branch (emit).
    expert = routed.expert;
    rowStart = routed.rowStart;
    validRows = routed.validRows;
  }

  /// The warp's weight rows: R of each weight, in operand order.
  SmallVector<ViewRow> weightRows() {
    SmallVector<ViewRow> rows;
    for (Value w : tileKind == TileKind::Shared ? sharedViews : weightViews)
      for (int64_t r = 0; r < tile.rows; ++r) {
        Value n = kb.addi(n0, kb.idx(r));
        rows.push_back({w, expert ? SmallVector<Value>{expert, n}
                                  : SmallVector<Value>{n}});
      }
    return rows;
  }

  /// MXFP4: rows g and g + 8 of the warp's 16 of each weight (lane g =
  /// lane / 4): where their codes and scales start in the weight's bytes.
  SmallVector<MXFP4LaneRows> mxfp4LaneRows(Value lane) {
    SmallVector<MXFP4LaneRows> rows;
    Value g = em.divu(lane, 4);
    for (auto [w, bytes] : llvm::zip(f.weights, weightViews)) {
      MXFP4LaneRows lr;
      lr.bytes = bytes;
      for (int64_t r = 0; r < 2; ++r) {
        Value n = kb.addi(n0, kb.addi(g, kb.idx(8 * r)));
        Value row = kb.addi(kb.muli(expert, kb.idx(nOut)), n);
        lr.codes[r] = kb.muli(row, kb.idx(nIn / 2));
        lr.scales[r] = kb.addi(kb.idx(weightElements(w) / 2),
                               kb.muli(row, kb.idx(nIn / 32)));
      }
      rows.push_back(lr);
    }
    return rows;
  }

  /// bf16 on the tensor cores: rows g and g + 8 of the warp's 16 of each
  /// weight (the shared expert's on its tiles).
  SmallVector<MMALaneRows> mmaLaneRows(Value lane) {
    SmallVector<MMALaneRows> rows;
    Value g = em.divu(lane, 4);
    for (Value w : tileKind == TileKind::Shared ? sharedViews : weightViews) {
      MMALaneRows lr;
      for (int64_t r = 0; r < 2; ++r) {
        Value n = kb.addi(n0, kb.addi(g, kb.idx(8 * r)));
        lr.rows[r] = {w, expert ? SmallVector<Value>{expert, n}
                                : SmallVector<Value>{n}};
      }
      rows.push_back(lr);
    }
    return rows;
  }

  /// The tensor-core forms: the lane's token, row g of the tile (x
  /// gathered by token for routed gate/up, h's sorted row for down, the
  /// shared expert's after the routed ones).
  LaneToken laneToken(Value lane) {
    Value g = em.divu(lane, 4);
    Value r = kb.addi(rowStart, kb.minsi(g, kb.subi(validRows, kb.idx(1))));
    if (f.glu && tileKind == TileKind::Routed)
      r = em.divu(kb.loadIndex(rowSource, {r}), topK);
    if (!f.glu && tileKind == TileKind::Shared)
      r = kb.addi(pairs, r);
    return {x, r, kb.lti(g, validRows)};
  }

  /// The tensor-core forms: lane (g, c) stores its fragment's outputs, rows
  /// g and g + 8 of tokens 2 c and 2 c + 1 (the accumulator's c0..c3),
  /// where they exist.
  void storeFragments(ArrayRef<Acc> d, Value lane) {
    Value g = em.divu(lane, 4), c = em.remu(lane, 4);
    for (int64_t t = 0; t < 2; ++t) {
      Value j = kb.addi(kb.muli(c, kb.idx(2)), kb.idx(t));
      kb.ifThen(kb.lti(j, validRows), [&] {
        Value row = outputRow(j);
        Value scale;
        if (!f.glu && tileKind == TileKind::Routed)
          scale = kb.load(rowWeights, {kb.loadIndex(rowSource, {row})});
        for (int64_t r = 0; r < 2; ++r) {
          Value n = kb.addi(n0, kb.addi(g, kb.idx(8 * r)));
          Value v = d[0][2 * r + t];
          if (f.glu)
            v = emitGLUActivation(kb, f.act, f.beta, f.linearBeta, v,
                                  d[1][2 * r + t]);
          else if (scale)
            v = kb.mul(scale, v);
          kb.store(v, out, {row, n});
        }
      });
    }
  }

  /// Sorted row j of the tile, clamped to its last row.
  Value sortedRow(int64_t j) {
    return kb.addi(rowStart,
                   kb.minsi(kb.idx(j), kb.subi(validRows, kb.idx(1))));
  }

  /// The tile's TT input rows: routed gate/up gathers x by token, down
  /// reads h's sorted rows; the shared expert's down reads h's rows T K +
  /// t.
  SmallVector<ViewRow> inputRows() {
    SmallVector<ViewRow> rows;
    for (int64_t j = 0; j < f.tileRows; ++j) {
      Value r = sortedRow(j);
      if (f.glu && tileKind == TileKind::Routed)
        r = em.divu(kb.loadIndex(rowSource, {r}), topK);
      if (!f.glu && tileKind == TileKind::Shared)
        r = kb.addi(pairs, r);
      rows.push_back({x, {r}});
    }
    return rows;
  }

  /// Where the tile's row j is stored: the shared expert's after the T K
  /// routed rows.
  Value outputRow(Value j) {
    Value row = kb.addi(rowStart, j);
    return tileKind == TileKind::Shared ? kb.addi(pairs, row) : row;
  }

  /// Lane 0: the tile's existing rows of the warp's R outputs.
  void store(ArrayRef<Value> sums) {
    const int64_t tt = f.tileRows;
    for (int64_t j = 0; j < tt; ++j)
      kb.ifThen(kb.lti(kb.idx(j), validRows), [&] {
        Value row = outputRow(kb.idx(j));
        // The routing weight (the shared expert's is one).
        Value scale;
        if (!f.glu && tileKind == TileKind::Routed)
          scale = kb.load(rowWeights, {kb.loadIndex(rowSource, {row})});
        for (int64_t r = 0; r < tile.rows; ++r) {
          Value n = kb.addi(n0, kb.idx(r)), v = sums[r * tt + j];
          if (f.glu)
            v = emitGLUActivation(kb, f.act, f.beta, f.linearBeta, v,
                                  sums[(tile.rows + r) * tt + j]);
          else if (scale)
            v = kb.mul(scale, v);
          kb.store(v, out, {row, n});
        }
      });
  }

  const GEMVForm &f;
  KernelEmission &e;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  LinearGEMVTile tile;
  int64_t nOut = 0, nIn = 0, vec = 8, experts = 0, topK = 1;
  bool mxfp4 = false; // weights in MXFP4 (WeightElements.h)
  bool mma = false;   // bf16 on the tensor cores (tile R = 16)
  std::optional<FragmentPartials> partials; // split K (S > 1)
  SmallVector<Value> weightViews, sharedViews;
  Value tokenCount, pairs, x, out, rowSource, rowWeights;
  TileKind tileKind = TileKind::Routed;
  Value n0, expert, rowStart, validRows, warp, slice, group;
  /// The block's routed tile (emit), read by locate.
  BlockSegmentTile routed;
};

LogicalResult emitGEMV(const GEMVForm &f, Operation *op, KernelEmission &e) {
  if (failed(GroupedGEMVKernel(f, e).emit(op)))
    return failure();
  e.finishSinglePhase(op->getLoc());
  return success();
}

/// TT: k3-select-kernel-config checked that it is the dispatch's tile
/// rows (the dispatch is out of reach here, in another kernel).
int64_t tileRowsOf(const KernelEmission &e) {
  return linearGEMVTile(e.config).tokens;
}

/// The fields both routed ops share: their rows, k3.moe_dispatch's tables,
/// the result and the tile rows.
template <typename Adaptor>
GEMVForm routedForm(bool glu, Adaptor a, const KernelEmission &e) {
  GEMVForm f;
  f.glu = glu;
  f.dense = false;
  f.rows = a.getInput();
  f.indices = a.getIndices();
  f.rowSource = a.getRowSource();
  f.offsets = a.getOffsets();
  f.tileOffsets = a.getTileOffsets();
  f.result = e.outputs[0];
  f.tileRows = tileRowsOf(e);
  return f;
}

struct GroupedGLUGEMVPattern : OpKernelPattern<MoEGroupedGLUOp> {
  GroupedGLUGEMVPattern() : OpKernelPattern(KernelKind::moe_grouped_gemv) {}
  LogicalResult emit(MoEGroupedGLUOp op, Adaptor a,
                     KernelEmission &e) const override {
    GEMVForm f = routedForm(/*glu=*/true, a, e);
    f.weights = {a.getW1(), a.getW3()};
    if (op.hasSharedExpert())
      f.shared = {a.getSharedW1(), a.getSharedW3()};
    f.act = op.getActivation();
    f.beta = optionalDouble(op.getBetaAttr());
    f.linearBeta = optionalDouble(op.getLinearBetaAttr());
    return emitGEMV(f, op, e);
  }
};

struct GroupedDownGEMVPattern : OpKernelPattern<MoEGroupedDownOp> {
  GroupedDownGEMVPattern() : OpKernelPattern(KernelKind::moe_grouped_gemv) {}
  LogicalResult emit(MoEGroupedDownOp op, Adaptor a,
                     KernelEmission &e) const override {
    GEMVForm f = routedForm(/*glu=*/false, a, e);
    f.weights = {a.getW2()};
    if (op.hasSharedExpert())
      f.shared = {a.getSharedW2()};
    f.rowWeights = a.getWeights();
    return emitGEMV(f, op, e);
  }
};

/// k3.glu_gate_up: one expert over every row, in tiles of the config's TT.
struct DenseGLUGEMVPattern : OpKernelPattern<GLUGateUpOp> {
  DenseGLUGEMVPattern() : OpKernelPattern(KernelKind::glu_gemv) {}
  LogicalResult emit(GLUGateUpOp op, Adaptor a,
                     KernelEmission &e) const override {
    GEMVForm f;
    f.glu = true;
    f.dense = true;
    f.rows = a.getInput();
    f.weights = {a.getWGate(), a.getWUp()};
    f.result = e.outputs[0];
    f.tileRows = tileRowsOf(e);
    f.act = op.getActivation();
    f.beta = optionalDouble(op.getBetaAttr());
    f.linearBeta = optionalDouble(op.getLinearBetaAttr());
    return emitGEMV(f, op, e);
  }
};

} // namespace

void mlir::k3::populateMoEGroupedGEMVPatterns(KernelPatternSet &patterns) {
  patterns.add<GroupedGLUGEMVPattern, GroupedDownGEMVPattern,
               DenseGLUGEMVPattern>();
}
