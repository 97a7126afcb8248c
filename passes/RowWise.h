//===- RowWise.h - ops that work token by token ------------------*- C++
//-*-===//
//
// A row-wise op computes each row (token) of its results from the same row
// of its operands that carry tokens alone: linear projections, norms,
// residual adds, gates, the MoE router and experts, GLU MLPs, the tensor-
// and expert-parallel all-reduce of partial sums. Selecting
// rows commutes with it, which k3-last-token-logits uses to run the last
// layer's tail on each sequence's last token only; the ops it moves there
// then see a decode step's few rows and take its forms (onLastTokenRows).
//
//===----------------------------------------------------------------------===//
#ifndef K3_PASSES_ROWWISE_H
#define K3_PASSES_ROWWISE_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

namespace mlir::k3 {

/// The operands of `op` that carry the tokens, where `op` is row-wise;
/// empty for any other op (its weights carry none).
SmallVector<OpOperand *> tokenOperands(Operation *op);

/// Whether `v`'s rows are the sequences' last tokens: it comes from
/// k3.last_tokens, or the last tokens' latent attention (LastTokenRows.h),
/// through row-wise ops and reshapes.
bool onLastTokenRows(Value v);

} // namespace mlir::k3

#endif // K3_PASSES_ROWWISE_H
