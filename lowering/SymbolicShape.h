//===- SymbolicShape.h - shapes in terms of the runtime sizes ---*- C++ -*-===//
//
// A compiled model runs on any number of tokens T <= max-tokens and
// sequences N <= max-seqs. Every dynamic dimension of the model function is
// one of T, N or N + 1 (cu_seqlens); this analysis says which, so kernels
// take exactly two runtime sizes and the memory plan can size each buffer
// at the compiled bounds. Dimensions that are dynamic in the types but
// constant by construction (the number of closed AttnRes blocks) come out
// static.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_SYMBOLICSHAPE_H
#define K3_LOWERING_SYMBOLICSHAPE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace mlir::k3 {

/// Codes of symbolic dimensions; non-negative values are static sizes.
enum SymDim : int64_t {
  kNumTokens = -1,   // T
  kNumSeqs = -2,     // N
  kNumSeqsPlus1 = -3 // N + 1
};

using SymShape = llvm::SmallVector<int64_t, 4>;

/// Renders "Tx2x16" style text for diagnostics and kernel names.
std::string symShapeToString(ArrayRef<int64_t> shape);

/// Size of one dimension at the given runtime sizes.
int64_t evalSymDim(int64_t dim, int64_t numTokens, int64_t numSeqs);

/// Number of elements at the given runtime sizes.
int64_t evalSymNumElements(ArrayRef<int64_t> shape, int64_t numTokens,
                           int64_t numSeqs);

/// Symbolic shapes of the tensor values of a model function (before kernel
/// outlining). Function arguments are classified by their `k3.name`:
/// `token_ids` is [T], `cu_seqlens` [N + 1], `context_lens` [N].
class SymbolicShapes {
public:
  /// Analyses `fn`; on failure a diagnostic has been emitted.
  LogicalResult analyze(func::FuncOp fn);

  const SymShape &lookup(Value v) const;
  /// Records the shape of a value that replaces an analysed one.
  void record(Value v, SymShape shape) { shapes[v] = std::move(shape); }
  bool contains(Value v) const { return shapes.count(v); }
  /// The value of an index-typed SSA value as a symbolic dimension, if it
  /// is one (constants, tensor.dim of an analysed tensor).
  std::optional<int64_t> lookupIndex(Value v) const;

private:
  LogicalResult set(Value v, SymShape shape, Operation *where);
  LogicalResult visit(Operation *op);

  llvm::DenseMap<Value, SymShape> shapes;
  llvm::DenseMap<Value, int64_t> indices;
};

} // namespace mlir::k3

#endif // K3_LOWERING_SYMBOLICSHAPE_H
