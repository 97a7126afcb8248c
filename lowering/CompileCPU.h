//===- CompileCPU.h - kernels module to a host shared object ----*- C++ -*-===//
#ifndef K3_LOWERING_COMPILECPU_H
#define K3_LOWERING_COMPILECPU_H

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::k3 {

/// Lowers a copy of `kernels` (func.func loop nests) to LLVM, adds for each
/// kernel `name` the packed entry `void name(void **params)` of the artifact
/// calling convention (the loop nest becomes `name_impl`), compiles it for
/// the host at -O3 and links a shared object with `linker`. On failure
/// emits a diagnostic on `kernels`.
LogicalResult compileKernelsForHost(ModuleOp kernels, StringRef linker,
                                    std::vector<uint8_t> &sharedObject,
                                    std::vector<std::string> &symbols);

} // namespace mlir::k3

#endif // K3_LOWERING_COMPILECPU_H
