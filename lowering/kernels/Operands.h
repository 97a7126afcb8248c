//===- Operands.h - a kernel's operands and results by name -----*- C++ -*-===//
//
// A kernel receives its op's tensor operands as one list in operand order
// (OutlineKernels.cpp skips only non-tensor operands, and every operand of
// a k3 op is a tensor). operandsOf() wraps the list in the op's ODS adaptor,
// so that an emitter picks operands by name, `ops.getCuSeqlens()`, and an
// absent optional operand comes back as an empty KernelOperand (false).
// resultOf() names the outputs likewise, from the op's result accessors.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_KERNELS_OPERANDS_H
#define K3_LOWERING_KERNELS_OPERANDS_H

#include "lowering/KernelBuilder.h"

#include "llvm/Support/ErrorHandling.h"

#include <string>

namespace mlir::k3 {

/// The ODS adaptor of `OpTy` over a kernel's operand list.
template <typename OpTy>
using KernelOperands =
    typename OpTy::template GenericAdaptor<ArrayRef<KernelOperand>>;

/// Stops with a clear message when `op`'s kernel got `given` tensors where
/// the op has `expected` (an outlining bug, never an input error).
[[noreturn]] inline void reportKernelArity(Operation *op, const char *what,
                                           size_t given, size_t expected) {
  llvm::report_fatal_error(llvm::Twine("kernel of ") +
                               op->getName().getStringRef() + ": " +
                               std::to_string(given) + " " + what +
                               " given, the op has " + std::to_string(expected),
                           /*gen_crash_diag=*/false);
}

/// The kernel operands `in` of `op`, by the names of its ODS operands.
/// `in` must be all of the op's operands, in order (all are tensors).
template <typename OpTy>
KernelOperands<OpTy> operandsOf(OpTy op, ArrayRef<KernelOperand> in) {
  if (in.size() != op->getNumOperands())
    reportKernelArity(op, "operands", in.size(), op->getNumOperands());
  return KernelOperands<OpTy>(in, op);
}

/// The kernel output that holds result `r` (an ODS result accessor's value,
/// `op.getFinalState()`); empty for an absent optional result. The op's
/// results come first in `out`, then the kernel's workspace, if any
/// (KernelPatterns.h).
inline KernelOperand resultOf(ArrayRef<KernelOperand> out, Value r) {
  if (!r)
    return {};
  auto res = cast<OpResult>(r);
  Operation *op = res.getOwner();
  if (out.size() < op->getNumResults())
    reportKernelArity(op, "results", out.size(), op->getNumResults());
  return out[res.getResultNumber()];
}

} // namespace mlir::k3

#endif // K3_LOWERING_KERNELS_OPERANDS_H
