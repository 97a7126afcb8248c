//===- k3-opt.cpp - the K3 compiler driver ----------------------*- C++ -*-===//
//
// mlir-opt with the K3 and k3gpu dialects and passes, plus the upstream
// dialects and conversions the K3 pipelines lower through (linalg, scf, gpu,
// nvgpu, nvvm, llvm) and the LLVM IR translations `gpu-module-to-binary` needs.
//
//===----------------------------------------------------------------------===//
#include "dialects/K3/K3Dialect.h"
#include "dialects/K3GPU/K3GPUDialect.h"
#include "lowering/Passes.h"
#include "passes/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::k3::registerK3Passes();
  mlir::k3::registerK3LoweringPasses();
  mlir::k3::registerK3Pipelines();
  mlir::k3gpu::registerConvertK3GPUToNVVMPass();

  mlir::DialectRegistry registry;
  registry.insert<mlir::k3::K3Dialect>();
  mlir::k3gpu::registerK3GPUDialect(registry);
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv,
      "K3 compiler: Kimi-K3-style hybrid models to CPU and sm_90a\n",
      registry));
}
