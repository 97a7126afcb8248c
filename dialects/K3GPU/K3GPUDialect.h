//===- K3GPUDialect.h - tile-level GPU ops upstream lacks -------*- C++ -*-===//
//
// The k3gpu dialect (K3GPUOps.td says why each op exists) and its lowering
// to NVVM.
//
//===----------------------------------------------------------------------===//
#ifndef K3_DIALECTS_K3GPU_K3GPUDIALECT_H
#define K3_DIALECTS_K3GPU_K3GPUDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/K3GPU/K3GPUOpsDialect.h.inc"

#define GET_OP_CLASSES
#include "dialects/K3GPU/K3GPUOps.h.inc"

namespace mlir {
class DialectRegistry;
class LLVMTypeConverter;
class RewritePatternSet;
class Pass;

namespace k3gpu {
/// Registers the dialect and loads it with the K3 dialect: the CUDA
/// emitters run inside K3 passes that do not name it as a dependency.
void registerK3GPUDialect(DialectRegistry &registry);

/// One pattern per k3gpu op, to NVVM.
void populateK3GPUToNVVMConversionPatterns(const LLVMTypeConverter &converter,
                                           RewritePatternSet &patterns);

/// convert-k3gpu-to-nvvm: the patterns above, in a partial conversion.
std::unique_ptr<Pass> createConvertK3GPUToNVVMPass();
void registerConvertK3GPUToNVVMPass();
} // namespace k3gpu
} // namespace mlir

#endif // K3_DIALECTS_K3GPU_K3GPUDIALECT_H
