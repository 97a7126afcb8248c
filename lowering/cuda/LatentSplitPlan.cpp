//===- LatentSplitPlan.cpp - the split-KV decode's split layout -*- C++ -*-===//
#include "lowering/cuda/LatentSplitPlan.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;
using namespace mlir::k3;

LatentSplitDims LatentSplitDims::of(LatentAttentionOp op,
                                    KernelConfigAttr config) {
  LatentSplitDims d;
  d.heads = op.getNumHeads();
  d.dn = op.getQkNopeHeadDim();
  d.dr = op.getQkRopeHeadDim();
  d.dv = op.getVHeadDim();
  d.rank = op.getKvLoraRank();
  ArrayRef<int64_t> tile = config.getTile();
  d.headsPerBlock = tile[0];
  d.target = tile[1];
  d.stages = config.getStages();
  d.keys = tile.size() > 2 ? tile[2] : kLatentSplitKeys;
  return d;
}

Value mlir::k3::latentSplitsPerToken(KernelBuilder &kb,
                                     const LatentSplitDims &d, Value tokens) {
  Value t = kb.maxsi(tokens, kb.idx(1));
  // floor(P / T), at least 1: T S <= max(P, T) < P + T, the workspace's
  // rows; and the work items fill whole waves where T divides P (ceil
  // made 320 items of 64 tokens: 2.4 waves, the last a third full).
  Value s =
      arith::DivUIOp::create(kb.builder(), kb.getLoc(), kb.idx(d.target), t);
  return kb.maxsi(s, kb.idx(1));
}

LatentSplit mlir::k3::latentSplitOf(KernelBuilder &kb, const LatentSplitDims &d,
                                    Value count, Value splits) {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  auto ceilDiv = [&](Value a, Value c) {
    return arith::DivUIOp::create(b, loc, kb.addi(a, kb.subi(c, kb.idx(1))), c);
  };
  Value per = ceilDiv(count, splits);
  // Whole tiles: ceil(per / K) K.
  per = kb.muli(kb.divui(kb.addi(per, kb.idx(d.keys - 1)), d.keys),
                kb.idx(d.keys));
  per = kb.maxsi(per, kb.idx(kLatentSplitMinKeys));
  return {count, per, ceilDiv(count, per)};
}

Value mlir::k3::latentKeyCount(KernelBuilder &kb, Value t, Value start,
                               Value oldLen, Value capacity) {
  Value own = kb.addi(kb.subi(t, start), kb.idx(1));
  return kb.minsi(kb.addi(own, oldLen), capacity);
}
