//===- MXFP4Tile.cpp - MXFP4 weight tiles for wgmma -------------*- C++ -*-===//
#include "lowering/cuda/MXFP4Tile.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {
Value i32Const(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}
} // namespace

namespace {
/// Bytes of codes of one row and k-step (64 elements).
constexpr int64_t kCodeBytes = 32;
} // namespace

Value MXFP4TileRows::scaleByte(const MXFP4WeightRow &row, Value kt) {
  KernelBuilder &kb = em.kb;
  return kb.addi(row.scales, kb.muli(kt, kb.idx(2)));
}

void MXFP4TileRows::stage(Value staging, Value r, const MXFP4WeightRow &row,
                          Value kt) {
  OpBuilder &b = em.b;
  KernelBuilder &kb = em.kb;
  Value codes = kb.addi(row.codes, kb.muli(kt, kb.idx(kCodeBytes)));
  Value at = kb.muli(r, kb.idx(kCodeBytes));
  for (int64_t half = 0; half < 2; ++half)
    mma.asyncCopy(staging, {kb.addi(at, kb.idx(16 * half))}, row.bytes,
                  {kb.addi(codes, kb.idx(16 * half))}, 16, Value());
  // The two scale bytes sit at an even index; the aligned word around them
  // is in the scales (which start 16-byte aligned) and a 4-byte cp.async
  // needs 4-byte alignment (and the L1 path: only 16 bytes bypass it).
  Value word =
      arith::AndIOp::create(b, em.loc, scaleByte(row, kt), kb.idx(~int64_t(3)));
  Value dst = kb.addi(kb.idx(rows * kCodeBytes), kb.muli(r, kb.idx(4)));
  nvgpu::DeviceAsyncCopyOp::create(
      b, em.loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), staging,
      ValueRange{dst}, row.bytes, ValueRange{word}, b.getIndexAttr(4), Value(),
      UnitAttr());
}

Value mlir::k3::e8m0ScalePair(OpBuilder &b, Location loc, Value s) {
  // s << 7 is 2^(s - 127) as bf16 bits for s >= 1; s = 0 is the subnormal
  // 2^-127 (the top mantissa bit).
  Value isZero = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, s,
                                       i32Const(b, loc, 0));
  Value bits = arith::SelectOp::create(
      b, loc, isZero, i32Const(b, loc, 0x40),
      arith::ShLIOp::create(b, loc, s, i32Const(b, loc, 7)));
  Value both = arith::OrIOp::create(
      b, loc, bits, arith::ShLIOp::create(b, loc, bits, i32Const(b, loc, 16)));
  Value v = vector::BroadcastOp::create(
      b, loc, VectorType::get({1}, b.getI32Type()), both);
  return vector::BitCastOp::create(b, loc,
                                   VectorType::get({2}, b.getBF16Type()), v);
}

SmallVector<Value, 4> mlir::k3::decodeE2M1Pairs(OpBuilder &b, Location loc,
                                                Value q, Value scale,
                                                Value unbias) {
  auto bf16x2 = VectorType::get({2}, b.getBF16Type());
  auto c = [&](int64_t v) { return i32Const(b, loc, v); };
  SmallVector<Value, 4> v(4);
  for (int64_t p = 0; p < 4; ++p) {
    // Nibble p in the low half, nibble p + 4 in the high half.
    Value t = p ? arith::ShRUIOp::create(b, loc, q, c(4 * p)).getResult() : q;
    Value mag = arith::ShLIOp::create(
        b, loc, arith::AndIOp::create(b, loc, t, c(0x00070007)), c(6));
    Value sign = arith::ShLIOp::create(
        b, loc, arith::AndIOp::create(b, loc, t, c(0x00080008)), c(12));
    Value bits = vector::BroadcastOp::create(
        b, loc, VectorType::get({1}, b.getI32Type()),
        arith::OrIOp::create(b, loc, mag, sign));
    Value x = vector::BitCastOp::create(b, loc, bf16x2, bits);
    if (unbias)
      x = arith::MulFOp::create(b, loc, x, unbias);
    v[p] = arith::MulFOp::create(b, loc, x, scale);
  }
  return v;
}

SmallVector<Value> mlir::k3::decodeE2M1Block(OpBuilder &b, Location loc,
                                             ArrayRef<Value> words, Value s) {
  auto pair = VectorType::get({2}, b.getBF16Type());
  SmallVector<Type> types(4 * words.size(), pair);
  // 2^126 2^(s - 127) = 2^(s - 1) is a bf16 (exponent field s + 126) for
  // s <= 128 (a block's largest weight at most 12): one multiply a pair.
  Value fast = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, s,
                                     i32Const(b, loc, 128));
  auto op = scf::IfOp::create(b, loc, types, fast, /*withElseRegion=*/true);
  auto decodeAll = [&](Value scale, Value unbias) {
    SmallVector<Value> out;
    for (Value q : words) {
      SmallVector<Value, 4> v = decodeE2M1Pairs(b, loc, q, scale, unbias);
      out.append(v.begin(), v.end());
    }
    scf::YieldOp::create(b, loc, out);
  };
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(op.thenBlock());
    Value e = arith::AddIOp::create(b, loc, s, i32Const(b, loc, 126));
    Value bits = arith::ShLIOp::create(b, loc, e, i32Const(b, loc, 7));
    Value both = arith::OrIOp::create(
        b, loc, bits,
        arith::ShLIOp::create(b, loc, bits, i32Const(b, loc, 16)));
    Value scale = vector::BitCastOp::create(
        b, loc, pair,
        vector::BroadcastOp::create(
            b, loc, VectorType::get({1}, b.getI32Type()), both));
    decodeAll(scale, Value());
    b.setInsertionPointToStart(op.elseBlock());
    decodeAll(e8m0ScalePair(b, loc, s),
              e8m0ScalePair(b, loc, i32Const(b, loc, kTwoTo126)));
  }
  return SmallVector<Value>(op.getResults());
}

Value MXFP4TileRows::orderWord(ArrayRef<Value> v) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  // {0, 4} {1, 5} -> {0, 1, 4, 5}; {2, 6} {3, 7} -> {2, 3, 6, 7}; then 0..7.
  Value lo = vector::ShuffleOp::create(b, loc, v[0], v[1],
                                       ArrayRef<int64_t>{0, 2, 1, 3});
  Value hi = vector::ShuffleOp::create(b, loc, v[2], v[3],
                                       ArrayRef<int64_t>{0, 2, 1, 3});
  return vector::ShuffleOp::create(b, loc, lo, hi,
                                   ArrayRef<int64_t>{0, 1, 4, 5, 2, 3, 6, 7});
}

void MXFP4TileRows::decode(Value staging, Value r, const MXFP4WeightRow &row,
                           Value kt, Value tile) {
  OpBuilder &b = em.b;
  Location loc = em.loc;
  KernelBuilder &kb = em.kb;
  auto scaleLoad = vector::LoadOp::create(
      b, loc, VectorType::get({4}, b.getI8Type()), staging,
      ValueRange{kb.addi(kb.idx(rows * kCodeBytes), kb.muli(r, kb.idx(4)))});
  scaleLoad.setAlignment(4);
  Value word =
      mma.extract(vector::BitCastOp::create(
                      b, loc, VectorType::get({1}, b.getI32Type()), scaleLoad),
                  {0});
  // The row's first scale byte of the step is byte 0 or 2 of the word.
  Value shift = arith::IndexCastOp::create(
      b, loc, b.getI32Type(),
      kb.muli(arith::AndIOp::create(b, loc, scaleByte(row, kt), kb.idx(3)),
              kb.idx(8)));
  // One 32-element block per iteration (a loop, not unrolled: its decoded
  // values would otherwise all be live beside the accumulators).
  auto loop = scf::ForOp::create(b, loc, kb.idx(0), kb.idx(2), kb.idx(1));
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(loop.getBody());
  Value block = loop.getInductionVar();
  Value at = arith::AddIOp::create(
      b, loc, shift,
      arith::ShLIOp::create(
          b, loc, arith::IndexCastOp::create(b, loc, b.getI32Type(), block),
          i32Const(b, loc, 3)));
  Value scale = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, word, at), i32Const(b, loc, 0xFF));
  auto codesLoad = vector::LoadOp::create(
      b, loc, VectorType::get({16}, b.getI8Type()), staging,
      ValueRange{
          kb.addi(kb.muli(r, kb.idx(kCodeBytes)), kb.muli(block, kb.idx(16)))});
  codesLoad.setAlignment(16);
  Value words = vector::BitCastOp::create(
      b, loc, VectorType::get({4}, b.getI32Type()), codesLoad);
  SmallVector<Value> q;
  for (int64_t j = 0; j < 4; ++j)
    q.push_back(mma.extract(words, {j}));
  SmallVector<Value> pairs = decodeE2M1Block(b, loc, q, scale);
  // Word j of the block holds its elements 8 j .. 8 j + 7: the tile row's
  // 16-byte chunk 4 block + j.
  for (int64_t j = 0; j < 4; ++j) {
    Value chunk = orderWord(ArrayRef<Value>(pairs).slice(4 * j, 4));
    Value c = kb.addi(kb.muli(block, kb.idx(4)), kb.idx(j));
    auto st = vector::StoreOp::create(b, loc, chunk, tile,
                                      ValueRange{r, em.swizzledColumn(r, c)});
    st.setAlignment(16);
  }
}
