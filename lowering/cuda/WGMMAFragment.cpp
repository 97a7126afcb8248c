//===- WGMMAFragment.cpp - a wgmma accumulator as registers -----*- C++ -*-===//
//
// AccumulatorFragment (WGMMA.h): a consumer warpgroup's accumulator read
// as this thread's registers through k3gpu.warpgroup_fragment, for the
// persistent schedules' epilogues that write without shared memory and for
// the transposed store of a product whose rows were wgmma's N.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3GPU/K3GPUDialect.h"
#include "lowering/cuda/WGMMA.h"

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

AccumulatorFragment::AccumulatorFragment(WGMMAEmitter &em, Value acc, int64_t n,
                                         Value t)
    : em(em) {
  auto type = VectorType::get({n / 2}, em.b.getF32Type());
  fragment = k3gpu::WarpgroupFragmentOp::create(em.b, em.loc, type, acc);
  rows[0] = rowOf(em, t, 0);
  rows[1] = rowOf(em, t, 1);
  oddLane = em.kb.eqi(em.remuIdx(t, 2), em.idx(1));
  firstColumn = em.kb.muli(em.remuIdx(em.remuIdx(t, 32), 4), em.idx(2));
}

Value AccumulatorFragment::rowOf(WGMMAEmitter &em, Value t, int64_t h) {
  KernelBuilder &kb = em.kb;
  Value row = kb.addi(kb.muli(em.divuIdx(t, 32), em.idx(16)),
                      em.divuIdx(em.remuIdx(t, 32), 4));
  return kb.addi(row, em.idx(8 * h));
}

Value AccumulatorFragment::column(int64_t j) const {
  return em.kb.addi(firstColumn, em.idx(8 * j));
}

Value AccumulatorFragment::pair(int64_t h, int64_t j) const {
  int64_t i = 4 * j + 2 * h;
  auto extract = [&](int64_t at) {
    return vector::ExtractOp::create(em.b, em.loc, fragment, at).getResult();
  };
  return vector::FromElementsOp::create(em.b, em.loc,
                                        VectorType::get({2}, em.b.getF32Type()),
                                        ValueRange{extract(i), extract(i + 1)});
}

AccumulatorFragment::RowQuad
AccumulatorFragment::exchangeRows(int64_t j, Value pair0, Value pair1) const {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  auto word = [&](Value pair) {
    Value w = vector::BitCastOp::create(
        b, loc, VectorType::get({1}, b.getI32Type()), pair);
    return vector::ExtractOp::create(b, loc, w, 0).getResult();
  };
  Value w0 = word(pair0), w1 = word(pair1);
  Value sent = arith::SelectOp::create(b, loc, oddLane, w0, w1);
  Value got = gpu::ShuffleOp::create(b, loc, sent, 1, 32, gpu::ShuffleMode::XOR)
                  .getShuffleResult();
  Value lo = arith::SelectOp::create(b, loc, oddLane, got, w0);
  Value hi = arith::SelectOp::create(b, loc, oddLane, w1, got);
  Value words = vector::FromElementsOp::create(
      b, loc, VectorType::get({2}, b.getI32Type()), ValueRange{lo, hi});
  Type elem = cast<VectorType>(pair0.getType()).getElementType();
  RowQuad q;
  q.values =
      vector::BitCastOp::create(b, loc, VectorType::get({4}, elem), words);
  q.row = arith::SelectOp::create(b, loc, oddLane, rows[1], rows[0]);
  q.column = kb.subi(column(j), kb.select(oddLane, em.idx(2), em.idx(0)));
  return q;
}

Value WGMMAEmitter::storeAccumulatorsTransposed(Value smem, Value offset,
                                                ArrayRef<Value> acc, int64_t n,
                                                Value t) {
  Value tile = epilogueTile(smem, offset, kWGMMATileRows, kWGMMATileRows);
  // A warp's lanes of one register: 8 rows i (consecutive words) times 4
  // column pairs, 2 (128 + 8) words apart (16 banks): two lanes a bank.
  // Once a tile, after all of its k-steps.
  for (int64_t h = 0; h < int64_t(acc.size()); ++h) {
    AccumulatorFragment f(*this, acc[h], n, t);
    for (int64_t j = 0; j < n / 8; ++j)
      for (int64_t half = 0; half < 2; ++half) {
        Value pair = f.pair(half, j);
        Value column = kb.addi(f.row(half), idx(64 * h));
        for (int64_t e = 0; e < 2; ++e) {
          Value v = vector::ExtractOp::create(b, loc, pair, e);
          memref::StoreOp::create(
              b, loc, v, tile,
              ValueRange{kb.addi(f.column(j), idx(e)), column});
        }
      }
  }
  return tile;
}
