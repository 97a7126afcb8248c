//===- MoEGroupedAlternating.cpp - alternating consumers --------*- C++ -*-===//
//
// The grouped MoE wgmma kernel's persistent schedule with alternating
// consumers (tile [64, 256, 64]; MoEGroupedKernel.h, WGMMAPipeline.h): the
// producer walks the block's 128-row tiles of the tables, each as two
// 64-row halves whose k-steps follow each other in the pipeline; consumer
// 0 multiplies every first half and consumer 1 every second half, so that
// while one writes its half from its registers the other's products keep
// the tensor cores busy (CUTLASS's ping-pong schedule).
//
// A tile of 64 rows or fewer has an empty second half: one step that loads
// nothing (WGMMAPipeline::produceEmpty), which consumer 1 waits for and
// releases. Both consumers walk the same tiles and must agree where each
// tile's steps start: each half's slot carries whether the tile's second
// half has rows (the `extra` field), so the next tile starts `steps` or 1
// step after the second half's first. The halves take turns in the
// pipeline (WGMMAPipeline::waitTurn), the empty ones too.
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/MoEGroupedKernel.h"

using namespace mlir;
using namespace mlir::k3;

namespace mlir::k3::grouped_wgmma {

namespace {
/// Rows of one half of a table tile.
constexpr int64_t kHalfRows = kTile / 2;
} // namespace

void GroupedKernel::walkTilesFromStep(
    Value total, const std::function<Value(Value, Value, Value)> &body) {
  Value bid = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
  Value grid = gpu::GridDimOp::create(b, loc, gpu::Dimension::x);
  auto loop =
      scf::ForOp::create(b, loc, bid, total, grid, ValueRange{kb.idx(0)});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value tile = loop.getInductionVar();
  Value k = arith::DivUIOp::create(b, loc, kb.subi(tile, bid), grid);
  Value next = body(k, tile, loop.getRegionIterArgs()[0]);
  scf::YieldOp::create(b, loc, next);
}

void GroupedKernel::produceHalves(WGMMAPipeline &pipe, Value total,
                                  Value steps) {
  startProducer(pipe);
  walkTilesFromStep(total, [&](Value k, Value tile, Value step) {
    setTile(tile);
    return produceTileHalves(pipe, k, step, steps);
  });
}

Value GroupedKernel::produceTileHalves(WGMMAPipeline &pipe, Value k,
                                       Value first, Value steps) {
  SegmentTile whole;
  if (g.dense) {
    setDenseRows();
    whole = {kb.idx(0), rowStart, validRows};
  } else {
    whole = locateSegmentTileInBlock(
        kb, g.tables.offsets.full, g.tables.tileOffsets.full, experts, mTile,
        kTile, tid, kThreads, found, slotOf(k, 2),
        [&] { namedBarrier(kProducerBarrier, kThreads); });
  }
  Value half = kb.idx(kHalfRows);
  Value hasSecond = kb.lti(half, whole.validRows);
  Value extra = kb.select(hasSecond, kb.idx(1), kb.idx(0));
  Value twoK = kb.muli(k, kb.idx(2));
  auto publishAt = [&](Value n) {
    Value slot = slotOf(n, em.stages);
    return [&, slot] {
      storeSegmentSlot(kb, {expert, rowStart, validRows, extra}, published,
                       slot);
    };
  };
  expert = whole.expert;
  rowStart = whole.rowStart;
  validRows = kb.minsi(whole.validRows, half);
  produceSteps(pipe, first, steps, publishAt(twoK));
  Value second = kb.addi(first, steps);
  Value secondSlot = kb.addi(twoK, kb.idx(1));
  kb.ifThen(hasSecond, [&] {
    rowStart = kb.addi(whole.rowStart, half);
    validRows = kb.subi(whole.validRows, half);
    produceSteps(pipe, second, steps, publishAt(secondSlot));
  });
  kb.ifThen(kb.notb(hasSecond), [&] {
    rowStart = kb.addi(whole.rowStart, half);
    validRows = kb.idx(0);
    pipe.produceEmpty(tid, second, publishAt(secondSlot));
  });
  return kb.addi(second, kb.select(hasSecond, steps, kb.idx(1)));
}

void GroupedKernel::consumeHalves(WGMMAPipeline &pipe, Value total, Value steps,
                                  Value consumer, const Epilogue &epi) {
  pipe.enterConsumer();
  Value t = consumerThread(consumer);
  walkTilesFromStep(total, [&](Value k, Value tile, Value step) {
    setTile(tile);
    // The half's index among the block's halves, and its first step.
    Value i = kb.addi(kb.muli(k, kb.idx(2)), consumer);
    Value mine = kb.addi(step, kb.muli(consumer, steps));
    pipe.waitTurn(i);
    pipe.waitFull(mine);
    SegmentTile s = loadSegmentSlot(kb, published, slotOf(i, em.stages));
    Value live = kb.lti(kb.idx(0), s.validRows);
    kb.ifThen(live, [&] {
      expert = s.expert;
      rowStart = s.rowStart;
      validRows = s.validRows;
      consumeRows(pipe, mine, steps, t, kb.idx(0), epi,
                  [&] { pipe.passTurn(i); });
    });
    kb.ifThen(kb.notb(live), [&] {
      pipe.skip(mine);
      pipe.passTurn(i);
    });
    Value hasSecond = kb.lti(kb.idx(0), s.extra);
    return kb.addi(kb.addi(step, steps),
                   kb.select(hasSecond, steps, kb.idx(1)));
  });
}

} // namespace mlir::k3::grouped_wgmma
