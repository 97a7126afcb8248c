//===- MoEExchange.cpp - routed rows to rank buckets and back --*- C++ -*-===//
//
// k3.moe_bucket and k3.moe_unbucket (K3MoEOps.td): expert parallelism over
// ranks that own different tokens. The CPU target's kernels; the CUDA
// target refuses them (its MoE kernels do not skip other ranks' experts
// yet, docs/scaling.md).
//
//===----------------------------------------------------------------------===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

// One thread per destination rank walks the pairs in order, so each
// bucket's slots follow token-then-choice order whatever the schedule; the
// slots past its pairs are cleared.
LogicalResult k3::emitMoEBucket(MoEBucketOp op, KernelBuilder &kb, In in,
                                Out out) {
  if (kb.forGPU())
    return op.emitOpError()
           << "(expert parallelism over owned tokens) runs on the CPU target "
              "only: the CUDA MoE kernels do not skip other ranks' experts "
              "yet";
  auto ops = operandsOf(op, in);
  KernelOperand x = ops.getInput(), idx = ops.getIndices();
  KernelOperand rows = resultOf(out, op.getRows());
  Value ids = resultOf(out, op.getIds()).full,
        rw = resultOf(out, op.getRowWeights()).full,
        slots = resultOf(out, op.getSlots()).full;
  Value wts = ops.getWeights().full;
  int64_t ranks = rows.shape[0], capacity = rows.shape[1],
          hidden = rows.shape[2], topK = idx.shape[1];
  int64_t n = op.getExpertsPerRank();
  Value pairs = kb.muli(kb.dim(idx.shape[0]), kb.idx(topK));
  Value zero = kb.idx(0);
  kb.parallel({kb.idx(ranks)}, [&](ValueRange iv) {
    Value g = iv[0];
    Value used = kb.reduce(pairs, zero, [&](Value p, Value count) {
      Value t = kb.divui(p, topK), j = kb.remui(p, topK);
      Value e = kb.loadIndex(idx.full, {t, j});
      Value mine = kb.eqi(kb.divui(e, n), g);
      // The pass sizes C so that no routing fills a bucket (K3MoEOps.td);
      // the guard keeps a broken bound from writing past it.
      Value fits = kb.lti(count, kb.idx(capacity));
      kb.ifThen(kb.andi(mine, fits), [&] {
        kb.forRange(kb.idx(hidden), [&](Value d) {
          kb.store(kb.load(x.full, {t, d}), rows.full, {g, count, d});
        });
        kb.storeIndex(kb.remui(e, n), ids, {g, count, zero});
        kb.store(kb.load(wts, {t, j}), rw, {g, count, zero});
        kb.storeIndex(kb.addi(kb.muli(g, kb.idx(capacity)), count), slots,
                      {t, j});
      });
      return kb.select(mine, kb.addi(count, kb.idx(1)), count);
    });
    kb.forRange(used, kb.idx(capacity), [&](Value s) {
      kb.forRange(kb.idx(hidden), [&](Value d) {
        kb.store(kb.f32(0.0), rows.full, {g, s, d});
      });
      kb.storeIndex(kb.idx(-1), ids, {g, s, zero});
      kb.store(kb.f32(0.0), rw, {g, s, zero});
    });
  });
  return success();
}

LogicalResult k3::emitMoEUnbucket(MoEUnbucketOp op, KernelBuilder &kb, In in,
                                  Out out) {
  auto ops = operandsOf(op, in);
  KernelOperand back = ops.getReturned(), slots = ops.getSlots();
  int64_t ranks = back.shape[0], capacity = back.shape[1],
          hidden = back.shape[2], topK = slots.shape[1];
  Value flat = kb.view(back.base, {kb.idx(ranks * capacity), kb.idx(hidden)});
  kb.parallel({kb.dim(slots.shape[0]), kb.idx(hidden)}, [&](ValueRange iv) {
    Value t = iv[0], d = iv[1];
    Value acc = kb.f32(0.0);
    for (int64_t j = 0; j < topK; ++j) {
      Value s = kb.loadIndex(slots.full, {t, kb.idx(j)});
      acc = kb.add(acc, kb.load(flat, {s, d}));
    }
    kb.store(acc, out[0].full, iv);
  });
  return success();
}
