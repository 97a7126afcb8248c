//===- MoEGroupedKernel.h - the grouped MoE wgmma kernel --------*- C++ -*-===//
//
// k3.moe_grouped_glu and k3.moe_grouped_down on Hopper (config kernel
// `moe_grouped_wgmma`), in one of three schedules chosen by the config's
// tile: one warpgroup per 128-row tile of one expert's segment of the
// sorted rows and 128 output columns (below); or [128, 256, 64],
// persistent and warp-specialised (emitPersistent: a block per SM walks
// the tiles, a producer warpgroup and two consumers that write from their
// registers or through shared memory; docs/moe.md); or the tall
// [384, 128, 64] tiles of the same persistent schedule, for dispatch
// tables cut in 384-row tiles (consumeTall; docs/moe.md, "Tall tiles").
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
//   segment are zero-filled (a tall tile copies only the segment's: the
//   stale rows reach only accumulator rows that no epilogue writes). `stages`
//   buffers: the cp.async groups and one mbarrier per stage for the TMA bytes;
//   a proxy fence makes the cp.async bytes visible to wgmma.
// - The down GEMM's rows are h's own sorted rows, contiguous: they come by
//   TMA too (a rank-2 map over h [T, K, I] read as [T K, I]; a tall tile's
//   in boxes of 128 rows, a box holding at most 256), so its main loop
//   waits on mbarriers alone, as the dense linear's does. A tile's
//   rows past its segment are the next expert's (or zeros past T K): their
//   products land in accumulator rows that the epilogue never writes.
// - Clusters (config `cluster = 2`, the down GEMM): a 128 x 128 tile reads
//   as many bytes of rows as of weights from L2, and at three blocks an SM
//   the kernel ran at L2's bandwidth (Nsight Compute: 94 % of L2
//   throughput, docs/moe.md). Two blocks of one cluster (grid y = its
//   rank) take the same row tile and adjacent column tiles: each loads 64
//   of the tile's 128 rows by TMA multicast into both blocks' stage, so
//   the rows cross L2 once for the pair. Each block's stage barrier still
//   expects the whole stage's bytes (its half and its peer's). A stage is
//   refilled (into both blocks) only after both blocks are done with it:
//   the step's block barrier becomes a cluster barrier (relaxed: the
//   stage's reads are wgmma's, complete at its wait_group before the
//   arrive, and the peer's overwrite is a TMA issued after its wait; the
//   barrier orders execution, not memory, which this relies on, where
//   CUTLASS frees a stage with a releasing mbarrier arrive. A releasing
//   cluster arrive measured slower). Pairs always share: the row tile (and
//   so its expert, rows and liveness) is the same for both. Opt-in: on
//   the H100 it is level with the default (docs/moe.md, "Cluster pairs").
// - Gate/up: the weight tile is 64 rows of W1 above the same 64 rows of
//   W3, so one 128-column product holds both halves of 64 channels, and
//   the epilogue writes act(gate, up) as bf16 h.
// - Down: the epilogue writes each row times its routing weight, in the
//   rows' type (f32, or bf16 under the bf16 policy).
// - Rows as wgmma's N (the one-warpgroup tile [128, 128, 64, S], S = 8, 16
//   or 32): a tile's products cover its rows in steps of S instead of
//   64-row halves. An expert's last tile often holds a few rows (K3's
//   segments at T = 8192, top-16 of 896, average 146: a tile of 128 and
//   one of 18, whose 64-row half computes 192 rows for 146). A block takes
//   the branch of its rows rounded up to S (uniform per block: no
//   accumulator crosses control flow inside a loop) and multiplies the
//   weight tile's two 64-row halves as A by the first N rows of the rows
//   tile as B (C^T = W X^T: two 64 x N accumulators, gate and up, or two
//   halves of the 128 output columns); the accumulators go to the f32
//   epilogue tile transposed, and the epilogue reads it as before. Rows
//   rounded to 64 or 128 keep the halves' products. Opt-in: measured level
//   with the halves (a partial tile still streams every weight tile of its
//   expert; docs/moe.md, "Rows as wgmma's N").
// - MXFP4 weights (f4E2M1FN, the one-warpgroup schedule): no TMA; each
//   thread stages one weight row's codes and scales by cp.async in the
//   rows' group and, once it landed, decodes them into the stage's bf16
//   tile in the swizzle (MXFP4Tile.h) before the fence that publishes the
//   rows.
//
// The kernel class; its methods live by job: the operands and loads that
// both schedules share (MoEGroupedKernel.cpp), the one-warpgroup schedule
// and the patterns (MoEGroupedWGMMA.cpp), the persistent
// warp-specialised schedule (MoEGroupedPersistent.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_MOEGROUPEDKERNEL_H
#define K3_LOWERING_CUDA_MOEGROUPEDKERNEL_H

#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/cuda/MXFP4Tile.h"
#include "lowering/cuda/MoESegments.h"
#include "lowering/cuda/SharedResultTile.h"
#include "lowering/cuda/TileCounter.h"
#include "lowering/cuda/TileRaster.h"
#include "lowering/cuda/WGMMA.h"
#include "lowering/cuda/WGMMAPipeline.h"
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::k3::grouped_wgmma {

constexpr int64_t kTile = kWGMMATileRows, kTileK = kWGMMATileK;
/// Threads of one warpgroup: the copying threads (all of the block, or the
/// warp-specialised schedule's producer).
constexpr int64_t kThreads = 128;
/// The warp-specialised schedule's consumer warpgroups.
constexpr int64_t kConsumers = 2;
/// A tall tile's row chunks a producer thread copies together
/// (copyRowsInLoop): 8 of its 24.
constexpr int64_t kRowCopyGroup = 8;
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

/// One place the epilogue writes: tile row `r` (of tileM) and tile column
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
inline void forTileRows(KernelBuilder &kb, Value t, int64_t threads,
                        int64_t perRow, Value rows,
                        const std::function<void(Value, Value)> &body) {
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
      : tileN(e.config.getTile()[1]), tileM(e.config.getTile()[0]), g(g), e(e),
        op(op), b(e.kb.builder()), loc(op->getLoc()), kb(e.kb),
        em{b, loc, kb, e.config.getStages()}, mma{b, loc, kb},
        specialised(tileN == 256 || tileM > kTile), mxfp4(g.mxfp4()),
        rowsByTMA(g.rowsByTMA()),
        clusterBlocks(std::max<int64_t>(1, e.config.getCluster())),
        rowStep(e.config.getTile().size() == 4 ? e.config.getTile()[3] : 0),
        sharedColumns(groupedSharedEpilogueColumns(op, e.config)),
        counter(e.config.getScheduler() == TileScheduler::counter),
        prefetch(e.config.getPrefetch()), mxfp4Rows(em, mma, tileN) {
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

  LogicalResult emit(const Epilogue &epi);

  /// Rows of this tile inside the segment, and the first's sorted index.
  Value rowStart, validRows, expert, tid, smem, base;
  /// Output columns of one tile (gate/up: both halves), and rows of one
  /// stage's tile of rows (the tables' tiles: 128, or a tall tile's 384).
  int64_t tileN, tileM;

private:
  int64_t threads() const {
    return specialised ? kThreads * (1 + kConsumers) : kThreads;
  }
  /// Bytes of one stage: the rows' tileM x 64 tile, then the weights'.
  int64_t stageBytes() const { return (tileM + tileN) * kTileK * 2; }
  /// Rows each producer thread copies (one 16-byte chunk each).
  int64_t rowsPerThread() const { return tileM * (kTileK / 8) / kThreads; }
  /// The stage's tile of rows.
  Value rowsTile(Value stage) {
    return em.view(smem, stageOffset(stage, 0),
                   em.tileType({tileM, kTileK}, b.getBF16Type()));
  }
  /// One expert over all rows: a block per (128-row tile, column tile).
  LogicalResult emitDense(const KernelBuilder::Linear &tokens,
                          const Epilogue &epi);

  /// The rows' box, outermost first: tileM rows of [T K] (half in a
  /// cluster pair, which loads half each), 64 k.
  SmallVector<int64_t> rowBox() const {
    return {(tall() ? kTile : tileM) / clusterBlocks, kTileK};
  }
  /// A tall tile's TMA bytes a stage: the weights' tile and the boxes of
  /// 128 rows that hold segment rows.
  Value tallStageBytes();

  /// Whether the tile is tall ([384, 128, 64], MoEGroupedPersistent.cpp,
  /// "Tall tiles"): each consumer multiplies three 64-row chunks.
  bool tall() const { return tileM > kTile; }

  /// Whether the blocks run in cluster pairs (cluster 2): the one-warpgroup
  /// down GEMM's share the rows, the persistent gate/up GEMM's the weights
  /// (pairedWeights).
  bool paired() const { return clusterBlocks == 2; }
  bool pairedWeights() const { return paired() && specialised; }

  /// Every thread of the block, or (paired) of the cluster, at one point:
  /// a stage's buffers are free once both blocks of a pair passed it.
  void blockSync();

  /// A weight tile's box, outermost first: [1 expert,] rows, 64 k.
  SmallVector<int64_t> weightBox() const {
    if (g.dense)
      return {g.weightRowsPerMap, kTileK};
    return {1, g.weightRowsPerMap, kTileK};
  }

  /// Tensor-map parameters after the sizes, one per weight operand: a box
  /// of 64 k x `weightRowsPerMap` rows x one expert.
  void addTensorMapParameters();

  /// This thread's rows of the A tile: tile row, source row, in range.
  struct RowCopy {
    Value tileRow, column, sourceRow, valid;
  };
  SmallVector<RowCopy> rowCopies();
  /// The thread's q-th row chunk (tile row tid / 8 + 16 q).
  RowCopy rowCopy(Value q);
  /// A tall tile's copies of k-step `kt`: its 24 row chunks a thread in
  /// groups of kRowCopyGroup, found again at each step (their row sources
  /// hit L1), so that the producer's few registers hold a group.
  void copyRowsInLoop(Value stage, Value kt);

  Value stageOffset(Value stage, int64_t which);

  /// This thread's row chunks of k-step `kt` into `stage` (cp.async).
  void copyRows(Value stage, Value kt, ArrayRef<RowCopy> copies);

  /// The TMA tiles of k-step `kt` into `stage`, completing on `barriers`
  /// (one thread): the weights', and the rows' when rowsByTMA.
  void loadTMATiles(Value stage, Value kt, Value barriers);

  /// The weight tiles' coordinates at k column `k0`, innermost first:
  /// (k, n[, expert]).
  SmallVector<Value> weightCoordinates(Value k0);

  /// The TMA tiles of k-step `kt` prefetched into L2 (one thread; config
  /// `prefetch`): the weights', and the rows' when rowsByTMA.
  void prefetchTMATiles(Value kt);

  /// With config `prefetch` P, step kt + P's TMA tiles prefetched into L2
  /// when it is one of the tile's `steps` (by the thread that loads step
  /// kt). Within a tile only: the next tile's expert is not known yet.
  void prefetchAhead(Value kt, Value steps);

  /// TMA bytes of one stage: the weights' tile, and the rows' (rowsByTMA).
  int64_t tmaStageBytes() const {
    return tileN * kTileK * 2 + (rowsByTMA ? tileM * kTileK * 2 : 0);
  }

  /// Every thread's row chunks of k-step `kt`, and thread 0's weight tiles
  /// (and its L2 prefetch of step kt + prefetch's).
  void issue(Value stage, Value kt, ArrayRef<RowCopy> copies, Value first);

  /// MXFP4: the stage's staging bytes, after every stage's tiles.
  Value stagingOf(Value stage);

  /// MXFP4: this thread's weight row (tile row tid): the weight of its
  /// half (gate/up: W1 above W3) and its row in the expert's stack.
  MXFP4WeightRow mxfp4WeightRow();

  /// The operands' views and tensor maps.
  void setUpOperands();

  /// Thread r's row weight (down), loaded before the products so that its
  /// two dependent loads are long done by the epilogue (read there in a
  /// loop over rows, they were latency-bound).
  Value rowWeight(Value r) { return weightOfPair(rowPair(r)); }
  /// Tile row r's (token, slot) pair (down; rows past the segment read the
  /// last row's), and that pair's routing weight.
  Value rowPair(Value r);
  Value weightOfPair(Value pair);

  void body(const Epilogue &epi);

  /// The stages' mbarriers (one arrival: thread 0's expect-tx) and the
  /// tensor maps' prefetch by thread `first`, then a block (or, paired,
  /// cluster) barrier; bf16 weights only (MXFP4 stages by cp.async).
  void initStageBarriers(Value first);

  /// The warp-specialised schedule (WGMMAPipeline.h), persistent: a block
  /// per SM walks the tiles bid, bid + grid, ...; warpgroup 0 loads the
  /// weights (TMA) and the rows (TMA, or cp.async gathered by token),
  /// warpgroups 1 and 2 multiply 64 rows each (a tall tile: up to three
  /// 64-row chunks each, consumeTall) by all tileN columns and
  /// write them from their registers. No tile's epilogue touches the
  /// stages, so the producer fills the next tile's while the consumers
  /// write this one (a block per tile left its prologue and epilogue
  /// exposed at one block per SM: Nsight Compute counted 0.36 eligible
  /// warps a scheduler, docs/gemm.md).
  LogicalResult emitPersistent(const Epilogue &epi);

  /// Tile `tile`'s row and column tiles, row tiles outermost (the column
  /// tiles of a row tile are neighbours: its rows are read from L2).
  void setTile(Value tile);

  /// A one-expert row tile's rows (k3.glu_gate_up: every row).
  void setDenseRows();

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

  /// The producer warpgroup's start: the tensor maps prefetched, its
  /// registers given up.
  void startProducer(WGMMAPipeline &pipe);
  /// The producer's loads of one tile's `steps` steps from pipeline step
  /// `first` (the members hold its expert and rows): TMA alone, or with
  /// the rows' copies; `publish` before the first arrive.
  void produceSteps(WGMMAPipeline &pipe, Value first, Value steps,
                    const WGMMAPipeline::Publish &publish);
  /// Consumer `consumer`'s thread index within its warpgroup.
  Value consumerThread(Value consumer);
  /// A consumer's products of one tile's steps from `first` (its rows of
  /// the rows tile from `firstRow`, the members holding the tile's rows)
  /// and its epilogue.
  void consumeRows(WGMMAPipeline &pipe, Value first, Value steps, Value t,
                   Value firstRow, const Epilogue &epi);
  /// A consumer's share of a tall tile: its chunks c = consumer, consumer
  /// + 2, ... of 64 rows that hold rows of the segment (none: the stages
  /// released unmultiplied), their products and epilogues.
  void consumeTall(WGMMAPipeline &pipe, Value first, Value steps, Value t,
                   Value consumer, const Epilogue &epi);
  /// The products of `count` chunks (consumer + 2 j) and their epilogues.
  void consumeChunks(WGMMAPipeline &pipe, Value first, Value steps, Value t,
                     Value consumer, int64_t count, const Epilogue &epi);

  /// The producer warpgroup: per tile, its expert and rows found by the
  /// warpgroup (a named barrier over its 128 threads), published to the
  /// consumers by thread 0 before the tile's first arrive, then its steps.
  void produceTiles(WGMMAPipeline &pipe, Value total, Value steps);

  /// The counter scheduler's claim i (TileCounter.h): thread 0 claims,
  /// the producer's threads read it from `claims[i % 2]` after a named
  /// barrier (the holder of claim i + 2 writes once every producer thread
  /// passed claim i + 1's barrier, after reading claim i).
  Value claimTile(TileCounter &tiles, Value i);
  /// A weight-sharing pair's claim i: rank 0's thread 0 claims and signals
  /// `claimed[i % 2]` of rank 1, whose producer threads read the claim
  /// from rank 0's `claims[i % 2]` (k3gpu.cluster_load). Rank 0 reaches
  /// claim i + 2 only after rank 1's consumers released most of tile
  /// i + 1's stages, which rank 1's producer filled after reading claim
  /// i + 1: the slot is not rewritten under a read.
  Value claimPairTile(TileCounter &tiles, Value i);

  /// The code past a persistent kernel's last tile that ends the
  /// consumers' walk: `total` tiles, or a pair's codes (pair tile C +
  /// column tile) past its `total` pair tiles.
  Value publishedEnd(Value total);

  /// A weight-sharing pair's tile `pairTile` (MoEGroupedPersistent.cpp,
  /// "Pairs"): sets expert, rowStart, validRows, nTile and sharedWeights
  /// for this block's rank; returns the code the consumers get (pairTile
  /// C + nTile, C the column tiles).
  Value locatePairTile(Value pairTile, Value i);
  /// The producer's end with the counter scheduler: an empty step whose
  /// slot holds a tile past the end (`total`) for the consumers, then
  /// thread 0's TileCounter::finish.
  void endClaims(WGMMAPipeline &pipe, TileCounter &tiles, Value i, Value total,
                 Value steps);

  /// A consumer warpgroup: per tile, the published expert and rows (once
  /// the tile's first stage is full), (down) its threads' two rows'
  /// routing weights, the products, and the epilogue from registers.
  void consumeTiles(WGMMAPipeline &pipe, Value total, Value steps,
                    Value consumer, const Epilogue &epi);

  /// The warp-specialised epilogue: the consumer's registers, two adjacent
  /// columns of one row at a time; the gate/up GEMM's ups are the column
  /// groups tileN / 16 further.
  void epilogueFromRegisters(const AccumulatorFragment &f, ArrayRef<Value> rows,
                             ArrayRef<Value> weights, const Epilogue &epi);

  /// The warp-specialised epilogue through shared memory
  /// (sharedColumns > 0): the consumer's 64 rows of bf16 results into its
  /// own tile, as 64 x 64 boxes in the 128-byte swizzle; a half whose 64
  /// rows all lie in the segment (or any half of the dense GLU, whose
  /// rows past T the map clips) goes out as thread 0's TMA stores, which
  /// run on while the next tile multiplies; a segment's last, partial
  /// half by the consumer's threads, 16 bytes a row chunk, so that no
  /// write reaches the next expert's rows.
  void epilogueThroughShared(const AccumulatorFragment &f, Value t,
                             Value consumer, Value firstRow,
                             ArrayRef<Value> rows, ArrayRef<Value> weights,
                             const Epilogue &epi);
  /// The partial half's rows (`count` of them) copied from the consumer's
  /// tile to the result by its 128 threads.
  void copyPartialHalf(SharedResultTile &tile, Value t, Value firstRow,
                       Value count, const Epilogue &epi);

  /// The one-warpgroup schedule's epilogue: the f32 tile in shared memory
  /// (rows below validRows), each thread 2 (gate/up) or 4 columns of a row
  /// at a time.
  void epilogueFromTile(Value tile, const Epilogue &epi);

  /// bar.sync `id` over `threads` threads.
  void namedBarrier(int32_t id, int64_t threads);

  /// A consumer's products of one landed stage: the rows tile's 64 rows
  /// from row `first` against all tileN weight rows, four k-steps of 16,
  /// issued without waiting.
  Value multiplyRows(Value stage, Value first, Value acc,
                     int64_t pending = 2 * kTileK / kWGMMAK);

  /// The k-step loop over `halves` 64 x n accumulators, zeroed.
  scf::ForOp stepLoop(int64_t steps, int64_t halves = 2, int64_t n = kTile);

  /// A step's end: once every warp is done with `stage` (a block barrier),
  /// the copies of step kt + stages into it, their group, and `acc`.
  void refillAndYield(Value stage, Value kt, int64_t steps,
                      ArrayRef<RowCopy> copies, Value first, ValueRange acc);

  /// The main loop over the tile's first `halves` 64-row halves, or, with
  /// `rowsAsN` > 0, over the tile's first rowsAsN rows as wgmma's N (two
  /// 64 x rowsAsN accumulators of the weight tile's halves).
  SmallVector<Value> mainLoop(Value first, int64_t steps,
                              ArrayRef<RowCopy> copies, Value group,
                              int64_t halves, int64_t rowsAsN = 0);

  /// The tile's products and epilogue in the branch of its rows rounded up
  /// to rowStep (the tile [128, 128, 64, rowStep]): rows as wgmma's N, or
  /// the halves where the rounded rows are 64 or 128. `finish` takes the
  /// accumulators and their N (0: the halves' products).
  void productsByRowStep(
      Value first, int64_t steps, ArrayRef<RowCopy> copies, Value group,
      const std::function<void(ArrayRef<Value>, int64_t)> &finish);

  /// The main loop of a cluster pair (rows by TMA): step kt's products
  /// are issued before step kt - 1's stage is released, so that the
  /// cluster barrier that frees it for both blocks waits while the tensor
  /// cores work (a barrier after drained products, as mainLoop's, left
  /// each step's barrier exposed, and measured slower). The refill
  /// has `stages - 1` steps to land: 3 stages or more.
  SmallVector<Value> mainLoopPaired(Value first, int64_t steps,
                                    ArrayRef<RowCopy> copies, int64_t halves);

  /// This thread's generic-proxy writes of shared memory (its cp.async
  /// copies that landed, its decoded weights) made visible to wgmma's
  /// async proxy; a block barrier then publishes everyone's.
  void fenceForWGMMA();

  /// Once this thread's copies of step `kt` landed (at most `pending`
  /// later groups in flight): its weight row of the step decoded into the
  /// stage's tile, and both fenced for wgmma.
  void decodeLanded(Value kt, Value group, int32_t pending);

  /// The main loop with MXFP4 weights: the decode of step kt + 1 runs
  /// while step kt's wgmma groups do (they read another stage), so that
  /// the tensor cores and the integer units overlap within a block too.
  /// The copies of step kt + 1 were issued `stages - 1` steps before.
  SmallVector<Value> mainLoopMXFP4(Value first, int64_t steps,
                                   ArrayRef<RowCopy> copies, Value group);

  const GroupedGEMM &g;
  KernelEmission &e;
  Operation *op;
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;
  WGMMAEmitter em;
  MMAEmitter mma;
  bool specialised, mxfp4, rowsByTMA;
  int64_t clusterBlocks;
  /// The rows' step of the products (tile [128, 128, 64, rowStep]; 0: the
  /// 64-row halves).
  int64_t rowStep;
  /// Result columns a tile writes through shared memory (0: from
  /// registers).
  int64_t sharedColumns;
  /// Whether the persistent schedule's blocks claim their tiles from a
  /// device counter (TileCounter.h) instead of striding.
  bool counter;
  /// K-steps between a refill's step and the step whose TMA tiles it
  /// prefetches into L2 (0: none).
  int64_t prefetch;
  MXFP4TileRows mxfp4Rows;
  MXFP4WeightRow weightRow;
  int64_t experts = 0, topK = 0;
  Value pairs, mTile, nTile, sourcePairs, rowsView, bars, rowWeights;
  /// The block's rank in its cluster pair (its block index in y).
  Value rank;
  /// A weight-sharing pair's tile: whether both blocks take one weight
  /// tile (each loads half, multicast) or each its own; and rank 1's
  /// barriers for rank 0's claims.
  Value sharedWeights, claimed;
  /// A pair's consumer thread's lane (its releases reach both blocks).
  Value lane;
  /// The dense GLU's 128-row tiles, computed once before its tiles (the
  /// grouped ops': none).
  Value denseRowTiles;
  /// The persistent schedule's slots of a tile's expert and rows: the
  /// producer's (locateSegmentTileInBlock) and the consumers' (their
  /// `extra`: the tile); the counter scheduler's claims (2 i32).
  Value found, published, claims;
  SmallVector<Value> mapArgs, weightMaps, weightBytes;
  /// The rows' tensor-map parameter and map (rowsByTMA).
  Value rowsMapArg, rowsMap;
  /// The result's tensor-map parameter and map, 64 x 64 boxes
  /// (sharedColumns > 0).
  Value resultMapArg, resultMap;
  /// A value of the tensor-map type that names the operand tiles' swizzle
  /// for their wgmma descriptors.
  Value swizzle;

public:
  Value nTileIndex() const { return nTile; }
};

} // namespace mlir::k3::grouped_wgmma

#endif // K3_LOWERING_CUDA_MOEGROUPEDKERNEL_H
