//===- MoEDispatchRows.cpp - moe_dispatch, a block per expert -*- C++ -*-===//
//
// The routing tables of the grouped MoE GEMMs, built on the device in one
// launch (config kernel `moe_dispatch_rows`): block e owns expert e, and
// warp w of every block owns the w-th contiguous range of the pairs (a
// multiple of 32 kPerThread long, so that a warp step reads 32 kPerThread
// consecutive ids: coalesced).
//   1. Every block counts all experts' pairs into a shared-memory histogram
//      (atomic adds: the counts, unlike an order, do not depend on timing);
//      in the same pass each warp counts its range's pairs of expert e.
//   2. Its offsets are sums over the experts before it: rows, and tiles of
//      `tile_rows` rows; block e writes entry e of both (the last block the
//      totals too).
//   3. Each warp walks its range again and writes each of expert e's pairs
//      at the next row: the warp's first row is the block's first plus the
//      counts of the warps before it, and a scan over the lanes (shuffles)
//      ranks a step's pairs, so rows come out in increasing pair order, the
//      order k3.moe_dispatch defines.
// A block whose expert has no pairs stops after step 2. Every block reads
// all T K ids twice; at T = 8192, top-8 that is 256 KiB each, from L2.
// The first form walked all pairs in block-wide steps, a block scan and two
// barriers per 4 x 512 pairs: 0.10 ms a call at T = 8192, 256 experts, at
// 2.6 % of the L2's throughput (bench/results/e2e-checks/
// ncu-prefill-small-kernels-nvidia-h200-20261204T0712Z.txt); the warp
// ranges take 0.045 ms against 0.083 in one profile (bench/results/
// e2e-checks/short-conv-tiles-nvidia-h200-20261204T0724Z.txt).
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// Consecutive pairs a lane reads per warp step, and the pairs of a step.
constexpr int64_t kPerThread = 4, kWarpStep = 32 * kPerThread;

class DispatchKernel {
public:
  DispatchKernel(const KernelEmission &e, MoEDispatchOp op)
      : kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        experts(op.getNumExperts()), tileRows(op.getTileRows()),
        warps(e.config.getWarps()), threads(32 * warps) {
    auto ops = operandsOf(op, e.inputs);
    const KernelOperand &indices = ops.getIndices();
    pairs = kb.numElements(indices.shape);
    ids = kb.view(indices.base, {pairs});
    // top-k a multiple of 4: T K is, so a lane's 4 ids are all in range or
    // all past it, and one 16-byte load reads them (4-byte loads 16 bytes
    // apart across lanes touched 4x the sectors: bench/results/e2e-checks/
    // ncu-prefill-after-nvidia-h200-20261204T0813Z.txt).
    if (indices.shape.back() % kPerThread == 0)
      idVectors = MMAEmitter{b, loc, kb}.contiguousView(indices.base, {pairs});
    rowSource = kb.view(resultOf(e.outputs, op.getRowSource()).base, {pairs});
    positions = kb.view(resultOf(e.outputs, op.getPositions()).base, {pairs});
    offsets = resultOf(e.outputs, op.getOffsets()).full;
    tileOffsets = resultOf(e.outputs, op.getTileOffsets()).full;
    histogram = em.workgroupArray(e.fn, b.getI32Type(), experts);
    warpSums = em.workgroupArray(e.fn, b.getI32Type(), warps);
    warpMine = em.workgroupArray(e.fn, b.getI32Type(), warps);
  }

  void emit() {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    expert = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    lane = em.remu(tid, 32);
    warp = em.divu(tid, 32);
    // The warps' ranges: R pairs each, R a multiple of one warp step.
    Value rangeSteps = em.divu(kb.addi(pairs, kb.idx(warps * kWarpStep - 1)),
                               warps * kWarpStep);
    Value range = kb.muli(rangeSteps, kb.idx(kWarpStep));
    rangeBegin = kb.muli(warp, range);
    rangeEnd = kb.addi(rangeBegin, range);
    countAll();
    Value count = toIndex(em.lds(histogram, {expert}));
    writeOffsets(count);
    // Uniform over the block: an expert without pairs is done.
    kb.ifThen(kb.lti(kb.idx(0), count), [&] { writeRows(); });
  }

private:
  Value i32(Value index) {
    return arith::IndexCastOp::create(b, loc, b.getI32Type(), index);
  }
  Value toIndex(Value v) {
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
  }
  Value ceilTiles(Value count) {
    return em.divu(kb.addi(count, kb.idx(tileRows - 1)), tileRows);
  }
  /// for (i = tid; i < n; i += threads) body(i).
  void strided(Value n, const std::function<void(Value)> &body) {
    auto loop = scf::ForOp::create(b, loc, tid, n, kb.idx(threads));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    body(loop.getInductionVar());
  }

  /// The ids of pairs p + 4 lane + u of a warp step at p, u < kPerThread,
  /// and whether each exists (a pair past the last reads the last id).
  SmallVector<std::pair<Value, Value>> stepIds(Value p) {
    SmallVector<std::pair<Value, Value>> out;
    Value first = kb.addi(p, kb.muli(lane, kb.idx(kPerThread)));
    if (idVectors) {
      Value in = kb.lti(first, pairs);
      Value at = kb.minsi(first, kb.subi(pairs, kb.idx(kPerThread)));
      for (Value id : em.loadVector(idVectors, {at}, kPerThread))
        out.push_back({toIndex(id), in});
      return out;
    }
    for (int64_t u = 0; u < kPerThread; ++u) {
      Value q = kb.addi(first, kb.idx(u));
      Value at = kb.minsi(q, kb.subi(pairs, kb.idx(1)));
      out.push_back({kb.loadIndex(ids, {at}), kb.lti(q, pairs)});
    }
    return out;
  }

  /// for (p = range begin; p < range end; p += one warp step) with one
  /// index carried; returns its final value.
  Value walkRange(Value init, const std::function<Value(Value, Value)> &body) {
    auto loop = scf::ForOp::create(b, loc, rangeBegin, rangeEnd,
                                   kb.idx(kWarpStep), ValueRange{init});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    scf::YieldOp::create(
        b, loc, body(loop.getInductionVar(), loop.getRegionIterArgs()[0]));
    return loop.getResult(0);
  }

  /// Step 1: the histogram of all experts' pairs, and each warp's count of
  /// expert e's pairs in its range (warpMine).
  void countAll() {
    strided(kb.idx(experts), [&](Value i) {
      em.sts(arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)),
             histogram, {i});
    });
    gpu::BarrierOp::create(b, loc);
    Value mine = walkRange(kb.idx(0), [&](Value p, Value n) {
      for (auto [e, in] : stepIds(p)) {
        // An id out of range (never from k3.moe_router) is left out rather
        // than written past the histogram (unsigned: negative ids too).
        Value known =
            kb.andi(in, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult,
                                              e, kb.idx(experts)));
        kb.ifThen(known, [&] {
          memref::AtomicRMWOp::create(
              b, loc, arith::AtomicRMWKind::addi,
              arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(1)),
              histogram, ValueRange{e});
        });
        n = kb.select(kb.andi(in, kb.eqi(e, expert)), kb.addi(n, kb.idx(1)), n);
      }
      return n;
    });
    Value total = i32(mine);
    for (int64_t off = 16; off >= 1; off /= 2)
      total = arith::AddIOp::create(b, loc, total, em.shuffleXor(total, off));
    kb.ifThen(kb.eqi(lane, kb.idx(0)),
              [&] { em.sts(total, warpMine, {warp}); });
    gpu::BarrierOp::create(b, loc);
  }

  /// The block's sum of one i32 per thread, in every thread.
  Value blockSum(Value v) {
    Value total =
        em.blockReduce(v, tid, warps, warpSums, 0, [&](Value x, Value y) {
          return arith::AddIOp::create(b, loc, x, y).getResult();
        });
    // warpSums is reused by the next sum.
    gpu::BarrierOp::create(b, loc);
    return total;
  }

  /// Step 2: rows and tiles of the experts before this one.
  void writeOffsets(Value count) {
    auto loop = scf::ForOp::create(b, loc, tid, expert, kb.idx(threads),
                                   ValueRange{kb.idx(0), kb.idx(0)});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value c = toIndex(em.lds(histogram, {loop.getInductionVar()}));
      scf::YieldOp::create(
          b, loc,
          ValueRange{kb.addi(loop.getRegionIterArgs()[0], c),
                     kb.addi(loop.getRegionIterArgs()[1], ceilTiles(c))});
    }
    rowsBefore = toIndex(blockSum(i32(loop.getResult(0))));
    Value tilesBefore = toIndex(blockSum(i32(loop.getResult(1))));
    kb.ifThen(kb.eqi(tid, kb.idx(0)), [&] {
      kb.storeIndex(rowsBefore, offsets, {expert});
      kb.storeIndex(tilesBefore, tileOffsets, {expert});
      kb.ifThen(kb.eqi(expert, kb.idx(experts - 1)), [&] {
        kb.storeIndex(kb.addi(rowsBefore, count), offsets, {kb.idx(experts)});
        kb.storeIndex(kb.addi(tilesBefore, ceilTiles(count)), tileOffsets,
                      {kb.idx(experts)});
      });
    });
  }

  /// The inclusive prefix sum of `v` over the warp's lanes.
  Value warpInclusiveScan(Value v) {
    for (int64_t off = 1; off < 32; off *= 2) {
      auto up =
          gpu::ShuffleOp::create(b, loc, v, off, 32, gpu::ShuffleMode::UP);
      Value from =
          kb.select(up.getValid(), up.getShuffleResult(),
                    arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)));
      v = arith::AddIOp::create(b, loc, v, from);
    }
    return v;
  }

  /// Step 3: the expert's pairs in order, each warp's from its first row.
  void writeRows() {
    Value first = rowsBefore;
    for (int64_t w = 0; w + 1 < warps; ++w) {
      Value s = toIndex(em.lds(warpMine, {kb.idx(w)}));
      first = kb.select(kb.lti(kb.idx(w), warp), kb.addi(first, s), first);
    }
    walkRange(first, [&](Value p, Value row0) {
      auto step = stepIds(p);
      SmallVector<Value> mine;
      Value n = kb.idx(0);
      for (auto [e, in] : step) {
        mine.push_back(kb.andi(in, kb.eqi(e, expert)));
        n = kb.select(mine.back(), kb.addi(n, kb.idx(1)), n);
      }
      Value inclusive = warpInclusiveScan(i32(n));
      Value stepTotal =
          toIndex(gpu::ShuffleOp::create(b, loc, inclusive, 31, 32,
                                         gpu::ShuffleMode::IDX)
                      .getShuffleResult());
      Value row = kb.addi(row0, kb.subi(toIndex(inclusive), n));
      Value q = kb.addi(p, kb.muli(lane, kb.idx(kPerThread)));
      for (int64_t u = 0; u < kPerThread; ++u) {
        Value pair = kb.addi(q, kb.idx(u)), r = row;
        kb.ifThen(mine[u], [&] {
          kb.storeIndex(pair, rowSource, {r});
          kb.storeIndex(r, positions, {pair});
        });
        row = kb.select(mine[u], kb.addi(row, kb.idx(1)), row);
      }
      return kb.addi(row0, stepTotal);
    });
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  int64_t experts, tileRows, warps, threads;
  Value pairs, ids, idVectors, rowSource, positions, offsets, tileOffsets;
  Value histogram, warpSums, warpMine;
  Value tid, expert, lane, warp, rowsBefore, rangeBegin, rangeEnd;
};

struct MoEDispatchRowsPattern : OpKernelPattern<MoEDispatchOp> {
  MoEDispatchRowsPattern() : OpKernelPattern(KernelKind::moe_dispatch_rows) {}
  LogicalResult emit(MoEDispatchOp op, Adaptor,
                     KernelEmission &e) const override {
    e.setLaunch(GridSymbol::none, 0, op.getNumExperts(), 1,
                {32 * e.config.getWarps(), 1, 1});
    DispatchKernel(e, op).emit();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateMoEDispatchRowsPattern(KernelPatternSet &patterns) {
  patterns.add<MoEDispatchRowsPattern>();
}
