//===- DecayGate.h - the KDA decay gate formula -----------------*- C++ -*-===//
//
// The one definition of the KDA gate's log decay, shared by the CPU/generic
// kernels (kernels/KDA.cpp, kernels/Chunk.cpp) and the CUDA kernels
// (cuda/KDARecurrent.cpp, cuda/KDAMMAOperands.cpp). Its admissible
// lower bounds are dialects/K3/DecayGate.h.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_DECAYGATE_H
#define K3_LOWERING_DECAYGATE_H

#include "dialects/K3/K3Dialect.h"
#include "lowering/KernelBuilder.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace mlir::k3 {

/// How the gate is computed: in units of log(base) (`logScale` = 1 /
/// ln(base): 1 for natural units, log2(e) for base 2, whose
/// exponentials are single ex2 instructions on the GPU) and with which
/// reciprocal in the sigmoid (null: an f32 division).
struct DecayGateForm {
  double logScale = 1.0;
  llvm::function_ref<Value(Value)> reciprocal = nullptr;
  /// log2 for the base-2 softplus (null: math.log2).
  llvm::function_ref<Value(Value)> log2 = nullptr;
};

/// The log decay of one channel, log(a) * logScale, from the head's
/// A = exp(A_log) (`a`) and u = g + dt_bias:
///   lower_bounded_sigmoid:  lower_bound * sigmoid(A u)
///   neg_softplus:           -A softplus(u)
/// (the sigmoid as 1 / (1 + e^{-A u}), in base 2 when logScale != 1).
Value emitGateLogDecay(KernelBuilder &kb, DecayGateKind kind,
                       std::optional<double> lowerBound, Value a, Value u,
                       const DecayGateForm &form = {});

} // namespace mlir::k3

#endif // K3_LOWERING_DECAYGATE_H
