//===- MoEGroupedWGMMA.cpp - the grouped MoE GEMMs with wgmma ---*- C++ -*-===//
//
// k3.moe_grouped_glu and k3.moe_grouped_down on Hopper (config kernel
// `moe_grouped_wgmma`), in one of two schedules chosen by the config's
// tile: one warpgroup per 128-row tile of one expert's segment of the
// sorted rows and 128 output columns (the default, below); or [128, 256,
// 64], persistent and warp-specialised (emitPersistent: a block per SM
// walks the tiles, a producer warpgroup and two consumers that write
// from their registers; docs/moe.md).
//
// - Schedule: the grid has a block per (row tile, column tile) for the most
//   row tiles any routing can need, ceil(T K / 128) + E; block m finds its
//   expert in k3.moe_dispatch's tile offsets, all of its threads at once
//   (MoESegments.h; blocks past the last tile return at once). Its rows are
//   [offsets[e] + 128 (m - tile_offsets[e]), offsets[e + 1]) capped at 128.
// - Operands: the expert's weight tiles come by TMA (a rank-3 tensor map
//   over [E, N, K]: coordinates (k, n, e)) into the 128-byte swizzle; the
//   rows' tiles by cp.async, each thread 8 rows of one 16-byte chunk,
//   placed at the swizzled chunk: for the gate/up GEMM the rows are
//   gathered from x by their token (row_source / K). Rows past the
//   segment are zero-filled. `stages` buffers: the cp.async groups and
//   one mbarrier per stage for the TMA bytes; a proxy fence makes the
//   cp.async bytes visible to wgmma.
// - The down GEMM's rows are h's own sorted rows, contiguous: they come by
//   TMA too (a rank-2 map over h [T, K, I] read as [T K, I]), so its main
//   loop waits on mbarriers alone, as the dense linear's does. A tile's
//   rows past its segment are the next expert's (or zeros past T K): their
//   products land in accumulator rows that the epilogue never writes.
// - Gate/up: the weight tile is 64 rows of W1 above the same 64 rows of
//   W3, so one 128-column product holds both halves of 64 channels, and
//   the epilogue writes act(gate, up) as bf16 h.
// - Down: the epilogue writes each row times its routing weight, in the
//   rows' type (f32, or bf16 under the bf16 policy).
// - MXFP4 weights (f4E2M1FN, the one-warpgroup schedule): no TMA; each
//   thread stages one weight row's codes and scales by cp.async in the
//   rows' group and, once it landed, decodes them into the stage's bf16
//   tile in the swizzle (MXFP4Tile.h) before the fence that publishes the
//   rows.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/cuda/MXFP4Tile.h"
#include "lowering/cuda/MoESegments.h"
#include "lowering/cuda/WGMMA.h"
#include "lowering/cuda/WGMMAPipeline.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

constexpr int64_t kTile = kWGMMATileRows, kTileK = kWGMMATileK;
/// Threads of one warpgroup: the copying threads (all of the block, or the
/// warp-specialised schedule's producer).
constexpr int64_t kThreads = 128;
/// Rows of the 128-row tile each thread copies (one 16-byte chunk each).
constexpr int64_t kRowsPerThread = kTile * (kTileK / 8) / kThreads;
/// The warp-specialised schedule's consumer warpgroups.
constexpr int64_t kConsumers = 2;
/// The named barrier of its producer warpgroup (WGMMAPipeline's consumers
/// use 1).
constexpr int32_t kProducerBarrier = 2;

/// k3.moe_dispatch's tables, which both grouped ops take (none for the
/// one-expert form).
struct RoutingTables {
  KernelOperand indices, rowSource, offsets, tileOffsets;

  template <typename Adaptor> static RoutingTables of(Adaptor a) {
    return {a.getIndices(), a.getRowSource(), a.getOffsets(),
            a.getTileOffsets()};
  }
};

/// What differs between the GEMMs.
struct GroupedGEMM {
  bool glu;           // gate/up (else down)
  bool dense;         // one expert, every row (k3.glu_gate_up)
  KernelOperand rows; // x [T, D] (gathered) or h [T, K, I] (sorted)
  RoutingTables tables;
  SmallVector<int64_t> maps; // operand numbers of the weights (W1, W3 or W2)
  int64_t reduction;         // D or I
  int64_t columnTiles;       // I / (tile columns / 2) or D / tile columns
  int64_t weightRowsPerMap;  // tile columns / 2 (W1 and W3 halves) or all
  KernelOperand rowWeights;  // down: the routing weights [T, K] (else none)
  SmallVector<KernelOperand> weights; // the operands at `maps`

  /// Whether the weights are MXFP4 (bytes: codes, then scales).
  bool mxfp4() const {
    return !weights.empty() && weights[0].stored &&
           isa<Float4E2M1FNType>(weights[0].stored);
  }
  /// Whether the rows come by TMA: the down GEMM's sorted rows of h, with
  /// bf16 weights (MXFP4 weights are staged by the threads, which then
  /// copy the rows too).
  bool rowsByTMA() const { return !glu && !dense && !mxfp4(); }
};

/// One place the epilogue writes: tile row `r` (of 128) and tile column
/// `col` (gate/up: of the tile's channels; down: of its outputs); `v` the
/// f32 products of the columns from `col` (a vector of 2 or 4; gate/up:
/// the gates), `up` (gate/up) the ups of the same channels, `rowWeight`
/// (down) the row's routing weight.
struct EpilogueValues {
  Value r, col, v, up, rowWeight;
};
/// What the epilogue writes: `values` computes a place's outputs in the
/// result's element type (a vector as long as EpilogueValues::v), `store`
/// writes such a vector at tile row r, tile column col.
struct Epilogue {
  std::function<Value(const EpilogueValues &)> values;
  std::function<void(Value r, Value col, Value v)> store;
};

/// The epilogue's rows and columns: `perRow` threads per row, thread t (of
/// `threads`) at column group t % perRow of rows t / perRow, t / perRow +
/// threads / perRow, ... below `rows`; body(r, group) with r the tile row.
void forTileRows(KernelBuilder &kb, Value t, int64_t threads, int64_t perRow,
                 Value rows, const std::function<void(Value, Value)> &body) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  Value first = arith::DivUIOp::create(b, loc, t, kb.idx(perRow));
  Value group = arith::RemUIOp::create(b, loc, t, kb.idx(perRow));
  auto loop = scf::ForOp::create(b, loc, first, rows, kb.idx(threads / perRow));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  body(loop.getInductionVar(), group);
}

class GroupedKernel {
public:
  GroupedKernel(const GroupedGEMM &g, KernelEmission &e, Operation *op)
      : tileN(e.config.getTile()[1]), g(g), e(e), op(op), b(e.kb.builder()),
        loc(op->getLoc()), kb(e.kb), em{b, loc, kb, e.config.getStages()},
        mma{b, loc, kb}, specialised(tileN == 256), mxfp4(g.mxfp4()),
        rowsByTMA(g.rowsByTMA()), mxfp4Rows(em, mma, tileN) {
    // The one-warpgroup schedule's row weights (the persistent one keeps
    // each thread's two in registers).
    if (g.rowWeights && !specialised)
      rowWeights = mma.workgroupArray(e.fn, b.getF32Type(), kTile);
    if (g.dense)
      return;
    experts = g.tables.offsets.shape[0] - 1;
    topK = g.tables.indices.shape[1];
    pairs = kb.numElements(g.tables.indices.shape);
  }

  LogicalResult emit(const Epilogue &epi) {
    auto tokens = kb.linearForm(kb.dim(g.rows.shape[0]));
    if (!tokens)
      return op->emitOpError() << "the grouped wgmma kernel needs a token "
                                  "count linear in one runtime size";
    if (mxfp4 && (specialised || g.dense))
      return op->emitOpError() << "MXFP4 weights run the grouped wgmma "
                                  "kernel's one-warpgroup schedule only";
    if (!mxfp4)
      addTensorMapParameters();
    if (specialised)
      return emitPersistent(epi);
    int64_t nb = g.columnTiles;
    if (g.dense)
      return emitDense(*tokens, epi);
    // Row tiles: ceil(T K / 128) + E at most (each expert's last tile may be
    // partial), times the column tiles.
    e.setLaunch(*tokens, topK * nb, (kTile - 1 + kTile * experts) * nb, kTile,
                {threads(), 1, 1},
                groupedWGMMASharedBytes(em.stages, tileN, mxfp4));
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    mTile = em.divuIdx(bid, nb);
    nTile = em.remuIdx(bid, nb);
    Value t = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    BlockSegmentTile s = locateSegmentTileInBlock(
        kb, g.tables.offsets.full, g.tables.tileOffsets.full, experts, mTile,
        kTile, t, threads(), mma.workgroupArray(e.fn, b.getI32Type(), 4));
    kb.ifThen(s.live, [&] {
      expert = s.expert;
      rowStart = s.rowStart;
      validRows = s.validRows;
      body(epi);
    });
    return success();
  }

  /// Rows of this tile inside the segment, and the first's sorted index.
  Value rowStart, validRows, expert, tid, smem, base;
  /// Output columns of one tile (gate/up: both halves).
  int64_t tileN;

private:
  int64_t threads() const {
    return specialised ? kThreads * (1 + kConsumers) : kThreads;
  }
  /// Bytes of one stage: the rows' 128 x 64 tile, then the weights'.
  int64_t stageBytes() const { return (kTile + tileN) * kTileK * 2; }
  /// One expert over all rows: a block per (128-row tile, column tile).
  LogicalResult emitDense(const KernelBuilder::Linear &tokens,
                          const Epilogue &epi) {
    int64_t nb = g.columnTiles;
    e.setLaunch(tokens, nb, (kTile - 1) * nb, kTile, {threads(), 1, 1},
                linearWGMMASharedBytes(em.stages, tileN));
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    mTile = em.divuIdx(bid, nb);
    nTile = em.remuIdx(bid, nb);
    Value rows = kb.dim(g.rows.shape[0]);
    rowStart = kb.muli(mTile, kb.idx(kTile));
    kb.ifThen(kb.lti(rowStart, rows), [&] {
      validRows = kb.minsi(kb.subi(rows, rowStart), kb.idx(kTile));
      body(epi);
    });
    return success();
  }

  /// The rows' box, outermost first: 128 rows of [T K], 64 k.
  SmallVector<int64_t> rowBox() const { return {kTile, kTileK}; }

  /// A weight tile's box, outermost first: [1 expert,] rows, 64 k.
  SmallVector<int64_t> weightBox() const {
    if (g.dense)
      return {g.weightRowsPerMap, kTileK};
    return {1, g.weightRowsPerMap, kTileK};
  }

  /// Tensor-map parameters after the sizes, one per weight operand: a box
  /// of 64 k x `weightRowsPerMap` rows x one expert.
  void addTensorMapParameters() {
    auto fn = e.fn;
    auto ptr = LLVM::LLVMPointerType::get(b.getContext());
    SmallVector<Attribute> attrs;
    auto addMap = [&](int64_t operand, ArrayRef<int64_t> box) {
      unsigned n = fn.getNumArguments();
      (void)fn.insertArgument(n, ptr, DictionaryAttr(), loc);
      SmallVector<int64_t> inner(llvm::reverse(box)); // innermost first
      attrs.push_back(TensorMapAttr::get(b.getContext(), operand, inner,
                                         TensorMapSwizzle::swizzle_128b));
      return fn.getFunctionBody().front().getArgument(n);
    };
    for (int64_t operand : g.maps)
      mapArgs.push_back(addMap(operand, weightBox()));
    // The rows: operand 0 (h), its leading [T, K] read as one dimension.
    if (rowsByTMA)
      rowsMapArg = addMap(0, rowBox());
    K3Dialect::TensorMapsAttrHelper(b.getContext())
        .setAttr(fn, b.getArrayAttr(attrs));
  }

  /// This thread's rows of the A tile: tile row, source row, in range.
  struct RowCopy {
    Value tileRow, column, sourceRow, valid;
  };
  SmallVector<RowCopy> rowCopies() {
    SmallVector<RowCopy> out;
    if (rowsByTMA)
      return out;
    Value chunk = em.remuIdx(tid, 8), row0 = em.divuIdx(tid, 8);
    for (int64_t q = 0; q < kRowsPerThread; ++q) {
      Value r = kb.addi(row0, kb.idx(q * (kThreads / 8)));
      Value valid = kb.lti(r, validRows);
      Value sorted = kb.select(valid, kb.addi(rowStart, r), rowStart);
      Value source = sorted;
      if (g.glu && !g.dense)
        source = em.divuIdx(kb.loadIndex(sourcePairs, {sorted}), topK);
      out.push_back({r, em.swizzledColumn(r, chunk), source, valid});
    }
    return out;
  }

  Value stageOffset(Value stage, int64_t which) {
    return kb.addi(base, kb.addi(kb.muli(stage, kb.idx(stageBytes())),
                                 kb.idx(which * kWGMMATileBytes)));
  }

  /// This thread's row chunks of k-step `kt` into `stage` (cp.async).
  void copyRows(Value stage, Value kt, ArrayRef<RowCopy> copies) {
    Value aTile = em.tile(smem, stageOffset(stage, 0));
    Value k0 = kb.muli(kt, kb.idx(kTileK));
    Value chunkCol = kb.muli(em.remuIdx(tid, 8), kb.idx(8));
    for (const RowCopy &c : copies)
      mma.asyncCopy(aTile, {c.tileRow, c.column}, rowsView,
                    {c.sourceRow, kb.addi(k0, chunkCol)}, 8, c.valid);
  }

  /// The TMA tiles of k-step `kt` into `stage`, completing on `barriers`
  /// (one thread): the weights', and the rows' when rowsByTMA.
  void loadTMATiles(Value stage, Value kt, Value barriers) {
    Value k0 = kb.muli(kt, kb.idx(kTileK));
    int64_t rowsPerMap = g.weightRowsPerMap;
    for (auto [i, tm] : llvm::enumerate(weightMaps)) {
      Value dst = em.view(smem,
                          kb.addi(stageOffset(stage, 1),
                                  kb.idx(int64_t(i) * rowsPerMap * kTileK * 2)),
                          em.tileType(weightBox(), b.getBF16Type()));
      Value n0 = kb.muli(nTile, kb.idx(rowsPerMap));
      SmallVector<Value> at = {k0, n0};
      if (!g.dense)
        at.push_back(expert);
      nvgpu::TmaAsyncLoadOp::create(b, loc, dst, barriers, tm, at, stage,
                                    Value(), Value());
    }
    if (rowsByTMA)
      nvgpu::TmaAsyncLoadOp::create(
          b, loc, em.tile(smem, stageOffset(stage, 0)), barriers, rowsMap,
          ValueRange{k0, rowStart}, stage, Value(), Value());
  }

  /// TMA bytes of one stage: the weights' tile, and the rows' (rowsByTMA).
  int64_t tmaStageBytes() const {
    return tileN * kTileK * 2 + (rowsByTMA ? kTile * kTileK * 2 : 0);
  }

  /// Every thread's row chunks of k-step `kt`, and thread 0's weight tiles.
  void issue(Value stage, Value kt, ArrayRef<RowCopy> copies, Value first) {
    if (!rowsByTMA)
      copyRows(stage, kt, copies);
    if (mxfp4)
      return mxfp4Rows.stage(stagingOf(stage), tid, weightRow, kt);
    kb.ifThen(first, [&] {
      nvgpu::MBarrierArriveExpectTxOp::create(
          b, loc, bars, kb.idx(tmaStageBytes()), stage, Value());
      loadTMATiles(stage, kt, bars);
    });
  }

  /// MXFP4: the stage's staging bytes, after every stage's tiles.
  Value stagingOf(Value stage) {
    Value at = kb.addi(kb.addi(base, kb.idx(em.stages * stageBytes())),
                       kb.muli(stage, kb.idx(mxfp4Rows.stagingBytes())));
    return mma.sharedView(smem, b.getI8Type(), at, {mxfp4Rows.stagingBytes()});
  }

  /// MXFP4: this thread's weight row (tile row tid): the weight of its
  /// half (gate/up: W1 above W3) and its row in the expert's stack.
  MXFP4WeightRow mxfp4WeightRow() {
    int64_t rowsPerMap = g.weightRowsPerMap;
    Value map = em.divuIdx(tid, rowsPerMap);
    Value n = kb.addi(kb.muli(nTile, kb.idx(rowsPerMap)),
                      em.remuIdx(tid, rowsPerMap));
    const KernelOperand &w0 = g.weights[0];
    int64_t outs = w0.shape[1], numel = weightElements(w0);
    Value row = kb.addi(kb.muli(expert, kb.idx(outs)), n);
    Value bytes = weightBytes[0];
    if (weightBytes.size() == 2)
      bytes = arith::SelectOp::create(b, loc, kb.eqi(map, kb.idx(0)),
                                      weightBytes[0], weightBytes[1]);
    return {bytes, kb.muli(row, kb.idx(g.reduction / 2)),
            kb.addi(kb.idx(numel / 2), kb.muli(row, kb.idx(g.reduction / 32)))};
  }

  /// The operands' views and tensor maps.
  void setUpOperands() {
    smem = mma.dynamicSharedMemory();
    base = em.alignedBase(smem);
    if (!g.dense)
      sourcePairs = kb.view(g.tables.rowSource.base, {pairs});
    // cp.async needs a unit inner stride in the source's type.
    Value rowCount = g.glu ? kb.dim(g.rows.shape[0]) : pairs;
    rowsView = mma.contiguousView(g.rows.base, {rowCount, kb.idx(g.reduction)});
    for (Value arg : mapArgs)
      weightMaps.push_back(em.tensorMap(arg, weightBox()));
    if (rowsByTMA)
      rowsMap = em.tensorMap(rowsMapArg, rowBox());
    swizzle = weightMaps.empty() ? em.swizzleTag(weightBox()) : weightMaps[0];
    if (!mxfp4)
      return;
    for (const KernelOperand &w : g.weights)
      weightBytes.push_back(
          mma.contiguousView(w.base, {kb.idx(mxfp4WeightBytes(w))}));
    weightRow = mxfp4WeightRow();
  }

  /// Thread r's row weight (down), loaded before the products so that its
  /// two dependent loads are long done by the epilogue (read there in a
  /// loop over rows, they were latency-bound).
  Value rowWeight(Value r) { return weightOfPair(rowPair(r)); }
  /// Tile row r's (token, slot) pair (down; rows past the segment read the
  /// last row's), and that pair's routing weight.
  Value rowPair(Value r) {
    if (!g.rowWeights)
      return Value();
    r = kb.minsi(r, kb.subi(validRows, kb.idx(1)));
    return kb.loadIndex(sourcePairs, {kb.addi(rowStart, r)});
  }
  Value weightOfPair(Value pair) {
    if (!pair)
      return Value();
    return kb.load(kb.view(g.rowWeights.base, {pairs}), {pair});
  }

  void body(const Epilogue &epi) {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    setUpOperands();
    Value first = kb.eqi(tid, kb.idx(0));
    if (!mxfp4) {
      bars = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
      for (int64_t s = 0; s < em.stages; ++s)
        nvgpu::MBarrierInitOp::create(b, loc, bars, kb.idx(1), kb.idx(s),
                                      first);
      for (Value tm : weightMaps)
        nvgpu::TmaPrefetchOp::create(b, loc, tm, first);
      if (rowsByTMA)
        nvgpu::TmaPrefetchOp::create(b, loc, rowsMap, first);
      gpu::BarrierOp::create(b, loc);
    }
    SmallVector<RowCopy> copies = rowCopies();
    int64_t steps = g.reduction / kTileK;
    // One cp.async group per stage even past the last step, so that the
    // main loop's wait count holds for any number of steps.
    Value group;
    for (int64_t s = 0; s < em.stages; ++s) {
      if (s < steps)
        issue(kb.idx(s), kb.idx(s), copies, first);
      group = mma.commitGroup();
    }
    Value weight = rowWeight(tid);
    auto finish = [&](ArrayRef<Value> acc) {
      if (weight)
        mma.sts(weight, rowWeights, {tid});
      gpu::BarrierOp::create(b, loc);
      Value tile = em.storeAccumulators(smem, base, acc);
      gpu::BarrierOp::create(b, loc);
      epilogueFromTile(tile, epi);
    };
    if (mxfp4)
      return finish(mainLoopMXFP4(first, steps, copies, group));
    if (g.dense)
      return finish(mainLoop(first, steps, copies, group, 2));
    // An expert's last tile often holds a few rows (at T = 8192 top-8 of
    // 256 experts a segment averages 256 rows: about half the experts end
    // in a tile of 1-32). A tile of at most 64 rows multiplies its first
    // half alone: a uniform branch around two copies of the main loop, so
    // that no wgmma accumulator crosses control flow inside a loop.
    Value small = kb.notb(kb.lti(kb.idx(64), validRows));
    auto branch = scf::IfOp::create(b, loc, TypeRange{}, small,
                                    /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&branch.getThenRegion().front());
      finish(mainLoop(first, steps, copies, group, 1));
      b.setInsertionPointToStart(&branch.getElseRegion().front());
      finish(mainLoop(first, steps, copies, group, 2));
    }
  }

  /// The warp-specialised schedule (WGMMAPipeline.h), persistent: a block
  /// per SM walks the tiles bid, bid + grid, ...; warpgroup 0 loads the
  /// weights (TMA) and the rows (TMA, or cp.async gathered by token),
  /// warpgroups 1 and 2 multiply 64 rows each by all tileN columns and
  /// write them from their registers. No tile's epilogue touches the
  /// stages, so the producer fills the next tile's while the consumers
  /// write this one (a block per tile left its prologue and epilogue
  /// exposed at one block per SM: Nsight Compute counted 0.36 eligible
  /// warps a scheduler, docs/gemm.md).
  LogicalResult emitPersistent(const Epilogue &epi) {
    e.setLaunch(GridSymbol::device_sm_count, 1, 0, 1, {threads(), 1, 1},
                groupedWGMMASharedBytes(em.stages, tileN, /*mxfp4=*/false));
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    setUpOperands();
    WGMMAPipeline pipe(em, kConsumers, tmaStageBytes(),
                       /*copies=*/!rowsByTMA);
    pipe.init(tid);
    if (!g.dense) {
      Type i32 = b.getI32Type();
      found = mma.workgroupArray(e.fn, i32, 2 * 4);
      published = mma.workgroupArray(e.fn, i32, em.stages * 4);
    }
    Value rowTiles =
        g.dense
            ? em.divuIdx(kb.addi(kb.dim(g.rows.shape[0]), kb.idx(kTile - 1)),
                         kTile)
            : kb.loadIndex(g.tables.tileOffsets.full, {kb.idx(experts)});
    Value total = kb.muli(rowTiles, kb.idx(g.columnTiles));
    Value steps = kb.idx(g.reduction / kTileK);
    Value warpgroup = em.divuIdx(tid, kThreads);
    kb.ifThen(kb.eqi(warpgroup, kb.idx(0)),
              [&] { produceTiles(pipe, total, steps); });
    kb.ifThen(kb.gei(warpgroup, kb.idx(1)), [&] {
      consumeTiles(pipe, total, steps, kb.subi(warpgroup, kb.idx(1)), epi);
    });
    return success();
  }

  /// Tile `tile`'s row and column tiles, row tiles outermost (the column
  /// tiles of a row tile are neighbours: its rows are read from L2).
  void setTile(Value tile) {
    mTile = em.divuIdx(tile, g.columnTiles);
    nTile = em.remuIdx(tile, g.columnTiles);
  }

  /// A one-expert row tile's rows (k3.glu_gate_up: every row).
  void setDenseRows() {
    Value rows = kb.dim(g.rows.shape[0]);
    rowStart = kb.muli(mTile, kb.idx(kTile));
    validRows = kb.minsi(kb.subi(rows, rowStart), kb.idx(kTile));
  }

  /// Tile i's slot (4 i32: expert, first row, rows) of a ring of `depth`.
  /// `found` (the producer's) has 2: the holder of tile i + 2 writes once
  /// every producer thread passed tile i + 1's barrier, after reading tile
  /// i's. `published` (the consumers') has `stages`: thread 0 writes tile
  /// i + stages's slot after waiting for the release of pipeline step
  /// (i + stages) steps - stages >= i steps, which the consumers make
  /// after reading tile i's.
  Value slotOf(Value i, int64_t depth) {
    return kb.muli(em.remuIdx(i, depth), kb.idx(4));
  }

  /// The producer warpgroup: per tile, its expert and rows found by the
  /// warpgroup (a named barrier over its 128 threads), published to the
  /// consumers by thread 0 before the tile's first arrive, then its steps.
  void produceTiles(WGMMAPipeline &pipe, Value total, Value steps) {
    Value first = kb.eqi(tid, kb.idx(0));
    for (Value tm : weightMaps)
      nvgpu::TmaPrefetchOp::create(b, loc, tm, first);
    if (rowsByTMA)
      nvgpu::TmaPrefetchOp::create(b, loc, rowsMap, first);
    pipe.enterProducer();
    pipe.forEachTile(total, [&](Value i, Value tile) {
      setTile(tile);
      WGMMAPipeline::Publish publish;
      if (g.dense) {
        setDenseRows();
      } else {
        Value slot = slotOf(i, em.stages);
        SegmentTile s = locateSegmentTileInBlock(
            kb, g.tables.offsets.full, g.tables.tileOffsets.full, experts,
            mTile, kTile, tid, kThreads, found, slotOf(i, 2),
            [&] { namedBarrier(kProducerBarrier, kThreads); });
        expert = s.expert;
        rowStart = s.rowStart;
        validRows = s.validRows;
        publish = [&, slot] {
          SmallVector<Value> fields;
          for (Value v : {expert, rowStart, validRows, kb.idx(0)})
            fields.push_back(
                arith::IndexCastOp::create(b, loc, b.getI32Type(), v));
          Value packed = vector::FromElementsOp::create(
              b, loc, VectorType::get({4}, b.getI32Type()), fields);
          vector::StoreOp::create(b, loc, packed, published, ValueRange{slot})
              .setAlignment(16);
        };
      }
      Value firstStep = kb.muli(i, steps);
      auto load = [&](Value stage, Value kt) {
        loadTMATiles(stage, kt, pipe.fullBarriers());
      };
      if (rowsByTMA)
        return pipe.produce(tid, firstStep, steps, load, publish);
      SmallVector<RowCopy> copies = rowCopies();
      pipe.produceWithCopies(
          tid, firstStep, steps, load,
          [&](Value stage, Value kt) { copyRows(stage, kt, copies); }, publish);
    });
  }

  /// A consumer warpgroup: per tile, the published expert and rows (once
  /// the tile's first stage is full), (down) its threads' two rows'
  /// routing weights, the products, and the epilogue from registers.
  void consumeTiles(WGMMAPipeline &pipe, Value total, Value steps,
                    Value consumer, const Epilogue &epi) {
    pipe.enterConsumer();
    Value t =
        kb.subi(tid, kb.muli(kb.addi(consumer, kb.idx(1)), kb.idx(kThreads)));
    pipe.forEachTile(total, [&](Value i, Value tile) {
      setTile(tile);
      Value firstStep = kb.muli(i, steps);
      if (g.dense) {
        setDenseRows();
      } else {
        pipe.waitFull(firstStep);
        auto packed =
            vector::LoadOp::create(b, loc, VectorType::get({4}, b.getI32Type()),
                                   published, ValueRange{slotOf(i, em.stages)});
        packed.setAlignment(16);
        auto field = [&](int64_t f) {
          Value v = vector::ExtractOp::create(b, loc, packed, f);
          return arith::IndexCastOp::create(b, loc, b.getIndexType(), v)
              .getResult();
        };
        expert = field(0);
        rowStart = field(1);
        validRows = field(2);
      }
      // This thread's two rows of the tile (its fragment's, below the
      // consumer's first 64 c) and (down) their (token, slot) pairs.
      std::array<Value, 2> rows, rowPairs, weights;
      for (int64_t h = 0; h < 2; ++h) {
        rows[h] = kb.addi(kb.muli(consumer, kb.idx(64)),
                          AccumulatorFragment::rowOf(em, t, h));
        rowPairs[h] = rowPair(rows[h]);
      }
      Value acc =
          pipe.consume(consumer, firstStep, steps, tileN, kTileK / kWGMMAK,
                       [&](Value stage, Value c, Value acc) {
                         return multiplyRows(stage, c, acc);
                       });
      // (down) The weights' loads wait for the pairs' values: issued
      // before the products, those landed while they ran.
      for (int64_t h = 0; h < 2; ++h)
        weights[h] = weightOfPair(rowPairs[h]);
      epilogueFromRegisters(AccumulatorFragment(em, acc, tileN, t), rows,
                            weights, epi);
    });
  }

  /// The warp-specialised epilogue: the consumer's registers, two adjacent
  /// columns of one row at a time; the gate/up GEMM's ups are the column
  /// groups tileN / 16 further.
  void epilogueFromRegisters(const AccumulatorFragment &f, ArrayRef<Value> rows,
                             ArrayRef<Value> weights, const Epilogue &epi) {
    int64_t columns = g.glu ? tileN / 2 : tileN;
    for (int64_t j = 0; j < columns / 8; ++j) {
      Value v[2];
      for (int64_t h = 0; h < 2; ++h) {
        Value up = g.glu ? f.pair(h, j + columns / 8) : Value();
        v[h] = epi.values({rows[h], f.column(j), f.pair(h, j), up, weights[h]});
      }
      // Two columns of one row a store. (Four, with lane pairs trading
      // rows as the linear kernel does, is not here: its first form lost
      // the consumer's row offset, which the GPU check caught, and the
      // fixed form has not run on a GPU yet; docs/moe.md.)
      for (int64_t h = 0; h < 2; ++h)
        kb.ifThen(kb.lti(rows[h], validRows),
                  [&] { epi.store(rows[h], f.column(j), v[h]); });
    }
  }

  /// The one-warpgroup schedule's epilogue: the f32 tile in shared memory
  /// (rows below validRows), each thread 2 (gate/up) or 4 columns of a row
  /// at a time.
  void epilogueFromTile(Value tile, const Epilogue &epi) {
    int64_t width = g.glu ? 2 : 4, columns = g.glu ? tileN / 2 : tileN;
    auto type = VectorType::get({width}, b.getF32Type());
    forTileRows(kb, tid, kThreads, columns / width, validRows,
                [&](Value r, Value group) {
                  Value col = kb.muli(group, kb.idx(width));
                  Value v = mma.alignedLoad(type, tile, ValueRange{r, col});
                  Value up =
                      g.glu ? mma.alignedLoad(
                                  type, tile,
                                  ValueRange{r, kb.addi(col, kb.idx(columns))})
                            : Value();
                  Value wt = g.rowWeights ? mma.lds(rowWeights, {r}) : Value();
                  epi.store(r, col, epi.values({r, col, v, up, wt}));
                });
  }

  /// bar.sync `id` over `threads` threads.
  void namedBarrier(int32_t id, int64_t threads) {
    NVVM::BarrierOp::create(b, loc, Type(),
                            arith::ConstantIntOp::create(b, loc, id, 32),
                            arith::ConstantIntOp::create(b, loc, threads, 32),
                            NVVM::BarrierReductionAttr(), Value());
  }

  /// Consumer `c`'s products of one landed stage: its 64 rows against all
  /// tileN weight rows, four k-steps of 16, issued without waiting.
  Value multiplyRows(Value stage, Value c, Value acc) {
    Value rows = em.view(
        smem,
        kb.addi(stageOffset(stage, 0), kb.muli(c, kb.idx(64 * kTileK * 2))),
        em.tileType({64, kTileK}, b.getBF16Type()));
    Value weights = em.view(smem, stageOffset(stage, 1),
                            em.tileType({tileN, kTileK}, b.getBF16Type()));
    return em.multiplyRowsStage(rows, weights, swizzle, tileN, acc);
  }

  /// The k-step loop over `halves` 64 x 128 accumulators, zeroed.
  scf::ForOp stepLoop(int64_t steps, int64_t halves = 2) {
    Value init = nvgpu::WarpgroupMmaInitAccumulatorOp::create(
        b, loc, em.accumulatorType(kTile));
    SmallVector<Value> inits(halves, init);
    return scf::ForOp::create(b, loc, kb.idx(0), kb.idx(steps), kb.idx(1),
                              inits);
  }

  /// A step's end: once every warp is done with `stage` (a block barrier),
  /// the copies of step kt + stages into it, their group, and `acc`.
  void refillAndYield(Value stage, Value kt, int64_t steps,
                      ArrayRef<RowCopy> copies, Value first, ValueRange acc) {
    gpu::BarrierOp::create(b, loc);
    Value next = kb.addi(kt, kb.idx(em.stages));
    kb.ifThen(kb.lti(next, kb.idx(steps)),
              [&] { issue(stage, next, copies, first); });
    mma.commitGroup();
    scf::YieldOp::create(b, loc, acc);
  }

  /// The main loop over the tile's first `halves` 64-row halves.
  SmallVector<Value> mainLoop(Value first, int64_t steps,
                              ArrayRef<RowCopy> copies, Value group,
                              int64_t halves) {
    scf::ForOp loop = stepLoop(steps, halves);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar();
    Value stage = em.remuIdx(kt, em.stages);
    // Step kt's rows landed (the later stages' groups may be pending) and
    // are visible to the async proxy that wgmma reads through (rows by TMA
    // complete on the stage's mbarrier).
    if (!rowsByTMA) {
      mma.waitGroups(group, int32_t(em.stages - 1));
      fenceForWGMMA();
      gpu::BarrierOp::create(b, loc);
    }
    em.waitStage(bars, kt, stage);
    SmallVector<Value> acc =
        em.multiplyStage(em.tile(smem, stageOffset(stage, 0)),
                         em.tile(smem, stageOffset(stage, 1)), swizzle, swizzle,
                         loop.getRegionIterArgs());
    refillAndYield(stage, kt, steps, copies, first, acc);
    return SmallVector<Value>(loop.getResults());
  }

  /// This thread's generic-proxy writes of shared memory (its cp.async
  /// copies that landed, its decoded weights) made visible to wgmma's
  /// async proxy; a block barrier then publishes everyone's.
  void fenceForWGMMA() {
    NVVM::FenceProxyOp::create(
        b, loc, NVVM::ProxyKind::async_shared,
        NVVM::SharedSpaceAttr::get(b.getContext(),
                                   NVVM::SharedSpace::shared_cta));
  }

  /// Once this thread's copies of step `kt` landed (at most `pending`
  /// later groups in flight): its weight row of the step decoded into the
  /// stage's tile, and both fenced for wgmma.
  void decodeLanded(Value kt, Value group, int32_t pending) {
    mma.waitGroups(group, pending);
    Value stage = em.remuIdx(kt, em.stages);
    mxfp4Rows.decode(stagingOf(stage), tid, weightRow, kt,
                     em.tile(smem, stageOffset(stage, 1)));
    fenceForWGMMA();
  }

  /// The main loop with MXFP4 weights: the decode of step kt + 1 runs
  /// while step kt's wgmma groups do (they read another stage), so that
  /// the tensor cores and the integer units overlap within a block too.
  /// The copies of step kt + 1 were issued `stages - 1` steps before.
  SmallVector<Value> mainLoopMXFP4(Value first, int64_t steps,
                                   ArrayRef<RowCopy> copies, Value group) {
    int32_t pending = int32_t(em.stages - 1);
    decodeLanded(kb.idx(0), group, pending);
    gpu::BarrierOp::create(b, loc);
    scf::ForOp loop = stepLoop(steps);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar();
    Value stage = em.remuIdx(kt, em.stages);
    SmallVector<Value> acc =
        em.multiplyStage(em.tile(smem, stageOffset(stage, 0)),
                         em.tile(smem, stageOffset(stage, 1)), swizzle, swizzle,
                         loop.getRegionIterArgs(), /*drain=*/false);
    // Groups committed: stages + kt; step kt + 1's is done when at most
    // stages - 2 are pending.
    Value after = kb.addi(kt, kb.idx(1));
    kb.ifThen(kb.lti(after, kb.idx(steps)),
              [&] { decodeLanded(after, group, pending - 1); });
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
    // The barrier also publishes step kt + 1's decoded tile.
    refillAndYield(stage, kt, steps, copies, first, acc);
    return SmallVector<Value>(loop.getResults());
  }

  const GroupedGEMM &g;
  KernelEmission &e;
  Operation *op;
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;
  WGMMAEmitter em;
  MMAEmitter mma;
  bool specialised, mxfp4, rowsByTMA;
  MXFP4TileRows mxfp4Rows;
  MXFP4WeightRow weightRow;
  int64_t experts = 0, topK = 0;
  Value pairs, mTile, nTile, sourcePairs, rowsView, bars, rowWeights;
  /// The persistent schedule's slots of a tile's expert and rows: the
  /// producer's (locateSegmentTileInBlock) and the consumers'.
  Value found, published;
  SmallVector<Value> mapArgs, weightMaps, weightBytes;
  /// The rows' tensor-map parameter and map (rowsByTMA).
  Value rowsMapArg, rowsMap;
  /// A value of the tensor-map type that names the operand tiles' swizzle
  /// for their wgmma descriptors.
  Value swizzle;

public:
  Value nTileIndex() const { return nTile; }
};

/// The GLU epilogue (gate in the tile's first half of columns, up in the
/// second): act(gate, up) of the tile's channels as bf16 rows of h [rows,
/// inter]. Each thread writes 2 channels per row.
LogicalResult emitGLUKernel(const GroupedGEMM &g, KernelEmission &e,
                            Operation *op, GLUActivation act, FloatAttr beta,
                            FloatAttr linearBeta, int64_t inter) {
  GroupedKernel k(g, e, op);
  KernelBuilder &kb = e.kb;
  OpBuilder &b = kb.builder();
  Location loc = op->getLoc();
  KernelOperand h = e.outputs[0];
  int64_t channels = k.tileN / 2;
  MMAEmitter mma{b, loc, kb};
  Value hRows = mma.contiguousView(
      h.base,
      {kb.numElements(ArrayRef<int64_t>(h.shape).drop_back()), kb.idx(inter)});
  Epilogue epi;
  epi.values = [&](const EpilogueValues &x) -> Value {
    int64_t width = cast<VectorType>(x.v.getType()).getNumElements();
    SmallVector<Value> out;
    for (int64_t i = 0; i < width; ++i)
      out.push_back(mma.bf16(emitGLUActivation(
          kb, act, optionalDouble(beta), optionalDouble(linearBeta),
          mma.extract(x.v, {i}), mma.extract(x.up, {i}),
          [&](Value v) { return mma.sigmoidApprox(v); })));
    return vector::FromElementsOp::create(
        b, loc, VectorType::get({width}, b.getBF16Type()), out);
  };
  // Even columns of the tile and of h.
  epi.store = [&](Value r, Value col, Value v) {
    Value channel = kb.addi(kb.muli(k.nTileIndex(), kb.idx(channels)), col);
    mma.alignedStore(v, hRows, ValueRange{kb.addi(k.rowStart, r), channel});
  };
  LogicalResult r = k.emit(epi);
  if (failed(r))
    return failure();
  e.finishSinglePhase(loc);
  return success();
}

/// Output columns of the config's tile (128, or 256 for the
/// warp-specialised schedule).
int64_t tileColumns(const KernelEmission &e) { return e.config.getTile()[1]; }

struct GroupedGLUPattern : OpKernelPattern<MoEGroupedGLUOp> {
  GroupedGLUPattern() : OpKernelPattern(KernelKind::moe_grouped_wgmma) {}
  LogicalResult emit(MoEGroupedGLUOp op, Adaptor a,
                     KernelEmission &e) const override {
    GroupedGEMM g{true,
                  false,
                  a.getInput(),
                  RoutingTables::of(a),
                  {5, 6},
                  a.getInput().shape[1],
                  a.getW1().shape[1] / (tileColumns(e) / 2),
                  tileColumns(e) / 2,
                  KernelOperand(),
                  {a.getW1(), a.getW3()}};
    return emitGLUKernel(g, e, op, op.getActivation(), op.getBetaAttr(),
                         op.getLinearBetaAttr(), a.getW1().shape[1]);
  }
};

/// k3.glu_gate_up: the same kernel over all rows with 2-D weights.
struct DenseGLUPattern : OpKernelPattern<GLUGateUpOp> {
  DenseGLUPattern() : OpKernelPattern(KernelKind::glu_wgmma) {}
  LogicalResult emit(GLUGateUpOp op, Adaptor a,
                     KernelEmission &e) const override {
    int64_t inter = a.getWGate().shape[0];
    GroupedGEMM g{true,
                  true,
                  a.getInput(),
                  RoutingTables(),
                  {1, 2},
                  a.getInput().shape[1],
                  inter / (tileColumns(e) / 2),
                  tileColumns(e) / 2,
                  KernelOperand(),
                  {a.getWGate(), a.getWUp()}};
    return emitGLUKernel(g, e, op, op.getActivation(), op.getBetaAttr(),
                         op.getLinearBetaAttr(), inter);
  }
};

struct GroupedDownPattern : OpKernelPattern<MoEGroupedDownOp> {
  GroupedDownPattern() : OpKernelPattern(KernelKind::moe_grouped_wgmma) {}
  LogicalResult emit(MoEGroupedDownOp op, Adaptor a,
                     KernelEmission &e) const override {
    int64_t width = a.getW2().shape[1];
    GroupedGEMM g{false,
                  false,
                  a.getInput(),
                  RoutingTables::of(a),
                  {6},
                  a.getInput().shape[2],
                  width / tileColumns(e),
                  tileColumns(e),
                  a.getWeights(),
                  {a.getW2()}};
    GroupedKernel k(g, e, op);
    KernelBuilder &kb = e.kb;
    OpBuilder &b = kb.builder();
    Location loc = op.getLoc();
    KernelOperand y = e.outputs[0];
    MMAEmitter mma{b, loc, kb};
    Value pairs = kb.numElements(ArrayRef<int64_t>(y.shape).take_front(2));
    Value yRows = mma.contiguousView(y.base, {pairs, kb.idx(width)});
    // The rows' type: f32, or bf16 under the bf16 policy (rounded once
    // here, summed in f32 by the combine).
    Type rowType = cast<MemRefType>(yRows.getType()).getElementType();
    Epilogue epi;
    epi.values = [&](const EpilogueValues &x) -> Value {
      auto type = cast<VectorType>(x.v.getType());
      Value scaled = arith::MulFOp::create(
          b, loc, x.v, vector::BroadcastOp::create(b, loc, type, x.rowWeight));
      if (rowType.isF32())
        return scaled;
      return arith::TruncFOp::create(
          b, loc, VectorType::get(type.getShape(), rowType), scaled);
    };
    epi.store = [&](Value r, Value col, Value v) {
      Value column = kb.addi(kb.muli(k.nTileIndex(), kb.idx(k.tileN)), col);
      mma.alignedStore(v, yRows, ValueRange{kb.addi(k.rowStart, r), column});
    };
    LogicalResult r = k.emit(epi);
    if (failed(r))
      return failure();
    e.finishSinglePhase(loc);
    return success();
  }
};

} // namespace

void mlir::k3::populateMoEGroupedWGMMAPatterns(KernelPatternSet &patterns) {
  patterns.add<GroupedGLUPattern, GroupedDownPattern, DenseGLUPattern>();
}
