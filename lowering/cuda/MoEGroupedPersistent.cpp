//===- MoEGroupedPersistent.cpp - persistent schedule -----------*- C++ -*-===//
//
// The grouped MoE wgmma kernel's persistent warp-specialised schedule
// (MoEGroupedKernel.h, tile [128, 256, 64], or the tall [384, 128, 64]
// whose consumers multiply the 64-row chunks that hold rows, consumeTall;
// docs/moe.md, "Tall tiles"): a block per SM walks the
// tiles; the producer warpgroup finds and publishes each tile's expert and
// loads its stages, the two consumer warpgroups multiply and write from
// their registers.
//
// Pairs (the gate/up GEMM with `cluster = 2`, tiles from the counter): two
// blocks of a cluster (grid y = its rank) take the same expert's weight
// tile where they can, each loading half of it (W1's rows or W3's) by TMA
// multicast into both, so the pair reads it from L2 once. The persistent
// gate/up kernel was L2-bound (Nsight Compute: 97 % of L2 throughput, 71 %
// of DRAM's, bench/results/ncu/ncu-moe-grouped-kimi-T8192-default-
// persistent-gate-up-nvidia-h100-20261206T1530Z.txt) and the weights are
// most of its L2 reads: an expert's ~2.5 row tiles each read all of its
// weights, its rows 8 times (once per column tile) only 1/8 as many bytes.
// A pair tile of an expert with m row tiles and C column tiles is either
// shared (row tiles 2p and 2p + 1, column tile n: one weight tile) or,
// for an odd m's last row tile, solo (that row tile, column tiles 2s and
// 2s + 1: each block its own weights, rows as unpaired). An expert has C
// floor(m / 2) shared and (C / 2)(m mod 2) solo pair tiles, (C / 2) m in
// all: pair tile q belongs to the expert holding row tile q / (C / 2), and
// the pairs walk exactly the unpaired schedule's block tiles, none idle.
// Rank 0 claims the pair tiles from the counter and hands each to rank 1
// (claimPairTile); the stages are released to both blocks'
// producers (WGMMAPipeline's pairs), the rows' copies stay in each block.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/MoEGroupedKernel.h"

#include "dialects/K3GPU/K3GPUDialect.h"

using namespace mlir;
using namespace mlir::k3;

namespace mlir::k3::grouped_wgmma {

LogicalResult GroupedKernel::emitPersistent(const Epilogue &epi) {
  // A block per SM; pairs: a cluster per two SMs, grid y its rank.
  e.setLaunch(GridSymbol::device_sm_count, 1, 0, clusterBlocks,
              {threads(), 1, 1},
              groupedWGMMASharedBytes(em.stages, tileN, /*mxfp4=*/false, tileM,
                                      sharedColumns));
  tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
  if (pairedWeights()) {
    e.setClusterY(clusterBlocks);
    rank = gpu::BlockIdOp::create(b, loc, gpu::Dimension::y);
    // Rank 1's claim barriers (rank 0's arrive), initialised before the
    // pipeline's cluster barrier publishes every barrier to the pair.
    claimed = nvgpu::MBarrierCreateOp::create(
        b, loc,
        nvgpu::MBarrierGroupType::get(b.getContext(), em.workgroup(), 2));
    Value first = kb.eqi(tid, kb.idx(0));
    for (int64_t c = 0; c < 2; ++c)
      nvgpu::MBarrierInitOp::create(b, loc, claimed, kb.idx(1), kb.idx(c),
                                    first);
  }
  setUpOperands();
  WGMMAPipeline pipe(em, kConsumers, tmaStageBytes(),
                     /*copies=*/!rowsByTMA, clusterBlocks);
  pipe.init(tid);
  // The counter scheduler's consumers read every tile from its slot, the
  // dense GLU's too.
  Type i32 = b.getI32Type();
  if (!g.dense || counter) {
    found = mma.workgroupArray(e.fn, i32, 2 * 4);
    published = mma.workgroupArray(e.fn, i32, em.stages * 4);
  }
  if (counter)
    claims = mma.workgroupArray(e.fn, i32, 2);
  if (g.dense)
    denseRowTiles = rowTilesOf(em, kb.dim(g.rows.shape[0]), kTile);
  Value rowTiles =
      g.dense ? denseRowTiles
              : kb.loadIndex(g.tables.tileOffsets.full, {kb.idx(experts)});
  // Pairs walk (C / 2) per row tile (one block tile each per block).
  Value total = kb.muli(rowTiles, kb.idx(g.columnTiles / clusterBlocks));
  Value steps = kb.idx(g.reduction / kTileK);
  Value warpgroup = em.divuIdx(tid, kThreads);
  kb.ifThen(kb.eqi(warpgroup, kb.idx(0)),
            [&] { produceTiles(pipe, total, steps); });
  kb.ifThen(kb.gei(warpgroup, kb.idx(1)), [&] {
    Value consumer = kb.subi(warpgroup, kb.idx(1));
    consumeTiles(pipe, total, steps, consumer, epi);
  });
  pipe.finish();
  return success();
}

Value GroupedKernel::locatePairTile(Value pairTile, Value i) {
  assert(!tall() && "pairs take 128-row tiles (verifyCluster)");
  int64_t columns = g.columnTiles, half = columns / 2;
  Value rowTile = em.divuIdx(pairTile, half);
  auto place = [&](const SegmentEntry &n) -> SegmentTile {
    Value tiles = kb.subi(n.endTile, n.firstTile);
    Value r = kb.subi(pairTile, kb.muli(n.firstTile, kb.idx(half)));
    Value sharedEnd = kb.muli(em.divuIdx(tiles, 2), kb.idx(columns));
    Value shared = kb.lti(r, sharedEnd);
    Value m = kb.select(
        shared, kb.addi(kb.muli(em.divuIdx(r, columns), kb.idx(2)), rank),
        kb.subi(tiles, kb.idx(1)));
    Value n0 =
        kb.select(shared, em.remuIdx(r, columns),
                  kb.addi(kb.muli(kb.subi(r, sharedEnd), kb.idx(2)), rank));
    Value start = kb.addi(n.firstRow, kb.muli(m, kb.idx(kTile)));
    Value rows = kb.minsi(kb.subi(n.endRow, start), kb.idx(kTile));
    Value sharedIndex = kb.select(shared, kb.idx(columns), kb.idx(0));
    return {n.expert, start, rows, kb.addi(n0, sharedIndex)};
  };
  SegmentTile s = locateSegmentTileInBlock(
      kb, g.tables.offsets.full, g.tables.tileOffsets.full, experts, rowTile,
      kTile, tid, kThreads, found, slotOf(i, 2),
      [&] { namedBarrier(kProducerBarrier, kThreads); }, place);
  expert = s.expert;
  rowStart = s.rowStart;
  validRows = s.validRows;
  nTile = em.remuIdx(s.extra, columns);
  sharedWeights = kb.gei(s.extra, kb.idx(columns));
  return kb.addi(kb.muli(pairTile, kb.idx(columns)), nTile);
}

void GroupedKernel::setTile(Value tile) {
  // The dense GLU's tiles in bands of row tiles (TileRaster.h); the grouped
  // ops' row tiles are experts' segments, in expert order.
  // Paired blocks: a pair's two column tiles, the rank's of them.
  TileCoordinates at =
      rasterTile(em, tile, denseRowTiles, g.columnTiles / clusterBlocks,
                 g.dense ? e.config.getRaster() : 0);
  mTile = at.rowTile;
  nTile = paired() ? kb.addi(kb.muli(at.columnTile, kb.idx(2)), rank)
                   : at.columnTile;
}

void GroupedKernel::setDenseRows() {
  assert(!tall() &&
         "k3.glu_gate_up takes 128-row tiles (verifyGroupedTileRows)");
  Value rows = kb.dim(g.rows.shape[0]);
  rowStart = kb.muli(mTile, kb.idx(kTile));
  validRows = kb.minsi(kb.subi(rows, rowStart), kb.idx(kTile));
}

void GroupedKernel::startProducer(WGMMAPipeline &pipe) {
  Value first = kb.eqi(tid, kb.idx(0));
  for (Value tm : weightMaps)
    nvgpu::TmaPrefetchOp::create(b, loc, tm, first);
  if (rowsByTMA)
    nvgpu::TmaPrefetchOp::create(b, loc, rowsMap, first);
  pipe.enterProducer();
}

void GroupedKernel::produceSteps(WGMMAPipeline &pipe, Value first, Value steps,
                                 const WGMMAPipeline::Publish &publish) {
  auto load = [&](Value stage, Value kt) {
    loadTMATiles(stage, kt, pipe.fullBarriers());
    prefetchAhead(kt, steps);
  };
  if (rowsByTMA && tall())
    pipe.setTileBytes(tallStageBytes());
  if (rowsByTMA)
    return pipe.produce(tid, first, steps, load, publish);
  if (tall())
    return pipe.produceWithCopies(
        tid, first, steps, load,
        [&](Value stage, Value kt) { copyRowsInLoop(stage, kt); }, publish);
  SmallVector<RowCopy> copies = rowCopies();
  pipe.produceWithCopies(
      tid, first, steps, load,
      [&](Value stage, Value kt) { copyRows(stage, kt, copies); }, publish);
}

void GroupedKernel::produceTiles(WGMMAPipeline &pipe, Value total,
                                 Value steps) {
  startProducer(pipe);
  auto produceTile = [&](Value i, Value tile) {
    Value slot = slotOf(i, em.stages);
    Value code = tile;
    if (pairedWeights()) {
      code = locatePairTile(tile, i);
    } else if (g.dense) {
      setTile(tile);
      setDenseRows();
    } else {
      setTile(tile);
      SegmentTile s = locateSegmentTileInBlock(
          kb, g.tables.offsets.full, g.tables.tileOffsets.full, experts, mTile,
          tileM, tid, kThreads, found, slotOf(i, 2),
          [&] { namedBarrier(kProducerBarrier, kThreads); });
      expert = s.expert;
      rowStart = s.rowStart;
      validRows = s.validRows;
    }
    WGMMAPipeline::Publish publish;
    if (!g.dense || counter)
      publish = [&, slot, code] {
        Value none = kb.idx(0);
        storeSegmentSlot(kb,
                         {g.dense ? none : expert, g.dense ? none : rowStart,
                          g.dense ? none : validRows, code},
                         published, slot);
      };
    produceSteps(pipe, kb.muli(i, steps), steps, publish);
  };
  if (!counter)
    return pipe.forEachTile(total, produceTile);
  TileCounter tiles(kb, e.fn);
  pipe.forEachClaimedTile(
      total,
      [&](Value i) {
        return pairedWeights() ? claimPairTile(tiles, i) : claimTile(tiles, i);
      },
      produceTile, [&](Value i) { endClaims(pipe, tiles, i, total, steps); });
}

Value GroupedKernel::publishedEnd(Value total) {
  return pairedWeights() ? kb.muli(total, kb.idx(g.columnTiles)) : total;
}

Value GroupedKernel::claimPairTile(TileCounter &tiles, Value i) {
  Value at = em.remuIdx(i, 2);
  Value leader = kb.eqi(rank, kb.idx(0));
  Type i32 = b.getI32Type();
  kb.ifThen(kb.andi(leader, kb.eqi(tid, kb.idx(0))), [&] {
    Value tile = arith::IndexCastOp::create(b, loc, i32, tiles.claim());
    memref::StoreOp::create(b, loc, tile, claims, ValueRange{at});
    // The claim's store ordered before the arrive for rank 1 (a fence at
    // cluster scope: the arrive alone releases at CTA scope).
    NVVM::FenceScClusterOp::create(b, loc);
    k3gpu::MBarrierArriveClusterOp::create(
        b, loc, claimed, at, arith::ConstantIntOp::create(b, loc, 1, 32));
  });
  auto branch = scf::IfOp::create(b, loc, TypeRange{i32}, leader,
                                  /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    namedBarrier(kProducerBarrier, kThreads);
    Value mine = memref::LoadOp::create(b, loc, claims, ValueRange{at});
    scf::YieldOp::create(b, loc, mine);
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    Value parity = arith::TruncIOp::create(
        b, loc, b.getI1Type(),
        arith::IndexCastOp::create(b, loc, i32,
                                   em.remuIdx(em.divuIdx(i, 2), 2)));
    nvgpu::MBarrierTryWaitParityOp::create(b, loc, claimed, parity,
                                           kb.idx(10000000), at);
    NVVM::FenceScClusterOp::create(b, loc);
    Value leaders = k3gpu::ClusterLoadOp::create(
        b, loc, VectorType::get({1}, i32), claims, ValueRange{at},
        arith::ConstantIntOp::create(b, loc, 0, 32));
    scf::YieldOp::create(
        b, loc, vector::ExtractOp::create(b, loc, leaders, 0).getResult());
  }
  return arith::IndexCastOp::create(b, loc, b.getIndexType(),
                                    branch.getResult(0));
}

Value GroupedKernel::claimTile(TileCounter &tiles, Value i) {
  Value at = em.remuIdx(i, 2);
  kb.ifThen(kb.eqi(tid, kb.idx(0)), [&] {
    Value tile =
        arith::IndexCastOp::create(b, loc, b.getI32Type(), tiles.claim());
    memref::StoreOp::create(b, loc, tile, claims, ValueRange{at});
  });
  namedBarrier(kProducerBarrier, kThreads);
  Value tile = memref::LoadOp::create(b, loc, claims, ValueRange{at});
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), tile);
}

void GroupedKernel::endClaims(WGMMAPipeline &pipe, TileCounter &tiles, Value i,
                              Value total, Value steps) {
  Value none = kb.idx(0);
  pipe.produceEmpty(tid, kb.muli(i, steps), [&] {
    storeSegmentSlot(kb, {none, none, none, publishedEnd(total)}, published,
                     slotOf(i, em.stages));
  });
  // A pair's rank 0 alone claimed: it counts the pair (grid x) done.
  Value claimer = kb.eqi(tid, kb.idx(0));
  if (pairedWeights())
    claimer = kb.andi(claimer, kb.eqi(rank, kb.idx(0)));
  kb.ifThen(claimer, [&] { tiles.finish(); });
}

Value GroupedKernel::consumerThread(Value consumer) {
  return kb.subi(tid, kb.muli(kb.addi(consumer, kb.idx(1)), kb.idx(kThreads)));
}

void GroupedKernel::consumeTiles(WGMMAPipeline &pipe, Value total, Value steps,
                                 Value consumer, const Epilogue &epi) {
  pipe.enterConsumer();
  Value t = consumerThread(consumer);
  // A pair's consumers release each stage to both blocks, by lane.
  lane = pairedWeights() ? em.remuIdx(t, 32) : Value();
  auto consumeTile = [&](Value i, Value tile) {
    // A pair's code: pair tile C + column tile.
    if (pairedWeights())
      nTile = em.remuIdx(tile, g.columnTiles);
    else
      setTile(tile);
    Value firstStep = kb.muli(i, steps);
    if (g.dense) {
      setDenseRows();
    } else {
      pipe.waitFull(firstStep);
      SegmentTile s = loadSegmentSlot(kb, published, slotOf(i, em.stages));
      expert = s.expert;
      rowStart = s.rowStart;
      validRows = s.validRows;
    }
    if (tall())
      return consumeTall(pipe, firstStep, steps, t, consumer, epi);
    Value firstRow = kb.muli(consumer, kb.idx(64));
    if (g.dense || !sharedColumns)
      return consumeRows(pipe, firstStep, steps, t, firstRow, epi);
    // A half past the segment's rows (an expert's last tile often has 64
    // or fewer) releases its stages unmultiplied: the other consumer's
    // products then have the tensor cores alone. (The register epilogue
    // keeps every half: around it the branch cost 8 bytes of spills.)
    auto live =
        scf::IfOp::create(b, loc, TypeRange{}, kb.lti(firstRow, validRows),
                          /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&live.getThenRegion().front());
    consumeRows(pipe, firstStep, steps, t, firstRow, epi);
    b.setInsertionPointToStart(&live.getElseRegion().front());
    pipe.skipSteps(firstStep, steps, lane);
  };
  if (counter)
    pipe.forEachPublishedTile(
        publishedEnd(total), steps,
        [&](Value i) {
          return loadSegmentSlot(kb, published, slotOf(i, em.stages)).extra;
        },
        consumeTile);
  else
    pipe.forEachTile(total, consumeTile);
  // The last tile's stores complete before the block exits.
  if (sharedColumns)
    SharedResultTile::drain(em, t);
}

void GroupedKernel::consumeRows(WGMMAPipeline &pipe, Value first, Value steps,
                                Value t, Value firstRow, const Epilogue &epi) {
  // This thread's two rows of the tile (its fragment's, from the
  // consumer's first row) and (down) their (token, slot) pairs.
  std::array<Value, 2> rows, rowPairs, weights;
  for (int64_t h = 0; h < 2; ++h) {
    rows[h] = kb.addi(firstRow, AccumulatorFragment::rowOf(em, t, h));
    rowPairs[h] = rowPair(rows[h]);
  }
  Value acc = pipe.consume(
      first, steps, tileN, kTileK / kWGMMAK,
      [&](Value stage, Value acc) {
        return multiplyRows(stage, firstRow, acc);
      },
      lane);
  // (down) The weights' loads wait for the pairs' values: issued
  // before the products, those landed while they ran.
  for (int64_t h = 0; h < 2; ++h)
    weights[h] = weightOfPair(rowPairs[h]);
  AccumulatorFragment f(em, acc, tileN, t);
  if (sharedColumns)
    return epilogueThroughShared(f, t, em.divuIdx(firstRow, 64), firstRow, rows,
                                 weights, epi);
  epilogueFromRegisters(f, rows, weights, epi);
}

void GroupedKernel::consumeTall(WGMMAPipeline &pipe, Value first, Value steps,
                                Value t, Value consumer, const Epilogue &epi) {
  // The tile's chunks that hold segment rows, n = ceil(validRows / 64),
  // are dealt alternately: consumer c has ceil((n - c) / 2) of them, at
  // most tileM / 128. A branch per count, each with its own product loop,
  // so that no accumulator passes through a branch inside a loop.
  int64_t most = tileM / (64 * kConsumers);
  Value chunks = em.divuIdx(kb.addi(validRows, kb.idx(63)), 64);
  Value mine =
      kb.minsi(em.divuIdx(kb.subi(kb.addi(chunks, kb.idx(1)), consumer), 2),
               kb.idx(most));
  // The count is the warpgroup's (validRows comes from a shared slot):
  // broadcast from lane 0, ptxas sees it uniform. Without it ptxas takes
  // the branches below for divergent and serializes their wgmma (C7520).
  Value count32 = arith::IndexCastOp::create(b, loc, b.getI32Type(), mine);
  Value uniform =
      gpu::ShuffleOp::create(
          b, loc, count32, arith::ConstantIntOp::create(b, loc, 0, 32),
          arith::ConstantIntOp::create(b, loc, 32, 32), gpu::ShuffleMode::IDX)
          .getShuffleResult();
  mine = arith::IndexCastOp::create(b, loc, b.getIndexType(), uniform);
  // count == most, else == most - 1, ..., else the skip.
  std::function<void(int64_t)> chain = [&](int64_t count) {
    if (count == 0) {
      pipe.skipSteps(first, steps, lane);
      return;
    }
    auto branch =
        scf::IfOp::create(b, loc, TypeRange{}, kb.eqi(mine, kb.idx(count)),
                          /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&branch.getThenRegion().front());
    consumeChunks(pipe, first, steps, t, consumer, count, epi);
    b.setInsertionPointToStart(&branch.getElseRegion().front());
    chain(count - 1);
  };
  chain(most);
}

void GroupedKernel::consumeChunks(WGMMAPipeline &pipe, Value first, Value steps,
                                  Value t, Value consumer, int64_t count,
                                  const Epilogue &epi) {
  SmallVector<Value> firstRows;
  for (int64_t j = 0; j < count; ++j)
    firstRows.push_back(
        kb.muli(kb.addi(consumer, kb.idx(kConsumers * j)), kb.idx(64)));
  // (down) The rows' routing weights, two dependent loads each, issued
  // before the products so that they land while those run.
  SmallVector<std::array<Value, 2>> rows(count), weights(count);
  for (int64_t j = 0; j < count; ++j)
    for (int64_t h = 0; h < 2; ++h) {
      rows[j][h] = kb.addi(firstRows[j], AccumulatorFragment::rowOf(em, t, h));
      weights[j][h] = weightOfPair(rowPair(rows[j][h]));
    }
  int64_t groups = count * (kTileK / kWGMMAK);
  SmallVector<Value> acc = pipe.consumeEach(
      first, steps, tileN, count, groups,
      [&](Value stage, ValueRange in) {
        SmallVector<Value> out;
        for (int64_t j = 0; j < count; ++j)
          out.push_back(multiplyRows(stage, firstRows[j], in[j], 2 * groups));
        return out;
      },
      lane);
  for (int64_t j = 0; j < count; ++j)
    epilogueFromRegisters(AccumulatorFragment(em, acc[j], tileN, t), rows[j],
                          weights[j], epi);
}

void GroupedKernel::epilogueThroughShared(const AccumulatorFragment &f, Value t,
                                          Value consumer, Value firstRow,
                                          ArrayRef<Value> rows,
                                          ArrayRef<Value> weights,
                                          const Epilogue &epi) {
  SharedResultTile tile(em, smem,
                        kb.addi(base, kb.idx(em.stages * stageBytes())),
                        consumer, t, sharedColumns);
  tile.acquire();
  for (int64_t j = 0; j < sharedColumns / 8; ++j)
    for (int64_t h = 0; h < 2; ++h) {
      Value up = g.glu ? f.pair(h, j + sharedColumns / 8) : Value();
      tile.write(
          AccumulatorFragment::rowOf(em, t, h), f.column(j),
          epi.values({rows[h], f.column(j), f.pair(h, j), up, weights[h]}));
    }
  tile.publish();
  auto stores = [&] {
    tile.store(resultMap, kb.muli(nTile, kb.idx(sharedColumns)),
               kb.addi(rowStart, firstRow));
  };
  if (g.dense)
    return stores();
  Value left = kb.subi(validRows, firstRow);
  auto branch = scf::IfOp::create(b, loc, TypeRange{}, kb.gei(left, kb.idx(64)),
                                  /*withElse=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&branch.getThenRegion().front());
  stores();
  b.setInsertionPointToStart(&branch.getElseRegion().front());
  copyPartialHalf(tile, t, firstRow, left, epi);
}

void GroupedKernel::copyPartialHalf(SharedResultTile &tile, Value t,
                                    Value firstRow, Value count,
                                    const Epilogue &epi) {
  int64_t chunks = sharedColumns / 8;
  auto type = VectorType::get({8}, b.getBF16Type());
  auto loop = scf::ForOp::create(b, loc, t, kb.muli(count, kb.idx(chunks)),
                                 kb.idx(kThreads));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value i = loop.getInductionVar();
  Value row = em.divuIdx(i, chunks);
  Value col = kb.muli(em.remuIdx(i, chunks), kb.idx(8));
  epi.store(kb.addi(firstRow, row), col, tile.read(type, row, col));
}

void GroupedKernel::epilogueFromRegisters(const AccumulatorFragment &f,
                                          ArrayRef<Value> rows,
                                          ArrayRef<Value> weights,
                                          const Epilogue &epi) {
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

void GroupedKernel::namedBarrier(int32_t id, int64_t threads) {
  em.namedBarrier(arith::ConstantIntOp::create(b, loc, id, 32), threads);
}

} // namespace mlir::k3::grouped_wgmma
