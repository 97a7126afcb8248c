//===- DecayGate.h - the range of the KDA gate's lower bound ----*- C++ -*-===//
//
// The one definition of the lower_bounded_sigmoid gate's admissible
// `lower_bound` (g = lower_bound * sigmoid(...) in [lower_bound, 0]), used
// by the verifiers of k3.kda, k3.kda_gate and k3.kda_mma_operands and by
// k3-kda-mma-split. The formula itself is lowering/DecayGate.h.
//
// Why [-5, 0): the chunkwise kernels keep in-tile decay ratios inside the
// f32/bf16 range (seed §5.4). The tensor-core operand kernel
// (lowering/cuda/KDAMMAOperands.cpp) factors the in-chunk decays about the
// chunk's middle token (token 7 of 16), so each factor spans at most 8
// tokens: e^{8 |lb|} stays inside the range it needs for |lb| <= 5.5
// (kMMAOperandsLowerBoundLimit). The whole verifier range is inside that,
// so every valid gate can take the tensor-core path.
//
//===----------------------------------------------------------------------===//
#ifndef K3_DIALECTS_K3_DECAYGATE_H
#define K3_DIALECTS_K3_DECAYGATE_H

namespace mlir::k3 {

/// lower_bound in [kMinGateLowerBound, kMaxGateLowerBound).
constexpr double kMinGateLowerBound = -5.0;
constexpr double kMaxGateLowerBound = 0.0;

/// The most negative bound the tensor-core operand kernel's middle-token
/// factorisation keeps in range (see above).
constexpr double kMMAOperandsLowerBoundLimit = -5.5;
static_assert(kMMAOperandsLowerBoundLimit <= kMinGateLowerBound,
              "the tensor-core KDA must cover every valid gate");

inline bool isValidGateLowerBound(double lowerBound) {
  return lowerBound >= kMinGateLowerBound && lowerBound < kMaxGateLowerBound;
}

} // namespace mlir::k3

#endif // K3_DIALECTS_K3_DECAYGATE_H
