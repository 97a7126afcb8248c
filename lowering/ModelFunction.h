//===- ModelFunction.h - shared by the back-end passes ----------*- C++ -*-===//
#ifndef K3_LOWERING_MODELFUNCTION_H
#define K3_LOWERING_MODELFUNCTION_H

#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::k3 {

/// The model function `entry` of `module`, or null after a diagnostic.
inline func::FuncOp lookupModelFunction(ModuleOp module, StringRef entry) {
  auto fn = module.lookupSymbol<func::FuncOp>(entry);
  if (!fn)
    module.emitError() << "no model function '" << entry << "'";
  return fn;
}

/// The entries compiled from the model function `entry`: itself, then its
/// decode entry `<entry>_decode` (k3-decode-entry) when there is one. Empty
/// (with a diagnostic) when `entry` does not exist.
inline SmallVector<func::FuncOp, 2> modelEntries(ModuleOp module,
                                                 StringRef entry) {
  SmallVector<func::FuncOp, 2> fns;
  if (func::FuncOp fn = lookupModelFunction(module, entry))
    fns.push_back(fn);
  else
    return fns;
  if (auto d = module.lookupSymbol<func::FuncOp>((entry + "_decode").str()))
    if (K3Dialect::DecodeAttrHelper(module.getContext()).isAttrPresent(d))
      fns.push_back(d);
  return fns;
}

/// The value whose buffer `v` uses: reshapes and casts alias their source.
inline Value bufferRoot(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (auto e = dyn_cast<tensor::ExpandShapeOp>(def))
      v = e.getSrc();
    else if (auto c = dyn_cast<tensor::CollapseShapeOp>(def))
      v = c.getSrc();
    else if (auto c = dyn_cast<tensor::CastOp>(def))
      v = c.getSource();
    else
      break;
  }
  return v;
}

} // namespace mlir::k3

#endif // K3_LOWERING_MODELFUNCTION_H
