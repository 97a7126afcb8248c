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
    Value lg = kb.neg(kb.mul(a, kb.softplus(u)));
    return s == 1.0 ? lg : kb.mul(lg, kb.f32(s));
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
