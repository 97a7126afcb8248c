//===- MoEGroupedWGMMA.cpp - the grouped MoE GEMMs with wgmma ---*- C++ -*-===//
//
// k3.moe_grouped_glu and k3.moe_grouped_down on Hopper (config kernel
// `moe_grouped_wgmma`): one warpgroup per 128-row tile of one expert's
// segment of the sorted rows and 128 output columns.
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

/// Who writes the tile: `threads` threads, this one `t`; output row r is
/// the tile's row r + `skip`.
struct EpilogueThreads {
  Value t;
  int64_t threads, skip;
};

/// The epilogue: the accumulators as an f32 tile in shared memory (128 x
/// 128, or 192 x 256 for the warp-specialised schedule), (down) each tile
/// row's routing weight, a shared memref<128xf32>, and the threads.
using Epilogue = std::function<void(Value tile, Value rowWeights,
                                    const EpilogueThreads &threads)>;

class GroupedKernel {
public:
  GroupedKernel(const GroupedGEMM &g, KernelEmission &e, Operation *op)
      : tileN(e.config.getTile()[1]), g(g), e(e), op(op), b(e.kb.builder()),
        loc(op->getLoc()), kb(e.kb), em{b, loc, kb, e.config.getStages()},
        mma{b, loc, kb}, specialised(tileN == 256), mxfp4(g.mxfp4()),
        rowsByTMA(g.rowsByTMA()), mxfp4Rows(em, mma, tileN) {
    if (g.rowWeights)
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
  Value rowWeight(Value r) {
    if (!g.rowWeights)
      return Value();
    r = kb.minsi(r, kb.subi(validRows, kb.idx(1)));
    Value pair = kb.loadIndex(sourcePairs, {kb.addi(rowStart, r)});
    return kb.load(kb.view(g.rowWeights.base, {pairs}), {pair});
  }

  void body(const Epilogue &epi) {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    setUpOperands();
    if (specialised)
      return specialisedBody(epi);
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
      epi(tile, rowWeights, EpilogueThreads{tid, kThreads, 0});
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

  /// The warp-specialised schedule (WGMMAPipeline.h): warpgroup 0 copies
  /// the rows (cp.async) and loads the weights (TMA), warpgroups 1 and 2
  /// multiply 64 rows each by all tileN columns and write the tile.
  void specialisedBody(const Epilogue &epi) {
    WGMMAPipeline pipe(em, kConsumers, tmaStageBytes(),
                       /*copies=*/!rowsByTMA);
    pipe.init(tid);
    Value warpgroup = em.divuIdx(tid, kThreads);
    Value steps = kb.idx(g.reduction / kTileK);
    kb.ifThen(kb.eqi(warpgroup, kb.idx(0)), [&] {
      Value first = kb.eqi(tid, kb.idx(0));
      for (Value tm : weightMaps)
        nvgpu::TmaPrefetchOp::create(b, loc, tm, first);
      auto load = [&](Value stage, Value kt) {
        loadTMATiles(stage, kt, pipe.fullBarriers());
      };
      if (rowsByTMA) {
        nvgpu::TmaPrefetchOp::create(b, loc, rowsMap, first);
        return pipe.produce(tid, steps, load);
      }
      SmallVector<RowCopy> copies = rowCopies();
      pipe.produceWithCopies(tid, steps, load, [&](Value stage, Value kt) {
        copyRows(stage, kt, copies);
      });
    });
    kb.ifThen(kb.gei(warpgroup, kb.idx(1)), [&] {
      Value consumer = kb.subi(warpgroup, kb.idx(1));
      Value t = kb.subi(tid, kb.idx(kThreads));
      Value weight = rowWeight(t);
      Value acc = pipe.consume(consumer, steps, tileN, kTileK / kWGMMAK,
                               [&](Value stage, Value c, Value acc) {
                                 return multiplyRows(stage, c, acc);
                               });
      pipe.consumerBarrier();
      if (weight)
        kb.ifThen(kb.lti(t, kb.idx(kTile)),
                  [&] { mma.sts(weight, rowWeights, {t}); });
      // Upstream's nvgpu.warpgroup.mma.store places warp w's rows at 16 w
      // with w = tid / 32, as if its warpgroup were the block's first:
      // warpgroup g's rows land 64 g rows past the view (LinearWGMMA.cpp).
      Value tile = em.epilogueTile(smem, base, kTile + 64, tileN);
      nvgpu::WarpgroupMmaStoreOp::create(
          b, loc, acc, em.epilogueTile(smem, base, 64, tileN));
      pipe.consumerBarrier();
      epi(tile, rowWeights, EpilogueThreads{t, kThreads * kConsumers, 64});
    });
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
  SmallVector<Value> mapArgs, weightMaps, weightBytes;
  /// The rows' tensor-map parameter and map (rowsByTMA).
  Value rowsMapArg, rowsMap;
  /// A value of the tensor-map type that names the operand tiles' swizzle
  /// for their wgmma descriptors.
  Value swizzle;

public:
  Value nTileIndex() const { return nTile; }
};

/// The epilogue's rows and columns: `perRow` threads per row, thread t at
/// column group t % perRow of rows t / perRow, t / perRow + threads /
/// perRow, ... below `rows`; body(r, group) with r the output row.
void forTileRows(KernelBuilder &kb, const EpilogueThreads &w, int64_t perRow,
                 Value rows, const std::function<void(Value, Value)> &body) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  Value first = arith::DivUIOp::create(b, loc, w.t, kb.idx(perRow));
  Value group = arith::RemUIOp::create(b, loc, w.t, kb.idx(perRow));
  auto loop =
      scf::ForOp::create(b, loc, first, rows, kb.idx(w.threads / perRow));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  body(loop.getInductionVar(), group);
}

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
  LogicalResult r = k.emit([&](Value tile, Value, const EpilogueThreads &w) {
    MMAEmitter mma{b, loc, kb};
    Value hRows = mma.contiguousView(
        h.base, {kb.numElements(ArrayRef<int64_t>(h.shape).drop_back()),
                 kb.idx(inter)});
    auto v2 = VectorType::get({2}, b.getF32Type());
    forTileRows(kb, w, channels / 2, k.validRows, [&](Value r, Value group) {
      Value col = kb.muli(group, kb.idx(2));
      Value channel = kb.addi(kb.muli(k.nTileIndex(), kb.idx(channels)), col);
      Value at = kb.addi(r, kb.idx(w.skip));
      // Even columns of the tile (rows of an even stride) and of h.
      Value gate = mma.alignedLoad(v2, tile, ValueRange{at, col});
      Value up = mma.alignedLoad(
          v2, tile, ValueRange{at, kb.addi(col, kb.idx(channels))});
      SmallVector<Value> out;
      for (int64_t i = 0; i < 2; ++i)
        out.push_back(emitGLUActivation(
            kb, act, optionalDouble(beta), optionalDouble(linearBeta),
            vector::ExtractOp::create(b, loc, gate, i),
            vector::ExtractOp::create(b, loc, up, i),
            [&](Value x) { return mma.sigmoidApprox(x); }));
      mma.alignedStore(mma.pair(out[0], out[1]), hRows,
                       ValueRange{kb.addi(k.rowStart, r), channel});
    });
  });
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
    LogicalResult r = k.emit([&](Value tile, Value rowWeights,
                                 const EpilogueThreads &w) {
      Value pairs = kb.numElements(ArrayRef<int64_t>(y.shape).take_front(2));
      MMAEmitter mma{b, loc, kb};
      Value yRows = mma.contiguousView(y.base, {pairs, kb.idx(width)});
      auto v4 = VectorType::get({4}, b.getF32Type());
      // The rows' type: f32, or bf16 under the bf16 policy (rounded once
      // here, summed in f32 by the combine).
      Type rowType = cast<MemRefType>(yRows.getType()).getElementType();
      // Each thread writes 4 columns per row.
      forTileRows(kb, w, k.tileN / 4, k.validRows, [&](Value r, Value group) {
        Value col = kb.muli(group, kb.idx(4));
        Value column = kb.addi(kb.muli(k.nTileIndex(), kb.idx(k.tileN)), col);
        Value row = kb.addi(k.rowStart, r);
        Value wt = mma.lds(rowWeights, {r});
        Value v = mma.alignedLoad(v4, tile,
                                  ValueRange{kb.addi(r, kb.idx(w.skip)), col});
        Value scaled = arith::MulFOp::create(
            b, loc, v, vector::BroadcastOp::create(b, loc, v4, wt));
        if (!rowType.isF32())
          scaled = arith::TruncFOp::create(
              b, loc, VectorType::get({4}, rowType), scaled);
        mma.alignedStore(scaled, yRows, ValueRange{row, column});
      });
    });
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
