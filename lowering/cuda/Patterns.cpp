//===- Patterns.cpp - the dedicated GPU kernels as patterns -----*- C++ -*-===//
//
// One pattern per op and dedicated kernel kind; each runs its emitter, which
// reads the op's config and states the kernel's #k3.launch_shape.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelPatterns.h"
#include "lowering/cuda/CUDAKernels.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

/// The emitted body of a single-phase GPU kernel, then its end.
LogicalResult finish(Operation *op, KernelEmission &e, LogicalResult emitted) {
  if (failed(emitted))
    return failure();
  e.finishSinglePhase(op->getLoc());
  return success();
}

struct KDARecurrentPattern : OpKernelPattern<KDAOp> {
  KDARecurrentPattern() : OpKernelPattern(KernelKind::kda_recurrent) {}
  LogicalResult emit(KDAOp op, Adaptor, KernelEmission &e) const override {
    return finish(op, e, emitKDARecurrentCUDA(op, e));
  }
};

struct KDAMMAOperandsPattern : OpKernelPattern<KDAMMAOperandsOp> {
  KDAMMAOperandsPattern() : OpKernelPattern(KernelKind::kda_mma_operands) {}
  LogicalResult emit(KDAMMAOperandsOp op, Adaptor,
                     KernelEmission &e) const override {
    return finish(op, e, emitKDAMMAOperandsCUDA(op, e));
  }
};

struct KDAMMAChainPattern : OpKernelPattern<KDAMMARecurrenceOp> {
  KDAMMAChainPattern() : OpKernelPattern(KernelKind::kda_mma_chain) {}
  LogicalResult emit(KDAMMARecurrenceOp op, Adaptor,
                     KernelEmission &e) const override {
    return finish(op, e, emitKDAMMARecurrenceCUDA(op, e));
  }
};

struct LinearMMAPattern : OpKernelPattern<LinearOp> {
  LinearMMAPattern() : OpKernelPattern(KernelKind::linear_mma_3xtf32) {}
  LogicalResult emit(LinearOp op, Adaptor, KernelEmission &e) const override {
    return finish(op, e, emitLinearMMACUDA(op, e));
  }
};

} // namespace

void mlir::k3::populateCUDAKernelPatterns(KernelPatternSet &patterns) {
  patterns.add<KDARecurrentPattern, KDAMMAOperandsPattern, KDAMMAChainPattern,
               LinearMMAPattern>();
  populateLinearWGMMAPattern(patterns);
  populateLinearGEMVPattern(patterns);
  populateArgmaxRowsPattern(patterns);
  populateLatentAttentionRowsPattern(patterns);
  populateLatentAttentionSplitPattern(patterns);
  populateRMSNormRowsPatterns(patterns);
  populateMoEDispatchRowsPattern(patterns);
  populateMoECombineRowsPattern(patterns);
  populateMoEGroupedWGMMAPatterns(patterns);
  populateMoEGroupedGEMVPatterns(patterns);
  populateMoERouterRowsPattern(patterns);
  populateShortConvRowsPattern(patterns);
  populateMLAFlashWGMMAPattern(patterns);
}
