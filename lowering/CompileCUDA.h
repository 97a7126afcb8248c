//===- CompileCUDA.h - kernels gpu.module to an sm_90a cubin ----*- C++ -*-===//
#ifndef K3_LOWERING_COMPILECUDA_H
#define K3_LOWERING_COMPILECUDA_H

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir::k3 {

/// Lowers a copy of `kernels` through NVVM and the LLVM NVPTX backend to
/// PTX and, with CUDA's ptxas, to a cubin (`gpu-module-to-binary`). With
/// `format` "isa" the result is the PTX text instead. Emits a diagnostic on
/// failure.
LogicalResult compileKernelsForCUDA(gpu::GPUModuleOp kernels,
                                    std::vector<uint8_t> &binary,
                                    std::vector<std::string> &symbols,
                                    StringRef format = "bin");

} // namespace mlir::k3

#endif // K3_LOWERING_COMPILECUDA_H
