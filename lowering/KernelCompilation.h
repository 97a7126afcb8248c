//===- KernelCompilation.h - the kernels module to machine code -*- C++ -*-===//
#ifndef K3_LOWERING_KERNELCOMPILATION_H
#define K3_LOWERING_KERNELCOMPILATION_H

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::k3 {

/// The kernels of a module as one object for the artifact.
struct CompiledKernels {
  bool gpu = false;                 // a cubin (sm_90a), else a shared object
  std::vector<uint8_t> object;      // the bytes the runtime loads
  std::vector<std::string> symbols; // its kernel entry points
};

/// Compiles `kernels` (@k3_kernels: a gpu.module to a cubin through NVVM,
/// PTX and ptxas; a builtin.module to a host shared object through LLVM and
/// `linker`). A non-empty `ptxOutput` also writes a GPU module's PTX there.
FailureOr<CompiledKernels> compileKernels(Operation *kernels, StringRef linker,
                                          StringRef ptxOutput);

} // namespace mlir::k3

#endif // K3_LOWERING_KERNELCOMPILATION_H
