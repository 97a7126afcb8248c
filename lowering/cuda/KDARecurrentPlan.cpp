//===- KDARecurrentPlan.cpp - the recurrent KDA kernels' shape --*- C++ -*-===//
//
// The static plan of kernel `kda_recurrent` (KDARecurrentPlan.h).
//
//===----------------------------------------------------------------------===//
#include "lowering/cuda/KDARecurrentPlan.h"
#include "lowering/KernelConfigRules.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::k3;

std::optional<KDARecurrentPlan> mlir::k3::makeKDARecurrentPlan(
    ArrayRef<KernelOperand> in, ArrayRef<KernelOperand> out,
    const KernelOperand *init, KernelConfigAttr config) {
  KDARecurrentPlan p;
  // Static K, V and H: the columns live in registers, unrolled over K.
  p.kDim = in[0].shape[3];
  p.vDim = in[2].shape[3];
  p.heads = in[0].shape[2];
  if (p.kDim <= 0 || p.vDim <= 0 || p.heads <= 0 || p.kDim > 256 ||
      p.vDim > 256)
    return std::nullopt;
  // The state f32, or bf16 (kda-state-dtype=bf16): it lives in registers
  // as f32 for the call, loaded and stored once (MMAEmitter's vector
  // accesses widen and round).
  auto stateType = [](Value base) {
    Type t = cast<MemRefType>(base.getType()).getElementType();
    return t.isF32() || t.isBF16();
  };
  if (!stateType(out[1].base) || (init && !stateType(init->base)))
    return std::nullopt;
  KDARecurrentTile tile = kdaRecurrentTile(config);
  p.P = tile.p;
  p.BV = tile.bv;
  p.S = tile.s;
  p.C = tile.c;
  if (!llvm::isPowerOf2_64(p.P) || p.P > 32 || p.kDim % p.P != 0 ||
      !llvm::isPowerOf2_64(p.BV) || p.BV % p.C != 0 || p.vDim % p.C != 0 ||
      p.kDim / p.P * p.C > 128 || p.S < 1 || p.S > 256)
    return std::nullopt;
  p.KS = p.kDim / p.P; // rows per lane
  p.G = p.BV / p.C;    // lane groups per block
  p.threads = p.G * p.P;
  if (p.threads % 32 != 0 || p.threads > 1024)
    return std::nullopt;
  p.warps = p.threads / 32;
  p.nvb = (p.vDim + p.BV - 1) / p.BV;         // value slices per head
  p.E = (p.kDim + p.threads - 1) / p.threads; // staged rows per thread
  p.stageGuard = p.kDim % p.threads != 0;
  p.words = tile.stagingWords(p.kDim, p.warps);
  if (p.words * 4 > 48 * 1024)
    return std::nullopt;
  p.vBase = p.S * p.kDim * 4;
  p.tokBase = p.vBase + p.S * p.BV;
  p.partBase = p.tokBase + p.S * 4;
  return p;
}
