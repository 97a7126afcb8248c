//===- GridDependencyControl.cpp - kernels that overlap launches -*- C++
//-*-===//
//
// A decode step of Kimi-Linear-48B is ~530 kernels of a few microseconds;
// between two of them the GPU drains one grid, then launches and ramps up
// the next. With programmatic dependent launch (sm_90) the next grid is
// scheduled while the previous one drains, and each block waits for it
// (griddepcontrol.wait) before its first memory access. The wait comes
// first in every kernel, unconditionally: a kernel that could finish
// without waiting would let the one after it run before the one before it.
// launch_dependents right after it lets the following kernel be scheduled
// as soon as this one's last blocks have started.
//
//===----------------------------------------------------------------------===//
#include "lowering/Passes.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GRIDDEPENDENCYCONTROL
#include "lowering/Passes.h.inc"

namespace {

struct K3GridDependencyControlPass
    : impl::K3GridDependencyControlBase<K3GridDependencyControlPass> {
  void runOnOperation() override {
    for (auto fn : getOperation().getOps<gpu::GPUFuncOp>()) {
      if (!fn.isKernel() || fn.getBody().empty())
        continue;
      OpBuilder b = OpBuilder::atBlockBegin(&fn.getBody().front());
      NVVM::GriddepcontrolOp::create(b, fn.getLoc(),
                                     NVVM::GridDepActionKind::wait);
      NVVM::GriddepcontrolOp::create(
          b, fn.getLoc(), NVVM::GridDepActionKind::launch_dependents);
    }
  }
};

} // namespace
} // namespace mlir::k3
