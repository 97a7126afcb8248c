//===- Patterns.cpp - the dedicated GPU kernels as patterns -----*- C++ -*-===//
//
// One pattern per op with a dedicated kernel. Each passes the op's config
// to its emitter and turns the launch the emitter states into the kernel's
// #k3.launch_shape.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"

#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The emitters' tuning, read off the config and the target.
CUDAKernelOptions optionsFor(const KernelEmission &e) {
  CUDAKernelOptions o;
  KernelConfigAttr c = e.config;
  o.smCount = cast<GPUTargetAttr>(e.target).getSmCount();
  switch (c.getKernel()) {
  case KernelKind::kda_mma_chain:
    o.kdaMMAWarps = c.getWarps();
    o.kdaMMAStages = c.getStages();
    break;
  case KernelKind::kda_mma_operands:
    o.kdaOperandsBlocksPerSM = c.getBlocksPerSm();
    break;
  case KernelKind::kda_recurrent: {
    KDARecurrentTile t = kdaRecurrentTile(c);
    o.kdaRecurrentTile = llvm::formatv("{0},{1},{2},{3}", t.bv, t.p, t.s, t.c);
    break;
  }
  case KernelKind::linear_mma_3xtf32:
    o.linearKernel = "mma-3xtf32";
    break;
  case KernelKind::linear_tma_wgmma:
  case KernelKind::loop_nest:
    break;
  }
  return o;
}

/// Emits with `emitter`, then records the launch it stated.
template <typename OpTy, typename Emitter>
LogicalResult emitDedicated(OpTy op, KernelEmission &e, Emitter emitter) {
  auto fn = cast<gpu::GPUFuncOp>(e.fn.getOperation());
  FailureOr<bool> done =
      emitter(op, fn, e.kb, e.inputs, e.outputs, optionsFor(e));
  if (failed(done))
    return failure();
  if (!*done)
    return op.emitOpError()
           << "kernel " << stringifyKernelKind(e.config.getKernel())
           << " does not cover this op's shapes (config " << e.config << ")";
  gpu::ReturnOp::create(e.kb.builder(), op.getLoc());
  auto grid = fn->template getAttrOfType<DenseI64ArrayAttr>(kLaunchGridAttr);
  auto block = fn->template getAttrOfType<DenseI64ArrayAttr>(kLaunchBlockAttr);
  auto smem = fn->template getAttrOfType<IntegerAttr>(kLaunchSmemAttr);
  if (!grid || !block)
    return op.emitOpError() << "dedicated kernel stated no launch";
  KernelBuilder::Linear form{grid[0], 1, 0};
  e.setLaunch(form, grid[1], grid[2], grid[3], block.asArrayRef(),
              smem ? smem.getInt() : 0);
  for (StringRef name : {kLaunchGridAttr, kLaunchBlockAttr, kLaunchSmemAttr})
    fn->removeAttr(name);
  K3Dialect::PhasesAttrHelper(op.getContext())
      .setAttr(fn, ArrayAttr::get(op.getContext(),
                                  {FlatSymbolRefAttr::get(fn.getNameAttr())}));
  return success();
}

struct KDARecurrentPattern : OpKernelPattern<KDAOp> {
  KDARecurrentPattern() : OpKernelPattern(KernelKind::kda_recurrent) {}
  LogicalResult emit(KDAOp op, Adaptor, KernelEmission &e) const override {
    return emitDedicated(op, e, emitKDARecurrentCUDA);
  }
};

struct KDAMMAOperandsPattern : OpKernelPattern<KDAMMAOperandsOp> {
  KDAMMAOperandsPattern() : OpKernelPattern(KernelKind::kda_mma_operands) {}
  LogicalResult emit(KDAMMAOperandsOp op, Adaptor,
                     KernelEmission &e) const override {
    return emitDedicated(op, e, emitKDAMMAOperandsCUDA);
  }
};

struct KDAMMAChainPattern : OpKernelPattern<KDAMMARecurrenceOp> {
  KDAMMAChainPattern() : OpKernelPattern(KernelKind::kda_mma_chain) {}
  LogicalResult emit(KDAMMARecurrenceOp op, Adaptor,
                     KernelEmission &e) const override {
    return emitDedicated(op, e, emitKDAMMARecurrenceCUDA);
  }
};

struct LinearMMAPattern : OpKernelPattern<LinearOp> {
  LinearMMAPattern() : OpKernelPattern(KernelKind::linear_mma_3xtf32) {}
  LogicalResult emit(LinearOp op, Adaptor, KernelEmission &e) const override {
    return emitDedicated(op, e, emitLinearMMACUDA);
  }
};

} // namespace

void mlir::k3::populateCUDAKernelPatterns(KernelPatternSet &patterns) {
  patterns.add<KDARecurrentPattern, KDAMMAOperandsPattern, KDAMMAChainPattern,
               LinearMMAPattern>();
  populateLinearWGMMAPattern(patterns);
}
