//===- LaneDots.cpp - a warp's dot products over K, at bandwidth -*- C++ -*-=//
#include "lowering/cuda/LaneDots.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

SmallVector<Value> at(const ViewRow &row, Value column) {
  SmallVector<Value> idx(row.at);
  idx.push_back(column);
  return idx;
}

/// The products of one warp's rows over the lane's columns, by weight
/// storage; laneDotLoop walks the columns.
class ColumnProducts {
public:
  virtual ~ColumnProducts() = default;
  /// Adds the products of the lane's columns `cols` (one weight vector
  /// each) to `acc`.
  virtual void multiplyColumns(ArrayRef<Value> cols,
                               SmallVectorImpl<Value> &acc) = 0;
  /// Columns of one iteration (loads in flight together).
  virtual int64_t maxUnroll() const { return 4; }
};

/// Float weights: 16-byte vectors of `vec` elements.
class LaneDots : public ColumnProducts {
public:
  LaneDots(MMAEmitter &em, ArrayRef<ViewRow> weights, ArrayRef<ViewRow> xs,
           int64_t vec)
      : em(em), weights(weights), xs(xs), vec(vec) {}

  /// Every load first, then the products, so that the loads of all the
  /// vectors are in flight together.
  void multiplyColumns(ArrayRef<Value> cols,
                       SmallVectorImpl<Value> &acc) override {
    SmallVector<SmallVector<SmallVector<Value>>> wv(cols.size()),
        xv(cols.size());
    for (auto [u, c] : llvm::enumerate(cols)) {
      for (const ViewRow &w : weights)
        wv[u].push_back(em.loadVector(w.mem, at(w, c), vec));
      for (const ViewRow &x : xs)
        xv[u].push_back(em.loadVector(x.mem, at(x, c), vec));
    }
    for (size_t u = 0; u < cols.size(); ++u)
      for (size_t r = 0; r < weights.size(); ++r)
        for (size_t t = 0; t < xs.size(); ++t) {
          Value &a = acc[r * xs.size() + t];
          for (int64_t i = 0; i < vec; ++i)
            a = em.fmaContract(wv[u][r][i], xv[u][t][i], a);
        }
  }

private:
  MMAEmitter &em;
  ArrayRef<ViewRow> weights, xs;
  int64_t vec;
};

/// MXFP4 weights: per row and column, 16 bytes of codes (a 32-element
/// block) and its E8M0 scale. A code becomes an f16 by placing its bits
/// (sign at 15, exponent at 10-11, mantissa at 9: the value times 2^-14,
/// subnormal 0.5 included) and widening; pairing nibble p of a 32-bit
/// word with nibble p + 4 puts both in one f16x2 with one mask and shift.
/// Each row's block sum is scaled once: 2^14 2^(s - 127).
class MXFP4Dots : public ColumnProducts {
public:
  MXFP4Dots(MMAEmitter &em, ArrayRef<MXFP4Row> weights, ArrayRef<ViewRow> xs,
            Value validRows)
      : em(em), kb(em.kb), b(em.b), loc(em.loc), weights(weights), xs(xs),
        validRows(validRows) {}

  // One column per iteration keeps the registers bounded.
  int64_t maxUnroll() const override { return 1; }

  /// Each row's codes are read once; x row t > 0 is read and multiplied
  /// only when the tile has it (a warp-uniform branch): decoding makes the
  /// MXFP4 GEMV bound by its arithmetic, and a decode step's tiles mostly
  /// hold one row. A 32-bit word of codes (8 elements) is decoded right
  /// before its 8 products, so that few decoded values are live: at 32 a
  /// block, the kernel held 160 registers and 3 blocks per SM
  /// (docs/mxfp4.md).
  void multiplyColumns(ArrayRef<Value> cols,
                       SmallVectorImpl<Value> &acc) override {
    const size_t tt = xs.size();
    for (Value c : cols)
      for (auto [r, w] : llvm::enumerate(weights)) {
        Value words = loadCodes(w, c);
        Value scale = blockScale(w, c);
        for (size_t t = 0; t < tt; ++t) {
          Value &a = acc[r * tt + t];
          auto product = [&, t]() -> SmallVector<Value> {
            Value sum = kb.f32(0.0);
            for (int64_t word = 0; word < 4; ++word) {
              Value at8 = kb.addi(c, kb.idx(8 * word));
              SmallVector<Value> x =
                  em.loadVector(xs[t].mem, at(xs[t], at8), 8);
              SmallVector<Value> v = decodeWord(em.extract(words, {word}));
              for (int64_t i = 0; i < 8; ++i)
                sum = em.fmaContract(v[i], x[i], sum);
            }
            return {em.fmaContract(sum, scale, a)};
          };
          a = t == 0 || !validRows ? product()[0] : ifRow(t, {a}, product)[0];
        }
      }
  }

private:
  /// `then()` where x row t exists, else `keep`.
  SmallVector<Value> ifRow(size_t t, ArrayRef<Value> keep,
                           llvm::function_ref<SmallVector<Value>()> then) {
    SmallVector<Type> types(keep.size(), b.getF32Type());
    auto op = scf::IfOp::create(b, loc, types, kb.lti(kb.idx(t), validRows),
                                /*withElseRegion=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(op.thenBlock());
    scf::YieldOp::create(b, loc, then());
    b.setInsertionPointToStart(op.elseBlock());
    scf::YieldOp::create(b, loc, keep);
    return SmallVector<Value>(op.getResults());
  }
  Value i32(int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
  }
  Value byteAt(const MXFP4Row &w, Value start, Value offset) {
    return arith::ExtUIOp::create(
        b, loc, b.getI32Type(),
        memref::LoadOp::create(b, loc, w.bytes,
                               ValueRange{kb.addi(start, offset)}));
  }

  /// The 16 code bytes of column c's block (elements c .. c + 31) as four
  /// 32-bit words.
  Value loadCodes(const MXFP4Row &w, Value c) {
    auto vt = VectorType::get({16}, b.getI8Type());
    auto ld = vector::LoadOp::create(
        b, loc, vt, w.bytes, ValueRange{kb.addi(w.codes, em.divu(c, 2))});
    ld.setAlignment(16);
    return vector::BitCastOp::create(b, loc,
                                     VectorType::get({4}, b.getI32Type()), ld);
  }

  /// The 8 elements of a code word q, times 2^-14, as f32.
  SmallVector<Value> decodeWord(Value q) {
    SmallVector<Value> v(8);
    auto half2 = VectorType::get({2}, b.getF16Type());
    auto f32x2 = VectorType::get({2}, b.getF32Type());
    for (int64_t p = 0; p < 4; ++p) {
      Value t = p ? arith::ShRUIOp::create(b, loc, q, i32(4 * p)) : q;
      Value mag = arith::ShLIOp::create(
          b, loc, arith::AndIOp::create(b, loc, t, i32(0x00070007)), i32(9));
      Value sign = arith::ShLIOp::create(
          b, loc, arith::AndIOp::create(b, loc, t, i32(0x00080008)), i32(12));
      Value bits = vector::BroadcastOp::create(
          b, loc, VectorType::get({1}, b.getI32Type()),
          arith::OrIOp::create(b, loc, mag, sign));
      Value h2 = vector::BitCastOp::create(b, loc, half2, bits);
      Value f = arith::ExtFOp::create(b, loc, f32x2, h2);
      v[p] = em.extract(f, {0});
      v[p + 4] = em.extract(f, {1});
    }
    return v;
  }

  /// 2^14 2^(s - 127) for the block of column c: s << 23 as f32 bits
  /// (s = 0, 2^-127, as 2^-126 halved: no subnormal to flush).
  Value blockScale(const MXFP4Row &w, Value c) {
    Value s = byteAt(w, w.scales, em.divu(c, 32));
    Value isZero =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, s, i32(0));
    Value e = arith::SelectOp::create(b, loc, isZero, i32(1), s);
    Value pow = arith::BitcastOp::create(
        b, loc, b.getF32Type(), arith::ShLIOp::create(b, loc, e, i32(23)));
    Value k = arith::SelectOp::create(b, loc, isZero, kb.f32(8192.0),
                                      kb.f32(16384.0));
    return arith::MulFOp::create(b, loc, pow, k);
  }

  MMAEmitter &em;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  ArrayRef<MXFP4Row> weights;
  ArrayRef<ViewRow> xs;
  Value validRows;
};

/// Steps of the warp's 32 vectors per loop iteration: 4, 3 or 2 when they
/// divide the step count (a constant trip count) and `most` allows, else 1.
int64_t unrollOf(int64_t steps, int64_t most) {
  for (int64_t u : {4, 3, 2})
    if (u <= most && steps % u == 0)
      return u;
  return 1;
}

/// The lane's sums over its columns of K (see laneDotProducts).
SmallVector<Value> laneDotLoop(MMAEmitter &em, ColumnProducts &dots,
                               size_t sums, int64_t k, int64_t vec, Value lane,
                               const LaneDotSlice &slice);

} // namespace

SmallVector<Value> mlir::k3::laneDotProducts(MMAEmitter &em,
                                             ArrayRef<ViewRow> weights,
                                             ArrayRef<ViewRow> xs, int64_t k,
                                             int64_t vec, Value lane) {
  return laneDotProducts(em, weights, xs, k, vec, lane,
                         {em.kb.idx(0), k / (32 * vec), Value()});
}

SmallVector<Value> mlir::k3::laneDotProducts(MMAEmitter &em,
                                             ArrayRef<ViewRow> weights,
                                             ArrayRef<ViewRow> xs, int64_t k,
                                             int64_t vec, Value lane,
                                             const LaneDotSlice &slice) {
  LaneDots dots(em, weights, xs, vec);
  return laneDotLoop(em, dots, weights.size() * xs.size(), k, vec, lane, slice);
}

SmallVector<Value> mlir::k3::laneDotProductsMXFP4(MMAEmitter &em,
                                                  ArrayRef<MXFP4Row> weights,
                                                  ArrayRef<ViewRow> xs,
                                                  int64_t k, Value lane,
                                                  Value validRows) {
  MXFP4Dots dots(em, weights, xs, validRows);
  return laneDotLoop(em, dots, weights.size() * xs.size(), k, 32, lane,
                     {em.kb.idx(0), k / (32 * 32), Value()});
}

namespace {

SmallVector<Value> laneDotLoop(MMAEmitter &em, ColumnProducts &dots,
                               size_t sums, int64_t k, int64_t vec, Value lane,
                               const LaneDotSlice &slice) {
  KernelBuilder &kb = em.kb;
  OpBuilder &b = em.b;
  Location loc = em.loc;
  const int64_t step = 32 * vec, steps = slice.steps,
                unroll = unrollOf(steps, dots.maxUnroll());
  Value laneCol = kb.muli(lane, kb.idx(vec));
  SmallVector<Value> acc(sums, kb.f32(0.0));
  if (steps > 0) {
    Value first = kb.muli(slice.first, kb.idx(step));
    auto loop =
        scf::ForOp::create(b, loc, first, kb.addi(first, kb.idx(steps * step)),
                           kb.idx(unroll * step), acc);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> cols, it(loop.getRegionIterArgs());
    for (int64_t u = 0; u < unroll; ++u)
      cols.push_back(
          kb.addi(loop.getInductionVar(), kb.addi(laneCol, kb.idx(u * step))));
    dots.multiplyColumns(cols, it);
    scf::YieldOp::create(b, loc, it);
    acc.assign(loop.getResults().begin(), loop.getResults().end());
  }
  if (k % step == 0)
    return acc;
  // The partial last step: lanes past K keep their sums.
  Value c = kb.addi(kb.idx(k / step * step), laneCol);
  Value takes = kb.lti(c, kb.idx(k));
  if (slice.takesTail)
    takes = kb.andi(slice.takesTail, takes);
  SmallVector<Type> types(acc.size(), b.getF32Type());
  auto tail = scf::IfOp::create(b, loc, types, takes,
                                /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(tail.thenBlock());
    SmallVector<Value> it(acc);
    dots.multiplyColumns({c}, it);
    scf::YieldOp::create(b, loc, it);
    b.setInsertionPointToStart(tail.elseBlock());
    scf::YieldOp::create(b, loc, acc);
  }
  return SmallVector<Value>(tail.getResults());
}

} // namespace
