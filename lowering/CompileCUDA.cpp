//===- CompileCUDA.cpp - kernels gpu.module to an sm_90a cubin --*- C++ -*-===//
//
// Host code is not lowered here: MLIR's gpu-to-llvm host path calls the
// CUDA runner library, which Debian does not ship and the runtime must not
// link. The artifact's plan is the host orchestration instead.
//
// The dedicated kernels (cuda/) are built from nvgpu and k3gpu ops: their
// conversions run before convert-gpu-to-nvvm lowers the rest.
//
//===----------------------------------------------------------------------===//
#include "lowering/CompileCUDA.h"

#include "dialects/K3/K3Dialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <cstdlib>

using namespace mlir;

namespace {
constexpr const char *kDevicePipeline =
    // nvgpu before scf-to-cf: the nvgpu types of loop-carried values
    // (warpgroup accumulators) convert with the structured loops.
    // k3-grid-dependency-control first: its wait must precede everything.
    "gpu.module(k3-grid-dependency-control,expand-strided-metadata,"
    "lower-affine,"
    "convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,"
    "convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},"
    "convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts)";
} // namespace

LogicalResult mlir::k3::compileKernelsForCUDA(gpu::GPUModuleOp kernels,
                                              std::vector<uint8_t> &binary,
                                              std::vector<std::string> &symbols,
                                              StringRef format) {
  MLIRContext *ctx = kernels.getContext();
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> host(ModuleOp::create(kernels.getLoc()));
  (*host)->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                   b.getUnitAttr());
  b.setInsertionPointToEnd(host->getBody());
  auto copy = cast<gpu::GPUModuleOp>(b.clone(*kernels));
  symbols.clear();
  for (auto fn : copy.getOps<gpu::GPUFuncOp>()) {
    symbols.push_back(fn.getName().str());
    // The compiler's annotations mean nothing to LLVM.
    stripK3Attributes(fn);
  }

  // The toolkit gives ptxas and libdevice (the __nv_* math functions);
  // name it rather than rely on the environment of whoever runs k3-opt.
  std::string toolkit = "/usr/local/cuda";
  for (const char *var : {"K3_CUDA_HOME", "CUDA_HOME", "CUDA_PATH"})
    if (const char *v = std::getenv(var); v && *v) {
      toolkit = v;
      break;
    }
  PassManager pm(ctx);
  std::string pipeline = std::string(kDevicePipeline) +
                         ",gpu-module-to-binary{format=" + format.str() +
                         " toolkit=" + toolkit + "}";
  if (failed(parsePassPipeline(pipeline, pm)))
    return kernels.emitError() << "internal: bad device pipeline";
  if (failed(pm.run(*host)))
    return kernels.emitError() << "compiling the kernels for sm_90a failed";

  auto bin = host->lookupSymbol<gpu::BinaryOp>(kernels.getName());
  if (!bin || bin.getObjects().size() != 1)
    return kernels.emitError() << "internal: no single gpu.binary produced";
  auto object = cast<gpu::ObjectAttr>(bin.getObjects()[0]);
  StringRef bytes = object.getObject().getValue();
  binary.assign(bytes.begin(), bytes.end());
  return success();
}
