//===- MoEDispatchRows.cpp - moe_dispatch, a block per expert -*- C++ -*-===//
//
// The routing tables of the grouped MoE GEMMs, built on the device in one
// launch (config kernel `moe_dispatch_rows`): block e owns expert e.
//   1. Every block counts all experts' pairs into a shared-memory histogram
//      (atomic adds: the counts, unlike an order, do not depend on timing).
//   2. Its offsets are sums over the experts before it: rows, and tiles of
//      `tile_rows` rows; block e writes entry e of both (the last block the
//      totals too).
//   3. It walks the pairs in order, `per thread` consecutive ones per thread
//      and step, and writes each of its expert's pairs at the next row: a
//      scan of the flags over the block (shuffles in the warp, shared memory
//      across warps) gives each pair its rank, so rows come out in
//      increasing pair order, the order k3.moe_dispatch defines.
// A block whose expert has no pairs stops after step 2. Every block reads
// all T K ids twice; at T = 8192, top-8 that is 256 KiB each, from L2.
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

constexpr int64_t kPerThread = 4;

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
    rowSource = kb.view(resultOf(e.outputs, op.getRowSource()).base, {pairs});
    positions = kb.view(resultOf(e.outputs, op.getPositions()).base, {pairs});
    offsets = resultOf(e.outputs, op.getOffsets()).full;
    tileOffsets = resultOf(e.outputs, op.getTileOffsets()).full;
    histogram = em.workgroupArray(e.fn, b.getI32Type(), experts);
    warpSums = em.workgroupArray(e.fn, b.getI32Type(), warps);
  }

  void emit() {
    tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    expert = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    lane = em.remu(tid, 32);
    warp = em.divu(tid, 32);
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

  /// Step 1: the histogram of all experts' pairs.
  void countAll() {
    strided(kb.idx(experts), [&](Value i) {
      em.sts(arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(0)),
             histogram, {i});
    });
    gpu::BarrierOp::create(b, loc);
    strided(pairs, [&](Value p) {
      Value e = kb.loadIndex(ids, {p});
      // An id out of range (never from k3.moe_router) is left out rather
      // than written past the histogram.
      kb.ifThen(kb.lti(e, kb.idx(experts)), [&] {
        memref::AtomicRMWOp::create(
            b, loc, arith::AtomicRMWKind::addi,
            arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(1)),
            histogram, ValueRange{e});
      });
    });
    gpu::BarrierOp::create(b, loc);
  }

  /// The block's sum of one i32 per thread, in every thread.
  Value blockSum(Value v) {
    for (int64_t off = 16; off >= 1; off /= 2)
      v = arith::AddIOp::create(b, loc, v, em.shuffleXor(v, off));
    kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] { em.sts(v, warpSums, {warp}); });
    gpu::BarrierOp::create(b, loc);
    Value total = em.lds(warpSums, {kb.idx(0)});
    for (int64_t w = 1; w < warps; ++w)
      total =
          arith::AddIOp::create(b, loc, total, em.lds(warpSums, {kb.idx(w)}));
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

  /// Step 3: the expert's pairs in order, from its first row.
  void writeRows() {
    int64_t step = threads * kPerThread;
    auto loop = scf::ForOp::create(b, loc, kb.idx(0), pairs, kb.idx(step),
                                   ValueRange{rowsBefore});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value first =
        kb.addi(loop.getInductionVar(), kb.muli(tid, kb.idx(kPerThread)));
    SmallVector<Value> mine;
    Value n = kb.idx(0);
    for (int64_t u = 0; u < kPerThread; ++u) {
      Value p = kb.addi(first, kb.idx(u));
      Value in = kb.lti(p, pairs);
      Value at = kb.minsi(p, kb.subi(pairs, kb.idx(1)));
      mine.push_back(kb.andi(in, kb.eqi(kb.loadIndex(ids, {at}), expert)));
      n = kb.select(mine.back(), kb.addi(n, kb.idx(1)), n);
    }
    Value inclusive = warpInclusiveScan(i32(n));
    kb.ifThen(kb.eqi(lane, kb.idx(31)),
              [&] { em.sts(inclusive, warpSums, {warp}); });
    gpu::BarrierOp::create(b, loc);
    Value before = kb.idx(0), total = kb.idx(0);
    for (int64_t w = 0; w < warps; ++w) {
      Value s = toIndex(em.lds(warpSums, {kb.idx(w)}));
      before = kb.select(kb.lti(kb.idx(w), warp), kb.addi(before, s), before);
      total = kb.addi(total, s);
    }
    gpu::BarrierOp::create(b, loc);
    Value row = kb.addi(kb.addi(loop.getRegionIterArgs()[0], before),
                        kb.subi(toIndex(inclusive), n));
    for (int64_t u = 0; u < kPerThread; ++u) {
      Value p = kb.addi(first, kb.idx(u));
      Value r = row;
      kb.ifThen(mine[u], [&] {
        kb.storeIndex(p, rowSource, {r});
        kb.storeIndex(r, positions, {p});
      });
      row = kb.select(mine[u], kb.addi(row, kb.idx(1)), row);
    }
    scf::YieldOp::create(
        b, loc, ValueRange{kb.addi(loop.getRegionIterArgs()[0], total)});
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  int64_t experts, tileRows, warps, threads;
  Value pairs, ids, rowSource, positions, offsets, tileOffsets;
  Value histogram, warpSums;
  Value tid, expert, lane, warp, rowsBefore;
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
