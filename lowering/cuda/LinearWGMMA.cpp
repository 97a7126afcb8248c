//===- LinearWGMMA.cpp - k3.linear with TMA and wgmma -----------*- C++ -*-===//
//
// y = x W^T for bf16 x [T, K] and W [N, K] on Hopper (config kernel
// `linear_tma_wgmma`), in one of two schedules chosen by the config's tile:
//
// - [128, 128, 64], one warpgroup: a block per 128 x 128 output tile.
//   Thread 0 streams 128 x 64 tiles of x and W into `stages` shared-memory
//   buffers with TMA, each stage completing an mbarrier; the warpgroup
//   multiplies every landed stage (m64n128k16, two m64 halves), drains it,
//   and thread 0 refills that stage `stages` steps ahead. Several blocks
//   share an SM so that one's drains hide behind another's products.
// - [128, 256, 64], warp-specialised and persistent (WGMMAPipeline.h): a
//   block of three warpgroups per SM walks the 128 x 256 output tiles.
//   Warpgroup 0's thread 0 streams x's 128 x 64 and W's 256 x 64 tiles;
//   warpgroups 1 and 2 each own 64 rows and all 256 columns (m64n256k16:
//   half the shared-memory reads per product of two m64n128 halves), keep
//   the next stage's products queued while the last one is released, and
//   write the tile from their registers while the producer loads the next.
//   With bf16 results and at most 3 stages each consumer writes its rows
//   into a shared tile and TMA stores it, the stores running on while the
//   next tile multiplies (linearStoresThroughShared; the registers'
//   direct stores, which the tensor cores waited for, are the fallback).
//   With `cluster = 2` the blocks run in pairs (a cluster of two, grid y
//   its rank) that take two adjacent row tiles of one column tile: each
//   producer loads its 128 x 64 x tile and half of the shared 256 x 64 W
//   tile, multicast into both blocks, so W crosses L2 once per pair (the
//   2-CTA clusters of cuBLAS's and CUTLASS's Hopper GEMMs).
// A k3.linear_group (k3-group-linears in prefill: a KDA layer's q, k, v,
// f_a, b and g_a projections of one input) runs as one grid: the weights'
// column tiles end to end, a block's tile picking its weight's tensor map
// and result. Six launches of 2080, 65 and 33 blocks (T = 8192) became one:
// the narrow projections' K loops no longer run on half the SMs alone.
//
// Both: TMA with the 128-byte swizzle, zero fill past the last token and
// past the last weight row of a partial last column tile (N = 576 runs
// here); rows past the last token and columns past N are not written.
// Everything is built from upstream nvgpu ops on typed values (tensormap
// descriptors, mbarrier groups, warpgroup descriptors and accumulators); the
// runtime encodes the tensor maps per call (#k3.tensor_map on the kernel,
// ArtifactPlan.cpp).
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/cuda/SharedResultTile.h"
#include "lowering/cuda/TileRaster.h"
#include "lowering/cuda/WGMMA.h"
#include "lowering/cuda/WGMMAPipeline.h"
#include "lowering/kernels/Operands.h"

#include "dialects/K3GPU/K3GPUDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

constexpr int64_t kTileK = kWGMMATileK;
/// The warp-specialised schedule's consumer warpgroups.
constexpr int64_t kConsumers = 2;
/// The whole kernel for one op; its steps are the methods.
class LinearWGMMAKernel {
public:
  /// `op` is a k3.linear or a k3.linear_group: input x, then the weights.
  LinearWGMMAKernel(Operation *op, KernelEmission &e)
      : op(op), e(e), b(e.kb.builder()), loc(op->getLoc()), kb(e.kb),
        em{b, loc, kb, e.config.getStages()}, tileM(e.config.getTile()[0]),
        tileN(e.config.getTile()[1]), raster(e.config.getRaster()),
        specialised(linearWideTile(e.config)),
        peers(specialised && e.config.getCluster() == 2 ? 2 : 1),
        splitK(!specialised && e.config.getCluster() > 1 ? e.config.getCluster()
                                                         : 1),
        throughShared(linearStoresThroughShared(op, e.config)) {}

  LogicalResult emit() {
    const KernelOperand &x = e.inputs[0];
    nIn = e.inputs[1].shape[1];
    // Weight i's column tiles are [firstTile[i], firstTile[i + 1]). The
    // last of each may be partial (N = 576: 4.5 tiles): TMA fills W's rows
    // past N with zeros and the epilogue stores columns < N only.
    firstTile.push_back(0);
    for (const KernelOperand &w : ArrayRef(e.inputs).drop_front()) {
      nOuts.push_back(w.shape[0]);
      firstTile.push_back(firstTile.back() + (w.shape[0] + tileN - 1) / tileN);
    }
    rows = kb.dim(x.shape[0]);
    auto form = kb.linearForm(rows);
    if (!form)
      return op->emitOpError() << "linear_tma_wgmma needs a row count linear "
                                  "in one runtime size";
    addTensorMapParameters();
    int64_t nb = firstTile.back();
    if (specialised)
      return emitPersistent(nb);
    int64_t threads = 128;
    // Blocks: ceil(rows / 128) row tiles x nb column tiles (a few past the
    // last row tile stay idle).
    e.setLaunch(*form, nb, (tileM - 1) * nb, tileM, {threads, 1, 1},
                linearWGMMASharedBytes(em.stages, tileN, tileM,
                                       /*sharedEpilogue=*/false, splitK > 1));
    // Split K: the tile's splitK blocks form a cluster along y, rank r
    // multiplying the r-th part of K.
    if (splitK > 1) {
      e.setClusterY(splitK);
      rank = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    }
    Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    TileCoordinates at = rasterTile(em, bid, rowTiles(), nb, raster);
    mTile = kb.muli(at.rowTile, em.idx(tileM));
    pickWeight(at.columnTile);
    // A split tile's blocks all run to its end: each waits at the
    // cluster barriers for the others.
    if (splitK > 1)
      body();
    else
      kb.ifThen(kb.lti(mTile, rows), [&] { body(); });
    return success();
  }

private:
  /// Bytes of one stage's x and W tiles.
  int64_t xTileBytes() const { return tileM * kTileK * 2; }
  int64_t stageBytes() const { return (tileM + tileN) * kTileK * 2; }
  SmallVector<int64_t> xBox() const { return {tileM, kTileK}; }
  /// Row tiles of x: ceil(rows / tileM).
  Value rowTiles() { return rowTilesOf(em, rows, tileM); }
  /// W's box: the whole tile, or a pair's half of it (each block loads one
  /// half into both).
  SmallVector<int64_t> wBox() const { return {tileN / peers, kTileK}; }

  /// Column tile j (of all weights'): its weight (`weight`), that
  /// weight's column offset (nTile) and tensor map parameter (wMapArg).
  void pickWeight(Value j) {
    weight = em.idx(0);
    Value first = em.idx(0);
    wMapArg = wMapArgs[0];
    if (throughShared)
      yMapArg = yMapArgs[0];
    for (size_t i = 1; i + 1 < firstTile.size(); ++i) {
      Value here = kb.gei(j, em.idx(firstTile[i]));
      weight = kb.select(here, em.idx(i), weight);
      first = kb.select(here, em.idx(firstTile[i]), first);
      wMapArg = arith::SelectOp::create(b, loc, here, wMapArgs[i], wMapArg);
      if (throughShared)
        yMapArg = arith::SelectOp::create(b, loc, here, yMapArgs[i], yMapArg);
    }
    nTile = kb.muli(kb.subi(j, first), em.idx(tileN));
  }

  /// The tensor maps of x and each W, after the sizes: parameters the
  /// runtime fills with each call's CUtensorMap addresses.
  void addTensorMapParameters() {
    auto fn = e.fn;
    auto ptr = LLVM::LLVMPointerType::get(b.getContext());
    unsigned n = fn.getNumArguments();
    int64_t weights = nOuts.size();
    // Appending to a kernel's own signature cannot fail.
    int64_t results = throughShared ? weights : 0;
    for (int64_t i = 0; i <= weights + results; ++i)
      (void)fn.insertArgument(n + i, ptr, DictionaryAttr(), loc);
    Block &entry = fn.getFunctionBody().front();
    xMapArg = entry.getArgument(n);
    for (int64_t i = 0; i < weights; ++i)
      wMapArgs.push_back(entry.getArgument(n + 1 + i));
    for (int64_t i = 0; i < results; ++i)
      yMapArgs.push_back(entry.getArgument(n + 1 + weights + i));
    auto map = [&](int64_t operand, int64_t boxRows) -> Attribute {
      return TensorMapAttr::get(b.getContext(), operand, {kTileK, boxRows},
                                TensorMapSwizzle::swizzle_128b);
    };
    SmallVector<Attribute> maps{map(0, tileM)};
    for (int64_t i = 0; i < weights; ++i)
      maps.push_back(map(1 + i, tileN / peers));
    // Each result (operands after the inputs) in 64 x 64 boxes.
    for (int64_t i = 0; i < results; ++i)
      maps.push_back(map(1 + weights + i, 64));
    K3Dialect::TensorMapsAttrHelper(b.getContext())
        .setAttr(fn, b.getArrayAttr(maps));
  }

  /// The x tile (which = 0, tileM x 64) or W tile (which = 1, tileN x 64)
  /// of `stage`.
  Value stageTile(Value stage, int64_t which) {
    int64_t tileRows = which ? tileN : tileM;
    return em.view(smem, stageOffset(stage, which),
                   em.tileType({tileRows, kTileK}, b.getBF16Type()));
  }
  /// The byte offset of stage's x tile (which = 0) or W tile (which = 1).
  Value stageOffset(Value stage, int64_t which) {
    return kb.addi(base, kb.addi(kb.muli(stage, em.idx(stageBytes())),
                                 em.idx(which * xTileBytes())));
  }

  /// The TMA loads of k-step `kt` into `stage`, completing on `bars`.
  void loadTiles(Value bars, Value stage, Value kt) {
    Value k0 = kb.muli(kt, em.idx(kTileK));
    nvgpu::TmaAsyncLoadOp::create(b, loc, stageTile(stage, 0), bars, tmX,
                                  ValueRange{k0, mTile}, stage, Value(),
                                  Value());
    if (peers == 1)
      return (void)nvgpu::TmaAsyncLoadOp::create(
          b, loc, stageTile(stage, 1), bars, tmW, ValueRange{k0, nTile}, stage,
          Value(), Value());
    // This block's half of W's rows, into both blocks of the pair.
    em.loadHalfMulticast(smem, stageOffset(stage, 1), tileN, rank, bars, tmW,
                         k0, nTile, stage);
  }

  /// Thread 0's loads of k-step `kt` into `stage`: both tiles, one barrier
  /// expecting their bytes.
  void issueLoads(Value stage, Value kt) {
    nvgpu::MBarrierArriveExpectTxOp::create(b, loc, bars, em.idx(stageBytes()),
                                            stage, Value());
    loadTiles(bars, stage, kt);
  }

  /// Shared memory, its aligned base and the tensor maps.
  void setUpOperands() {
    smem = dynamicSharedMemory();
    base = em.alignedBase(smem);
    tmX = em.tensorMap(xMapArg, xBox());
    tmW = em.tensorMap(wMapArg, wBox());
  }

  void body() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    Value first = kb.eqi(tid, em.idx(0));
    setUpOperands();
    bars = nvgpu::MBarrierCreateOp::create(b, loc, em.barrierType());
    for (int64_t s = 0; s < em.stages; ++s)
      nvgpu::MBarrierInitOp::create(b, loc, bars, em.idx(1), em.idx(s), first);
    nvgpu::TmaPrefetchOp::create(b, loc, tmX, first);
    nvgpu::TmaPrefetchOp::create(b, loc, tmW, first);
    gpu::BarrierOp::create(b, loc);
    // This block's k-steps: all, or its rank's part of a split K.
    int64_t steps = nIn / kTileK / splitK;
    kFirst = splitK > 1 ? kb.muli(rank, em.idx(steps)) : em.idx(0);
    kb.ifThen(first, [&] {
      for (int64_t s = 0; s < std::min(em.stages, steps); ++s)
        issueLoads(em.idx(s), kb.addi(kFirst, em.idx(s)));
    });
    SmallVector<Value> acc = mainLoop(first, steps);
    gpu::BarrierOp::create(b, loc);
    // A split tile's partial tile lies after the stages: where it covered
    // them, as the single block's tile does, the first rows that rank 0
    // read from its peers were wrong in tiles of later waves (NaN and
    // bf16-like values: stage data; measured on an H100, docs/gemm.md
    // "Split K"; the cause is not found).
    Value tileAt =
        splitK > 1 ? kb.addi(base, em.idx(em.stages * stageBytes())) : base;
    Value tile = em.storeAccumulators(smem, tileAt, acc);
    gpu::BarrierOp::create(b, loc);
    if (splitK == 1)
      return storeRows(tile, tid, /*threads=*/128);
    // Every block's partial tile written, then each sums and stores its
    // 128 / splitK rows of the tile from all of them; no block leaves
    // while another may still read its shared memory.
    // (barrier.cluster's arrive releases this block's shared-memory
    // writes, its wait acquires the others'.)
    em.clusterSync();
    storeRows(tile, tid, /*threads=*/128);
    em.clusterSync();
  }

  /// k-steps: wait for the stage, multiply it, refill it `stages` ahead
  /// (k-step kFirst + kt of K).
  SmallVector<Value> mainLoop(Value first, int64_t steps) {
    Value init = nvgpu::WarpgroupMmaInitAccumulatorOp::create(
        b, loc, em.accumulatorType(tileN));
    auto loop = scf::ForOp::create(b, loc, em.idx(0), em.idx(steps), em.idx(1),
                                   ValueRange{init, init});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value kt = loop.getInductionVar();
    Value stage = em.remuIdx(kt, em.stages);
    em.waitStage(bars, kt, stage);
    SmallVector<Value> acc =
        em.multiplyStage(stageTile(stage, 0), stageTile(stage, 1), tmX, tmW,
                         loop.getRegionIterArgs());
    // Every warp is done with the stage before thread 0 overwrites it.
    gpu::BarrierOp::create(b, loc);
    Value next = kb.addi(kt, em.idx(em.stages));
    kb.ifThen(kb.andi(first, kb.lti(next, em.idx(steps))),
              [&] { issueLoads(stage, kb.addi(kFirst, next)); });
    scf::YieldOp::create(b, loc, acc);
    return SmallVector<Value>(loop.getResults());
  }

  /// The warp-specialised schedule, persistent (WGMMAPipeline.h): a block
  /// per SM walks the tiles bid, bid + grid, ... (a row tile's column
  /// tiles side by side); warpgroup 0's thread 0 streams x's and W's tiles,
  /// warpgroups 1 and 2 multiply 64 rows each by all 256 columns and write
  /// them from their registers, so that no epilogue tile takes the stages
  /// and the next tile's loads run during this one's writes.
  LogicalResult emitPersistent(int64_t nb) {
    // A block per SM; pairs: a cluster per two SMs, grid y its rank.
    e.setLaunch(GridSymbol::device_sm_count, 1, 0, peers,
                {128 * (1 + kConsumers), 1, 1},
                linearWGMMASharedBytes(em.stages, tileN, tileM, throughShared));
    if (peers > 1) {
      e.setClusterY(peers);
      rank = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    }
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    smem = dynamicSharedMemory();
    base = em.alignedBase(smem);
    tmX = em.tensorMap(xMapArg, xBox());
    WGMMAPipeline pipe(em, kConsumers, stageBytes(), /*copies=*/false, peers);
    pipe.init(tid);
    // A pair walks pairs of row tiles (a last one past T loads zeros and
    // stores nothing), both blocks the same tiles in the same order.
    tileRowsOfOrder = em.divuIdx(kb.addi(rowTiles(), em.idx(peers - 1)), peers);
    columnTiles = nb;
    Value total = kb.muli(tileRowsOfOrder, em.idx(nb));
    Value steps = em.idx(nIn / kTileK);
    Value warpgroup = em.divuIdx(tid, 128);
    kb.ifThen(kb.eqi(warpgroup, em.idx(0)),
              [&] { produceTiles(pipe, tid, total, steps); });
    kb.ifThen(kb.gei(warpgroup, em.idx(1)),
              [&] { consumeTiles(pipe, tid, warpgroup, total, steps); });
    pipe.finish();
    return success();
  }

  /// Tile `tile` of the persistent order: its rows (a pair's rank takes
  /// its row tile of the pair), its weight and W's tensor map.
  void setPersistentTile(Value tile) {
    TileCoordinates at =
        rasterTile(em, tile, tileRowsOfOrder, columnTiles, raster);
    Value rowTile = at.rowTile;
    if (peers > 1)
      rowTile = kb.addi(kb.muli(rowTile, em.idx(peers)), rank);
    mTile = kb.muli(rowTile, em.idx(tileM));
    pickWeight(at.columnTile);
    tmW = em.tensorMap(wMapArg, wBox());
    if (throughShared)
      tmY = em.tensorMap(yMapArg, {64, 64});
  }

  /// Warpgroup 0: thread 0 streams every tile's k-steps into the stages.
  void produceTiles(WGMMAPipeline &pipe, Value tid, Value total, Value steps) {
    Value first = kb.eqi(tid, em.idx(0));
    nvgpu::TmaPrefetchOp::create(b, loc, tmX, first);
    for (Value arg : wMapArgs)
      nvgpu::TmaPrefetchOp::create(b, loc, em.tensorMap(arg, wBox()), first);
    pipe.enterProducer();
    pipe.forEachTile(total, [&](Value i, Value tile) {
      setPersistentTile(tile);
      pipe.produce(tid, kb.muli(i, steps), steps, [&](Value stage, Value kt) {
        loadTiles(pipe.fullBarriers(), stage, kt);
      });
    });
  }

  /// Warpgroups 1 and 2: each tile's 64 rows of the consumer by all its
  /// columns, written from the registers or through shared memory.
  void consumeTiles(WGMMAPipeline &pipe, Value tid, Value warpgroup,
                    Value total, Value steps) {
    Value consumer = kb.subi(warpgroup, em.idx(1));
    Value t = kb.subi(tid, kb.muli(warpgroup, em.idx(128)));
    // The consumer's rows of each of its tiles start here.
    Value first = kb.muli(consumer, em.idx(64));
    pipe.enterConsumer();
    auto body = [&](Value i, Value tile) {
      setPersistentTile(tile);
      Value acc = pipe.consume(
          kb.muli(i, steps), steps, tileN, kTileK / kWGMMAK,
          [&](Value stage, Value acc) {
            return multiplyRows(stage, first, acc);
          },
          em.remuIdx(t, 32));
      AccumulatorFragment f(em, acc, tileN, t);
      if (throughShared)
        return storeThroughShared(f, t, consumer, first);
      if (nOuts.size() == 1)
        return storeFragment(0, f, first);
      for (size_t w = 0; w < nOuts.size(); ++w)
        kb.ifThen(kb.eqi(weight, em.idx(w)),
                  [&, w] { storeFragment(w, f, first); });
    };
    pipe.forEachTile(total, body);
    // The last tile's stores complete before the block exits.
    if (throughShared)
      SharedResultTile::drain(em, t);
  }

  /// The consumer's 64 x 256 bf16 rows into its own shared tile, as four
  /// 64 x 64 boxes in the 128-byte swizzle (a warp's stores, 8 rows of 4
  /// lanes, land on 32 distinct banks), then thread 0's four TMA stores,
  /// which run on while the next tile multiplies; before it rewrites the
  /// tile, thread 0 waits until the last tile's stores have read it.
  /// Rows past T and columns past N are clipped by the stores.
  void storeThroughShared(const AccumulatorFragment &f, Value t, Value consumer,
                          Value first) {
    SharedResultTile tile(em, smem,
                          kb.addi(base, em.idx(em.stages * stageBytes())),
                          consumer, t, tileN);
    tile.acquire();
    auto bf2 = VectorType::get({2}, b.getBF16Type());
    for (int64_t j = 0; j < tileN / 8; ++j)
      for (int64_t h = 0; h < 2; ++h)
        tile.write(AccumulatorFragment::rowOf(em, t, h), f.column(j),
                   arith::TruncFOp::create(b, loc, bf2, f.pair(h, j)));
    tile.publish();
    tile.store(tmY, nTile, kb.addi(mTile, first));
  }

  /// A consumer's registers (its rows from tile row `first`) to weight
  /// w's result: rows < T, and for a partial last column tile columns < N
  /// (N % 8 = 0: a pair or a quad is inside or past N together). bf16
  /// results go four columns of one row a store (lane pairs trade rows:
  /// AccumulatorFragment::exchangeRows).
  void storeFragment(int64_t w, const AccumulatorFragment &f, Value first) {
    MMAEmitter mma{b, loc, kb};
    int64_t nOut = nOuts[w];
    Value y = mma.contiguousView(e.outputs[w].base, {rows, em.idx(nOut)});
    Type outElem = cast<MemRefType>(y.getType()).getElementType();
    bool partial = nOut % tileN != 0;
    auto store = [&](Value r, Value c, Value v) {
      Value row = kb.addi(mTile, kb.addi(first, r)), col = kb.addi(nTile, c);
      Value inside = kb.lti(row, rows);
      if (partial)
        inside = kb.andi(inside, kb.lti(col, em.idx(nOut)));
      kb.ifThen(inside, [&] { mma.alignedStore(v, y, ValueRange{row, col}); });
    };
    for (int64_t j = 0; j < tileN / 8; ++j) {
      Value v[2];
      for (int64_t h = 0; h < 2; ++h) {
        v[h] = f.pair(h, j);
        if (!outElem.isF32())
          v[h] = arith::TruncFOp::create(b, loc, VectorType::get({2}, outElem),
                                         v[h]);
      }
      if (outElem.getIntOrFloatBitWidth() == 16) {
        AccumulatorFragment::RowQuad q = f.exchangeRows(j, v[0], v[1]);
        store(q.row, q.column, q.values);
        continue;
      }
      for (int64_t h = 0; h < 2; ++h)
        store(f.row(h), f.column(j), v[h]);
    }
  }

  /// A consumer's products of one landed stage: the x tile's 64 rows from
  /// row `first` against all tileN rows of W, four k-steps of 16, issued
  /// without waiting.
  Value multiplyRows(Value stage, Value first, Value acc) {
    Value wTile = stageTile(stage, 1);
    // The consumer's 64 rows of the x tile, as a 64 x 64 tile of its own.
    Value rowsOff = kb.addi(base, kb.addi(kb.muli(stage, em.idx(stageBytes())),
                                          kb.muli(first, em.idx(kTileK * 2))));
    Value xRows =
        em.view(smem, rowsOff, em.tileType({64, kTileK}, b.getBF16Type()));
    return em.multiplyRowsStage(xRows, wTile, tmW, tileN, acc);
  }

  /// The f32 tile in shared memory (output row r at tile row r)
  /// to the block's weight's result: `threads` threads (this one `t`), 4
  /// columns each, rows < T and columns < N only.
  void storeRows(Value tile, Value t, int64_t threads) {
    if (nOuts.size() == 1)
      return storeRowsTo(0, tile, t, threads);
    for (size_t i = 0; i < nOuts.size(); ++i)
      kb.ifThen(kb.eqi(weight, em.idx(i)),
                [&, i] { storeRowsTo(i, tile, t, threads); });
  }
  void storeRowsTo(int64_t i, Value tile, Value t, int64_t threads) {
    MMAEmitter mma{b, loc, kb};
    int64_t nOut = nOuts[i];
    Value y = mma.contiguousView(e.outputs[i].base, {rows, em.idx(nOut)});
    Type outElem = cast<MemRefType>(y.getType()).getElementType();
    int64_t perRow = tileN / 4, rowStep = threads / perRow;
    // A split tile's block stores rows [rank, rank + 1) x tileM / splitK.
    int64_t span = tileM / splitK;
    Value firstRow = splitK > 1 ? kb.muli(rank, em.idx(span)) : em.idx(0);
    Value col = kb.muli(em.remuIdx(t, perRow), em.idx(4));
    auto loop =
        scf::ForOp::create(b, loc, kb.addi(firstRow, em.divuIdx(t, perRow)),
                           kb.addi(firstRow, em.idx(span)), em.idx(rowStep));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value r = loop.getInductionVar(), row = kb.addi(mTile, r);
    Value inside =
        kb.andi(kb.lti(row, rows), kb.lti(kb.addi(nTile, col), em.idx(nOut)));
    kb.ifThen(inside, [&] {
      // Rows of the tile and of y (N % 8 = 0) keep 4-column groups aligned.
      auto v4 = VectorType::get({4}, b.getF32Type());
      Value v = splitK > 1 ? sumOfPartials(v4, tile, r, col)
                           : mma.alignedLoad(v4, tile, ValueRange{r, col});
      if (!outElem.isF32())
        v = arith::TruncFOp::create(b, loc, VectorType::get({4}, outElem), v);
      mma.alignedStore(v, y, ValueRange{row, kb.addi(nTile, col)});
    });
  }

  /// The sum of the split tile's partial tiles at (r, col), in rank order
  /// (the same sum on every run): each block's f32 tile at the same
  /// offset of its shared memory (k3gpu.cluster_load).
  Value sumOfPartials(VectorType type, Value tile, Value r, Value col) {
    Value sum;
    for (int64_t p = 0; p < splitK; ++p) {
      Value peer = arith::ConstantIntOp::create(b, loc, p, 32);
      Value v = k3gpu::ClusterLoadOp::create(b, loc, type, tile,
                                             ValueRange{r, col}, peer);
      sum = sum ? arith::AddFOp::create(b, loc, sum, v).getResult() : v;
    }
    return sum;
  }

  Value dynamicSharedMemory() {
    return gpu::DynamicSharedMemoryOp::create(
        b, loc,
        MemRefType::get({ShapedType::kDynamic}, b.getI8Type(),
                        MemRefLayoutAttrInterface{}, em.workgroup()));
  }

  Operation *op;
  KernelEmission &e;
  OpBuilder &b;
  Location loc;
  KernelBuilder &kb;
  WGMMAEmitter em;
  /// The output tile: [128, 128] (one warpgroup) or [128, 256] (two
  /// consumers sharing each tile).
  int64_t tileM, tileN;
  /// Row tiles per band of the tile order (TileRaster.h).
  int64_t raster;
  bool specialised;
  /// Blocks of a cluster that share W's tiles (1: none).
  int64_t peers;
  /// Blocks of a cluster that split K (the one-warpgroup tile with
  /// cluster > 1; 1: none) and this block's first k-step.
  int64_t splitK;
  Value kFirst;
  /// Whether the consumers write their results through shared memory and
  /// TMA stores (linearStoresThroughShared), with the results' tensor-map
  /// parameters and the tile's result's map.
  bool throughShared;
  SmallVector<Value> yMapArgs;
  Value tmY;
  int64_t nIn = 0;
  /// The persistent order's rows of tiles (a pair's: pairs of row tiles)
  /// and column tiles.
  Value tileRowsOfOrder;
  int64_t columnTiles = 0;
  SmallVector<int64_t> nOuts, firstTile;
  SmallVector<Value> wMapArgs;
  Value rows, mTile, nTile, weight, xMapArg, wMapArg, yMapArg, smem, base, tmX,
      tmW, bars, rank;
};

template <typename OpT> struct LinearWGMMAPattern : OpKernelPattern<OpT> {
  LinearWGMMAPattern() : OpKernelPattern<OpT>(KernelKind::linear_tma_wgmma) {}
  LogicalResult emit(OpT op, typename OpKernelPattern<OpT>::Adaptor,
                     KernelEmission &e) const override {
    if (failed(LinearWGMMAKernel(op, e).emit()))
      return failure();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateLinearWGMMAPattern(KernelPatternSet &patterns) {
  patterns
      .add<LinearWGMMAPattern<LinearOp>, LinearWGMMAPattern<LinearGroupOp>>();
}
