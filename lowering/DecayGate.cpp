//===- DecayGate.cpp - the KDA decay gate formula ---------------*- C++ -*-===//
#include "lowering/DecayGate.h"

#include "mlir/Dialect/Math/IR/Math.h"

using namespace mlir;
using namespace mlir::k3;

Value mlir::k3::emitGateLogDecay(KernelBuilder &kb, DecayGateKind kind,
                                 std::optional<double> lowerBound, Value a,
                                 Value u, const DecayGateForm &form) {
  const double s = form.logScale;
  if (kind == DecayGateKind::neg_softplus) {
    if (s == 1.0)
      return kb.neg(kb.mul(a, kb.softplus(u)));
    // In base 2: softplus(u) log2(e) = max(u, 0) log2(e) + log2(1 + 2^{-|u|
    // log2(e)}): one ex2 and one lg2 (special-function instructions)
    // instead of log1p's polynomial; 1 + 2^{...} is in [1, 2], where lg2's
    // absolute error is ~2^-22, far below a bf16 gate's resolution.
    OpBuilder &b = kb.builder();
    Location loc = kb.getLoc();
    Value zero = kb.f32(0.0);
    Value negAbs = kb.neg(math::AbsFOp::create(b, loc, u));
    Value onePlus = kb.add(
        kb.f32(1.0), math::Exp2Op::create(b, loc, kb.mul(negAbs, kb.f32(s))));
    Value tail = form.log2 ? form.log2(onePlus)
                           : math::Log2Op::create(b, loc, onePlus).getResult();
    Value sp = kb.add(kb.mul(kb.maxf(u, zero), kb.f32(s)), tail);
    return kb.neg(kb.mul(a, sp));
  }
  // lower_bound * sigmoid(x) * s, sigmoid(x) = 1 / (1 + e^{-x}) and
  // e^{-x} = 2^{-x log2(e)} in base 2.
  Value x = kb.mul(a, u);
  Value e = s == 1.0 ? kb.exp(kb.neg(x))
                     : math::Exp2Op::create(kb.builder(), kb.getLoc(),
                                            kb.mul(x, kb.f32(-s)))
                           .getResult();
  Value den = kb.add(kb.f32(1.0), e);
  Value sig = form.reciprocal ? form.reciprocal(den) : kb.div(kb.f32(1.0), den);
  return kb.mul(kb.f32(*lowerBound * s), sig);
}
