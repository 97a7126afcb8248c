//===- Passes.h - lowerings out of the K3 dialect ---------------*- C++ -*-===//
#ifndef K3_LOWERING_PASSES_H
#define K3_LOWERING_PASSES_H

#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::k3 {

#define GEN_PASS_DECL
#include "lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "lowering/Passes.h.inc"

/// Registers the `k3-compile` pipeline: inline layers, outline kernels,
/// plan memory, emit the artifact.
void registerK3Pipelines();

} // namespace mlir::k3

#endif // K3_LOWERING_PASSES_H
