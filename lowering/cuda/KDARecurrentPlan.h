//===- KDARecurrentPlan.h - the recurrent KDA kernels' shape ----*- C++ -*-===//
//
// What the two forms of kernel `kda_recurrent` share: the static plan that
// the config's tile [BV, P, S, C] implies for K, V and H, and the warp
// helpers both use. S > 1 stages chunks of S tokens in shared memory
// (KDARecurrent.cpp); S = 1 reads each token straight into the lanes that
// use it, with no shared memory and no barrier (KDARecurrentTokens.cpp),
// the form of a decode step.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_CUDA_KDARECURRENTPLAN_H
#define K3_LOWERING_CUDA_KDARECURRENTPLAN_H

#include "dialects/K3/K3Dialect.h"
#include "lowering/KernelBuilder.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/MMA.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <optional>

namespace mlir::k3 {

/// Warp helpers of MMAEmitter plus what the recurrent kernels add.
struct KDARecurrentEmitter : MMAEmitter {
  Value divu(Value a, Value c) { return arith::DivUIOp::create(b, loc, a, c); }
  Value remu(Value a, Value c) { return arith::RemUIOp::create(b, loc, a, c); }

  Value fma(Value a, Value x, Value c) {
    return math::FmaOp::create(b, loc, a, x, c);
  }
  /// Sum over groups of `lanes` adjacent lanes (a power of two <= 32).
  Value groupSum(Value v, int64_t lanes) {
    for (int64_t off = lanes / 2; off >= 1; off /= 2)
      v = kb.add(v, shuffleXor(v, off));
    return v;
  }
};

/// The kernel's static shape: the tile and what follows from it.
struct KDARecurrentPlan {
  int64_t kDim, vDim, heads;
  int64_t P, BV, S, C;
  int64_t KS, G, threads, warps, nvb, E;
  bool stageGuard;
  // Shared memory words: the chunk's {a, k, q, pad} per (token, row), its v
  // columns [S][BV], per-token scalars [S][4], per-warp partials [S][w][4].
  int64_t words, vBase, tokBase, partBase;
};

/// The op's attributes that the step reads, in both forms.
struct KDAStepTerms {
  explicit KDAStepTerms(KDAOp op)
      : scale(op.getScale().convertToDouble()), l2(op.getUseQkL2norm()),
        sigmoidBeta(op.getUseBetaSigmoid()), gateKind(op.getGateKind()) {
    if (auto lb = op.getLowerBoundAttr())
      lowerBound = lb.getValueAsDouble();
  }
  double scale;
  bool l2, sigmoidBeta;
  std::optional<DecayGateKind> gateKind;
  std::optional<double> lowerBound;
};

/// The plan for these shapes and the config's tile (chosen and checked by
/// k3-select-kernel-config: KernelConfigRules.cpp), or nothing when the
/// kernel does not cover them.
std::optional<KDARecurrentPlan>
makeKDARecurrentPlan(ArrayRef<KernelOperand> in, ArrayRef<KernelOperand> out,
                     const KernelOperand *init, KernelConfigAttr config);

/// The S = 1 form's body (KDARecurrentTokens.cpp): each lane loads its own
/// rows of every token.
void emitKDARecurrentTokens(KDAOp op, const KernelEmission &e,
                            const KDARecurrentPlan &p);

} // namespace mlir::k3

#endif // K3_LOWERING_CUDA_KDARECURRENTPLAN_H
