//===- KernelCompilation.cpp - the kernels module to machine code -*- C++ -*-//
#include "lowering/KernelCompilation.h"
#include "lowering/CompileCPU.h"
#include "lowering/CompileCUDA.h"

#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::k3;

/// Writes the PTX of `kernels` to `path` (to read registers and spills with
/// ptxas -v).
static LogicalResult writePTX(gpu::GPUModuleOp kernels, StringRef path) {
  std::vector<uint8_t> ptx;
  std::vector<std::string> unused;
  if (failed(compileKernelsForCUDA(kernels, ptx, unused, "isa")))
    return failure();
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return kernels.emitError()
           << "cannot write " << path << ": " << ec.message();
  os.write(reinterpret_cast<const char *>(ptx.data()), ptx.size());
  return success();
}

FailureOr<CompiledKernels> mlir::k3::compileKernels(Operation *kernels,
                                                    StringRef linker,
                                                    StringRef ptxOutput) {
  CompiledKernels out;
  if (auto gpuKernels = dyn_cast<gpu::GPUModuleOp>(kernels)) {
    out.gpu = true;
    if (failed(compileKernelsForCUDA(gpuKernels, out.object, out.symbols)))
      return failure();
    if (!ptxOutput.empty() && failed(writePTX(gpuKernels, ptxOutput)))
      return failure();
    return out;
  }
  if (failed(compileKernelsForHost(cast<ModuleOp>(kernels), linker, out.object,
                                   out.symbols)))
    return failure();
  return out;
}
