//===- WeightElements.cpp - a weight operand read as f32 --------*- C++ -*-===//
#include "lowering/kernels/WeightElements.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"

using namespace mlir;
using namespace mlir::k3;

WeightElements::WeightElements(KernelBuilder &kb, const KernelOperand &w)
    : kb(kb) {
  if (!w.stored || !isa<Float4E2M1FNType>(w.stored)) {
    full = w.full;
    return;
  }
  shape.assign(w.shape.begin(), w.shape.end());
  numel = 1;
  for (int64_t d : shape)
    numel *= d;
  // Codes (numel / 2 bytes) then scales (numel / 32 bytes), one buffer.
  bytes = kb.view(w.base, {kb.idx(numel / 2 + numel / 32)});
}

Value WeightElements::flatIndex(ValueRange ivs) const {
  Value flat = ivs[0];
  for (size_t d = 1; d < shape.size(); ++d)
    flat = kb.addi(kb.muli(flat, kb.idx(shape[d])), ivs[d]);
  return flat;
}

Value WeightElements::decodeE2M1(Value code) const {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  auto i32 = [&](int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v).getResult();
  };
  // Magnitude m = exponent (2 bits) and mantissa (1 bit). For m >= 2 the
  // f32 bits are (m << 22) + (126 << 23): exponent e - 1 + 127, the
  // mantissa bit as f32's top fraction bit. m = 1 is the subnormal 0.5.
  Value m = arith::AndIOp::create(b, loc, code, i32(7));
  Value normal = arith::AddIOp::create(
      b, loc, arith::ShLIOp::create(b, loc, m, i32(22)), i32(126 << 23));
  Value isNormal =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, m, i32(2));
  Value isHalf =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, m, i32(1));
  Value sub = arith::SelectOp::create(b, loc, isHalf, i32(0x3F000000), i32(0));
  Value mag = arith::SelectOp::create(b, loc, isNormal, normal, sub);
  Value sign = arith::ShLIOp::create(
      b, loc, arith::AndIOp::create(b, loc, code, i32(8)), i32(28));
  Value bits = arith::OrIOp::create(b, loc, mag, sign);
  return arith::BitcastOp::create(b, loc, b.getF32Type(), bits);
}

Value WeightElements::decodeE8M0(Value s) const {
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  auto i32 = [&](int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v).getResult();
  };
  // 2^(s - 127) is f32's exponent field s, except s = 0: 2^-127, the
  // subnormal with the top fraction bit.
  Value isZero =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, s, i32(0));
  Value bits =
      arith::SelectOp::create(b, loc, isZero, i32(0x00400000),
                              arith::ShLIOp::create(b, loc, s, i32(23)));
  return arith::BitcastOp::create(b, loc, b.getF32Type(), bits);
}

Value WeightElements::load(ValueRange ivs) const {
  if (full)
    return kb.load(full, ivs);
  OpBuilder &b = kb.builder();
  Location loc = kb.getLoc();
  auto byteAt = [&](Value i) -> Value {
    Value v = memref::LoadOp::create(b, loc, bytes, ValueRange{i});
    return arith::ExtUIOp::create(b, loc, b.getI32Type(), v);
  };
  Value flat = flatIndex(ivs);
  // Element 2j is the low nibble of code byte j, element 2j + 1 the high.
  Value pair = arith::DivUIOp::create(b, loc, flat, kb.idx(2));
  Value odd = arith::RemUIOp::create(b, loc, flat, kb.idx(2));
  Value shift = arith::MulIOp::create(
      b, loc, arith::IndexCastOp::create(b, loc, b.getI32Type(), odd),
      arith::ConstantIntOp::create(b, loc, b.getI32Type(), 4));
  Value code = arith::AndIOp::create(
      b, loc, arith::ShRUIOp::create(b, loc, byteAt(pair), shift),
      arith::ConstantIntOp::create(b, loc, b.getI32Type(), 15));
  Value block = arith::DivUIOp::create(b, loc, flat, kb.idx(32));
  Value scale = byteAt(kb.addi(kb.idx(numel / 2), block));
  return arith::MulFOp::create(b, loc, decodeE2M1(code), decodeE8M0(scale));
}
