//===- ArgmaxRows.cpp - k3.argmax, a block per row -------------*- C++ -*-===//
//
// Greedy sampling over a vocabulary of 163840 logits: the loop nest gives
// each row one thread, which reads the row alone (4.3 ms per decode step on
// an H200, bench/results/profile-gpu/real4-T64.txt). Here a block of
// `warps` warps owns a row (config kernel `argmax_rows`): thread i reads
// columns i, i + B, ... (coalesced), 4 of them per loop step with a
// constant trip count so that their loads are in flight together, and
// keeps the first maximum it sees; a butterfly of shuffles combines the
// lanes' (value, column) pairs, shared memory the warps'.
//
// Ties go to the lower column, as the loop nest and numpy.argmax: a pair
// wins when its value is larger, or equal with a lower column. The
// comparisons are ordered, so a NaN never wins (the loop nest's rule; the
// runtime's sampler refuses NaN logits).
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"
#include "lowering/cuda/MMA.h"
#include "lowering/kernels/Operands.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

constexpr int64_t kUnroll = 4;

/// A running maximum: the value and its column (i32).
struct Best {
  Value value, column;
};

class ArgmaxKernel {
public:
  ArgmaxKernel(const KernelEmission &e, KernelOperand logits,
               KernelOperand result, int64_t warps)
      : kb(e.kb), b(kb.builder()), loc(kb.getLoc()), em{b, loc, kb},
        logits(logits.full), result(result.full), vocab(logits.shape[1]),
        threads(32 * warps), warps(warps) {
    warpValues = em.workgroupArray(e.fn, b.getF32Type(), warps);
    warpColumns = em.workgroupArray(e.fn, b.getI32Type(), warps);
  }

  void emit() {
    Value tid = gpu::ThreadIdOp::create(b, loc, gpu::Dimension::x);
    row = gpu::BlockIdOp::create(b, loc, gpu::Dimension::x);
    Best best = warpBest(threadBest(tid));
    Value lane = em.remu(tid, 32), warp = em.divu(tid, 32);
    kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
      em.sts(best.value, warpValues, {warp});
      em.sts(best.column, warpColumns, {warp});
    });
    gpu::BarrierOp::create(b, loc);
    kb.ifThen(kb.eqi(warp, kb.idx(0)), [&] {
      // Lanes past the warps hold a pair that never wins.
      Value has = kb.lti(lane, kb.idx(warps));
      Value at = kb.minsi(lane, kb.idx(warps - 1));
      Best w{kb.select(has, em.lds(warpValues, {at}), kb.f32(-INFINITY)),
             kb.select(has, em.lds(warpColumns, {at}), i32(vocab))};
      Best all = warpBest(w);
      kb.ifThen(kb.eqi(lane, kb.idx(0)), [&] {
        Value column =
            arith::IndexCastOp::create(b, loc, b.getIndexType(), all.column);
        kb.storeIndex(column, result, {row});
      });
    });
  }

private:
  Value i32(int64_t v) {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(int32_t(v)));
  }
  Value column32(Value c) {
    return arith::IndexCastOp::create(b, loc, b.getI32Type(), c);
  }

  /// `a` or `o`, whichever wins (larger value; equal: lower column).
  Best better(Best a, Best o) {
    Value gt = kb.gtf(o.value, a.value);
    Value eq = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, o.value,
                                     a.value);
    Value lower = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt,
                                        o.column, a.column);
    Value take = arith::OrIOp::create(b, loc, gt, kb.andi(eq, lower));
    return {kb.select(take, o.value, a.value),
            kb.select(take, o.column, a.column)};
  }

  /// The thread's first maximum over its columns tid, tid + B, ...: its
  /// first column as the start (a row of -inf still answers column 0),
  /// then whole steps of kUnroll x B columns, then the partial rest.
  Best threadBest(Value tid) {
    Value has = kb.lti(tid, kb.idx(vocab));
    Value first = kb.minsi(tid, kb.idx(vocab - 1));
    Best best{kb.select(has, kb.load(logits, {row, first}), kb.f32(-INFINITY)),
              kb.select(has, column32(first), i32(vocab))};
    const int64_t step = kUnroll * threads, whole = vocab / step;
    if (whole > 0) {
      auto loop =
          scf::ForOp::create(b, loc, kb.idx(0), kb.idx(whole * step),
                             kb.idx(step), ValueRange{best.value, best.column});
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Best it{loop.getRegionIterArgs()[0], loop.getRegionIterArgs()[1]};
      SmallVector<Value> cols, vals;
      for (int64_t u = 0; u < kUnroll; ++u) {
        cols.push_back(
            kb.addi(loop.getInductionVar(), kb.addi(tid, kb.idx(u * threads))));
        vals.push_back(kb.load(logits, {row, cols.back()}));
      }
      for (int64_t u = 0; u < kUnroll; ++u)
        it = better(it, {vals[u], column32(cols[u])});
      scf::YieldOp::create(b, loc, ValueRange{it.value, it.column});
      best = {loop.getResult(0), loop.getResult(1)};
    }
    // The rest: fewer than kUnroll x B columns, each thread's guarded.
    for (int64_t u = 0; whole * step + u * threads < vocab; ++u) {
      Value c = kb.addi(kb.idx(whole * step + u * threads), tid);
      Value in = kb.lti(c, kb.idx(vocab));
      Value at = kb.minsi(c, kb.idx(vocab - 1));
      Best o{kb.select(in, kb.load(logits, {row, at}), kb.f32(-INFINITY)),
             kb.select(in, column32(at), i32(vocab))};
      best = better(best, o);
    }
    return best;
  }

  /// The warp's winner, in every lane.
  Best warpBest(Best best) {
    for (int64_t off = 16; off >= 1; off /= 2)
      best = better(best, {em.shuffleXor(best.value, off),
                           em.shuffleXor(best.column, off)});
    return best;
  }

  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  MMAEmitter em;
  Value logits, result, row;
  int64_t vocab, threads, warps;
  Value warpValues, warpColumns;
};

struct ArgmaxRowsPattern : OpKernelPattern<ArgmaxOp> {
  ArgmaxRowsPattern() : OpKernelPattern(KernelKind::argmax_rows) {}
  LogicalResult emit(ArgmaxOp op, Adaptor, KernelEmission &e) const override {
    auto ops = operandsOf(op, e.inputs);
    KernelOperand logits = ops.getLogits();
    if (logits.shape.size() != 2 || logits.shape[1] <= 0)
      return op.emitOpError() << "argmax_rows needs logits [rows, vocab] "
                                 "with a static vocabulary";
    auto rows = e.kb.linearForm(e.kb.dim(logits.shape[0]));
    if (!rows)
      return op.emitOpError() << "argmax_rows needs a row count linear in "
                                 "one runtime size";
    int64_t warps = e.config.getWarps();
    e.setLaunch(*rows, 1, 0, 1, {32 * warps, 1, 1});
    ArgmaxKernel(e, logits, e.outputs[0], warps).emit();
    e.finishSinglePhase(op.getLoc());
    return success();
  }
};

} // namespace

void mlir::k3::populateArgmaxRowsPattern(KernelPatternSet &patterns) {
  patterns.add<ArgmaxRowsPattern>();
}
