//===- KernelPatterns.cpp - pattern lookup and launch shapes ---*- C++ -*-===//
#include "lowering/KernelPatterns.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;
using namespace mlir::k3;

const KernelPattern *KernelPatternSet::lookup(Operation *op,
                                              KernelKind kind) const {
  const KernelPattern *any = nullptr;
  for (const auto &p : patterns) {
    if (p->getKind() != kind)
      continue;
    if (p->getRootName() == op->getName().getStringRef())
      return p.get();
    if (p->getRootName().empty() && !any)
      any = p.get();
  }
  return any;
}

void KernelEmission::setLaunch(GridSymbol sym, int64_t scale, int64_t offset,
                               int64_t divisor, ArrayRef<int64_t> block,
                               int64_t smem) const {
  FunctionOpInterface f = fn;
  auto shape = LaunchShapeAttr::get(f.getContext(), sym, scale, offset, divisor,
                                    block, smem);
  K3Dialect::LaunchShapeAttrHelper(f.getContext()).setAttr(f, shape);
}

void KernelEmission::setLaunch(const KernelBuilder::Linear &form,
                               int64_t perUnit, int64_t extra, int64_t divisor,
                               ArrayRef<int64_t> block, int64_t smem) const {
  GridSymbol sym = form.symbol == kNumTokens ? GridSymbol::num_tokens
                   : form.symbol == kNumSeqs ? GridSymbol::num_seqs
                                             : GridSymbol::none;
  int64_t scale = sym == GridSymbol::none ? 0 : form.a * perUnit;
  if (scale == 0)
    sym = GridSymbol::none;
  int64_t offset = form.b * perUnit + extra;
  setLaunch(sym, scale, std::max<int64_t>(offset, 0), divisor, block, smem);
}

void KernelEmission::finishSinglePhase(Location loc) const {
  FunctionOpInterface f = fn;
  auto gpuFn = cast<gpu::GPUFuncOp>(f.getOperation());
  gpu::ReturnOp::create(kb.builder(), loc);
  MLIRContext *ctx = f.getContext();
  K3Dialect::PhasesAttrHelper(ctx).setAttr(
      gpuFn,
      ArrayAttr::get(ctx, {FlatSymbolRefAttr::get(gpuFn.getNameAttr())}));
}
