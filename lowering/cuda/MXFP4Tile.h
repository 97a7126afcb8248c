//===- MXFP4Tile.h - MXFP4 weight tiles for wgmma ---------------*- C++ -*-===//
//
// W4A16 on Hopper: wgmma multiplies bf16, so an MXFP4 weight tile
// (docs/mxfp4.md: E2M1 codes, element 2i in the low nibble of byte i, one
// E8M0 scale per 32 elements of a row) is expanded to bf16 in shared
// memory right before the products, as vLLM and SGLang do for MXFP4 MoE on
// Hopper. Two steps per k-step of 64 and per weight row, each thread one
// row:
//
// - stage: cp.async of the row's 32 code bytes and of the aligned 32-bit
//   word that holds its two scale bytes into a staging area (36 bytes a
//   row), in the same cp.async group as the activation rows, so that the
//   pipeline that waits for those also waits for these;
// - decode: once the group has landed, each 32-bit word of codes (8
//   elements) becomes one 16-byte chunk of the bf16 tile, stored at its
//   place in the 128-byte swizzle (WGMMA.h). A code's bits placed at bf16's
//   sign (15), exponent (7-8) and top mantissa bit (6) are its value times
//   2^-126 (the subnormal 2^-127 is 0.5's); one bf16x2 multiply by the
//   block's 2^(s - 1) (two, by 2^126 and 2^(s - 127), for s > 128, whose
//   2^(s - 1) is past bf16) gives the exact products (a code has two
//   significant bits: no rounding in range). Nibbles p and p + 4
//   of a word fill one bf16x2 with one mask; two shuffles put the 8 in
//   order.
//
// The staged bytes are 4.5 KiB per 128 rows; the tile's bytes, 16 KiB,
// are what wgmma reads.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_MXFP4TILE_H
#define K3_LOWERING_CUDA_MXFP4TILE_H

#include "lowering/KernelConfigRules.h"
#include "lowering/cuda/MMA.h"
#include "lowering/cuda/WGMMA.h"

namespace mlir::k3 {

/// One weight row of an MXFP4 operand: the operand's bytes (codes, then
/// scales, as MMAEmitter::contiguousView of i8) and the byte indices where
/// the row's codes and scales start.
struct MXFP4WeightRow {
  Value bytes;
  Value codes, scales;
};

/// The E8M0 byte of 2^126, which undoes the 2^-126 of a code's bits.
constexpr int64_t kTwoTo126 = 127 + 126;

/// 2^(s - 127) for the E8M0 byte `s` (an i32, 0..254) in both halves of a
/// bf16x2 (s = 0: the subnormal 2^-127).
Value e8m0ScalePair(OpBuilder &b, Location loc, Value s);

/// The 8 E2M1 codes of a 32-bit word `q` (element j in nibble j) as four
/// bf16x2 pairs, pair p holding elements p and p + 4: the codes' bits
/// (their values times 2^-126) times `unbias` (2^126; null: `scale`
/// includes it) times `scale`. Exact: a code has two significant bits.
SmallVector<Value, 4> decodeE2M1Pairs(OpBuilder &b, Location loc, Value q,
                                      Value scale, Value unbias);

/// One 32-element block, four code words, with its E8M0 byte `s` (an
/// i32): 16 pairs, word-major (decodeE2M1Pairs). One multiply a pair
/// where s <= 128 (2^(s - 1) is a bf16), two otherwise (a branch).
SmallVector<Value> decodeE2M1Block(OpBuilder &b, Location loc,
                                   ArrayRef<Value> words, Value s);

/// Elements of a weight operand (static: weights always are).
inline int64_t weightElements(const KernelOperand &w) {
  int64_t n = 1;
  for (int64_t d : w.shape)
    n *= d;
  return n;
}

/// Bytes of an MXFP4 weight operand: its codes, then its scales.
inline int64_t mxfp4WeightBytes(const KernelOperand &w) {
  return weightElements(w) / 2 + weightElements(w) / 32;
}

class MXFP4TileRows {
public:
  /// Tiles of `rows` weight rows by 64 k (one 128-byte swizzled bf16 row
  /// each).
  MXFP4TileRows(WGMMAEmitter &em, MMAEmitter &mma, int64_t rows)
      : em(em), mma(mma), rows(rows) {}

  /// Staging bytes of one stage.
  int64_t stagingBytes() const { return rows * kMXFP4StagedRowBytes; }

  /// cp.async of `row`'s codes and scales of k-step `kt` into tile row `r`
  /// of `staging` (an i8 view of one stage's staging bytes).
  void stage(Value staging, Value r, const MXFP4WeightRow &row, Value kt);

  /// Tile row `r` of `staging` (landed) decoded into row `r` of `tile` (a
  /// bf16 [rows, 64] view in the 128-byte swizzle).
  void decode(Value staging, Value r, const MXFP4WeightRow &row, Value kt,
              Value tile);

private:
  /// Byte index of the row's scales of k-step `kt`.
  Value scaleByte(const MXFP4WeightRow &row, Value kt);
  /// A word's 8 decoded elements (its four pairs) in order.
  Value orderWord(ArrayRef<Value> pairs);

  WGMMAEmitter &em;
  MMAEmitter &mma;
  int64_t rows;
};

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_MXFP4TILE_H
