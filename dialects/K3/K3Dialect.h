//===- K3Dialect.h - The K3 model dialect -----------------------*- C++ -*-===//
#ifndef K3_DIALECTS_K3_K3DIALECT_H
#define K3_DIALECTS_K3_K3DIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/K3/K3Enums.h.inc"

// The attributes before the dialect: its discardable-attribute helpers
// (K3Dialect.td) name them.
#define GET_ATTRDEF_CLASSES
#include "dialects/K3/K3Attrs.h.inc"

#include "dialects/K3/K3Dialect.h.inc"

#define GET_OP_CLASSES
#include "dialects/K3/K3Ops.h.inc"

namespace mlir::k3 {
/// Removes every `k3.*` attribute of `fn` and of its arguments (before a
/// kernel goes to LLVM, to which they mean nothing).
void stripK3Attributes(FunctionOpInterface fn);

/// Whether `op` lies in a decode entry: a function marked `k3.decode`
/// (k3-decode-entry's copy of the model function, called with at most one
/// token per sequence; the runtime refuses more, input_checks.cpp). Chunk
/// forms of KDA and prefill-shaped kernels do not apply there.
bool inDecodeEntry(Operation *op);

/// Whether `op` is a collective of an SPMD program (K3CollectiveOps.td):
/// where ranks meet, run by the runtime's communicator, not a kernel.
bool isCollective(Operation *op);

/// Whether `op` lies in a decode entry: a function marked `k3.decode`
/// (k3-decode-entry's copy of the model function, called with at most one
/// token per sequence; the runtime refuses more, input_checks.cpp). Chunk
/// forms of KDA and prefill-shaped kernels do not apply there.
bool inDecodeEntry(Operation *op);
} // namespace mlir::k3

#endif // K3_DIALECTS_K3_K3DIALECT_H
