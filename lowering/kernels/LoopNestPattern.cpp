//===- LoopNestPattern.cpp - the generic loop nest as a pattern -*- C++ -*-===//
//
// The fallback of every op: its loop nest (Dispatch.cpp chooses the
// emitter). On a GPU each top-level parallel loop becomes its own kernel,
// spread over the grid by a grid-stride loop (GPUDistribute.h).
//
//===----------------------------------------------------------------------===//
#include "lowering/GPUDistribute.h"
#include "lowering/KernelPatterns.h"
#include "lowering/kernels/Kernels.h"

using namespace mlir;
using namespace mlir::k3;

namespace {

struct LoopNestPattern : KernelPattern {
  LoopNestPattern() : KernelPattern("", KernelKind::loop_nest) {}

  SmallVector<KernelWorkspace>
  workspace(Operation *op, KernelConfigAttr,
            ArrayRef<SymShape> inputShapes) const override {
    return loopNestWorkspace(op, inputShapes);
  }

  LogicalResult emit(Operation *op, KernelEmission &e) const override {
    // On a GPU a loop nest's long sums (parallelWarps) take a warp each.
    e.kb.setWarpLanes(isa<GPUTargetAttr>(e.target) ? 32 : 1);
    if (failed(emitKernelBody(op, e.kb, e.inputs, e.outputs)))
      return failure();
    auto gpuFn = dyn_cast<gpu::GPUFuncOp>(e.fn.getOperation());
    if (!gpuFn)
      return success();
    OpBuilder &b = e.kb.builder();
    gpu::ReturnOp::create(b, op->getLoc());
    // One kernel per parallel phase; the launch lists them in order.
    SmallVector<Attribute> names;
    for (gpu::GPUFuncOp phase :
         distributeOverThreads(gpuFn, 32 * e.config.getWarps()))
      names.push_back(FlatSymbolRefAttr::get(phase.getNameAttr()));
    K3Dialect::PhasesAttrHelper(op->getContext())
        .setAttr(gpuFn, b.getArrayAttr(names));
    return success();
  }
};

} // namespace

void mlir::k3::populateLoopNestKernelPatterns(KernelPatternSet &patterns) {
  patterns.add<LoopNestPattern>();
}
