//===- MXFP4WarpMMA.cpp - MXFP4 rows times a few tokens, mma.sync -*- C++ -*-//
#include "lowering/cuda/MXFP4WarpMMA.h"
#include "lowering/cuda/MXFP4Tile.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// Elements of one block (one scale) and blocks per iteration (4 lanes).
constexpr int64_t kBlock = 32, kBlocksPerStep = 4;
/// Steps whose bytes are in flight while one is decoded: one. Two took
/// 98 registers instead of 76 and K3's T = 1 ran 0.179 ms instead of 0.144
/// (bench/results/moe-mxfp4-nvidia-h200-20261203T093905Z.json against
/// ...T092851Z.json).
constexpr int64_t kAhead = 1;

/// What one iteration reads: per weight and row, 4 words of codes and the
/// scale byte (i32); x's block as 4 vectors of 8 bf16.
struct StepBytes {
  SmallVector<Value> codes, scales, x;

  SmallVector<Value> flat() const {
    SmallVector<Value> v(codes);
    v.append(scales.begin(), scales.end());
    v.append(x.begin(), x.end());
    return v;
  }
  static StepBytes unflat(ValueRange v, size_t rows) {
    StepBytes s;
    s.codes.assign(v.begin(), v.begin() + rows);
    s.scales.assign(v.begin() + rows, v.begin() + 2 * rows);
    s.x.assign(v.begin() + 2 * rows, v.end());
    return s;
  }
};

class WarpProducts {
public:
  WarpProducts(MMAEmitter &em, ArrayRef<MXFP4LaneRows> weights,
               const LaneToken &token, int64_t k, Value lane)
      : em(em), kb(em.kb), b(em.b), loc(em.loc), weights(weights), token(token),
        blocks(k / kBlock) {
    c = em.remu(lane, 4);
  }

  SmallVector<Acc> run() {
    int64_t steps = (blocks + kBlocksPerStep - 1) / kBlocksPerStep;
    SmallVector<Value> init;
    for (size_t w = 0; w < weights.size(); ++w)
      for (int64_t i = 0; i < 4; ++i)
        init.push_back(kb.f32(0.0));
    size_t accs = init.size();
    size_t perStep = 0;
    for (int64_t a = 0; a < kAhead; ++a) {
      SmallVector<Value> bytes =
          load(kb.idx(std::min<int64_t>(a, steps - 1))).flat();
      perStep = bytes.size();
      init.append(bytes.begin(), bytes.end());
    }
    auto loop =
        scf::ForOp::create(b, loc, kb.idx(0), kb.idx(steps), kb.idx(1), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value i = loop.getInductionVar();
      ValueRange it = loop.getRegionIterArgs();
      // Step i + kAhead's bytes first (the last steps reload the last:
      // cached, and the loop stays branch-free); step i's are the oldest
      // carried.
      Value next = kb.minsi(kb.addi(i, kb.idx(kAhead)), kb.idx(steps - 1));
      SmallVector<Value> ahead = load(next).flat();
      SmallVector<Value> acc(it.begin(), it.begin() + accs);
      multiply(StepBytes::unflat(it.slice(accs, perStep), 2 * weights.size()),
               acc);
      acc.append(it.begin() + accs + perStep, it.end());
      acc.append(ahead.begin(), ahead.end());
      scf::YieldOp::create(b, loc, acc);
    }
    SmallVector<Acc> out;
    for (size_t w = 0; w < weights.size(); ++w)
      out.push_back({loop.getResult(4 * w), loop.getResult(4 * w + 1),
                     loop.getResult(4 * w + 2), loop.getResult(4 * w + 3)});
    return out;
  }

private:
  Value i32(int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
  }

  /// The lane's block of step `i`, clamped into K, and whether it is real.
  std::pair<Value, Value> blockOf(Value i) {
    Value blk = kb.addi(kb.muli(i, kb.idx(kBlocksPerStep)), c);
    return {kb.minsi(blk, kb.idx(blocks - 1)), kb.lti(blk, kb.idx(blocks))};
  }

  StepBytes load(Value i) {
    auto [blk, real] = blockOf(i);
    StepBytes s;
    auto words = VectorType::get({4}, b.getI32Type());
    Value zero = arith::ConstantOp::create(b, loc, words, b.getZeroAttr(words));
    for (const MXFP4LaneRows &w : weights)
      for (int64_t r = 0; r < 2; ++r) {
        auto ld = vector::LoadOp::create(
            b, loc, VectorType::get({16}, b.getI8Type()), w.bytes,
            ValueRange{kb.addi(w.codes[r], kb.muli(blk, kb.idx(16)))});
        ld.setAlignment(16);
        Value v = vector::BitCastOp::create(b, loc, words, ld);
        // Zero codes are zeros: a block past K adds nothing.
        s.codes.push_back(kb.select(real, v, zero));
        s.scales.push_back(arith::ExtUIOp::create(
            b, loc, b.getI32Type(),
            memref::LoadOp::create(b, loc, w.bytes,
                                   ValueRange{kb.addi(w.scales[r], blk)})));
      }
    auto row = VectorType::get({8}, b.getBF16Type());
    Value zeros = arith::ConstantOp::create(b, loc, row, b.getZeroAttr(row));
    for (int64_t q = 0; q < 4; ++q) {
      Value col = kb.addi(kb.muli(blk, kb.idx(kBlock)), kb.idx(8 * q));
      auto ld = vector::LoadOp::create(b, loc, row, token.x,
                                       ValueRange{token.row, col});
      ld.setAlignment(16);
      s.x.push_back(kb.select(token.valid, ld, zeros));
    }
    return s;
  }

  /// x's pair (8 q + p, 8 q + p + 4): B's elements for A's pair (q, p).
  Value xPair(const StepBytes &s, int64_t q, int64_t p) {
    return vector::ShuffleOp::create(b, loc, s.x[q], s.x[q],
                                     ArrayRef<int64_t>{p, p + 4});
  }

  /// Decoded a word at a time with two multiplies a pair (no branch on
  /// the scale, decodeE2M1Block's fast path): deciding per block kept all
  /// 32 pairs of a block live, 124 registers instead of 76 for gate/up.
  void multiply(const StepBytes &s, SmallVectorImpl<Value> &acc) {
    Value unbias = e8m0ScalePair(b, loc, i32(kTwoTo126));
    for (size_t w = 0; w < weights.size(); ++w) {
      Value scale[2];
      for (int64_t r = 0; r < 2; ++r)
        scale[r] = e8m0ScalePair(b, loc, s.scales[2 * w + r]);
      Acc d = {acc[4 * w], acc[4 * w + 1], acc[4 * w + 2], acc[4 * w + 3]};
      for (int64_t q = 0; q < 4; ++q) {
        SmallVector<Value, 4> pairs[2];
        for (int64_t r = 0; r < 2; ++r)
          pairs[r] = decodeE2M1Pairs(
              b, loc, em.extract(s.codes[2 * w + r], {q}), scale[r], unbias);
        // Two mmas per word: pairs (0, 1) and (2, 3) as k columns 2 c, +1
        // and 2 c + 8, +9.
        for (int64_t h = 0; h < 2; ++h) {
          int64_t p0 = 2 * h, p1 = 2 * h + 1;
          FragA a = em.stack(
              {pairs[0][p0], pairs[1][p0], pairs[0][p1], pairs[1][p1]});
          FragB bf = em.stack({xPair(s, q, p0), xPair(s, q, p1)});
          d = em.mma(a, bf, d);
        }
      }
      for (int64_t i = 0; i < 4; ++i)
        acc[4 * w + i] = d[i];
    }
  }

  MMAEmitter &em;
  KernelBuilder &kb;
  OpBuilder &b;
  Location loc;
  ArrayRef<MXFP4LaneRows> weights;
  LaneToken token;
  int64_t blocks;
  Value c;
};

} // namespace

SmallVector<Acc> mlir::k3::mxfp4WarpProducts(MMAEmitter &em,
                                             ArrayRef<MXFP4LaneRows> weights,
                                             const LaneToken &token, int64_t k,
                                             Value lane) {
  return WarpProducts(em, weights, token, k, lane).run();
}
