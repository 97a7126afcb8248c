//===- KernelBuilder.h - building kernel bodies as loop nests ---*- C++ -*-===//
//
// Kernel bodies are loop nests over memrefs (scf + arith + math + memref):
// outer loops over independent work are `scf.parallel` (a CPU runs them in
// order; the GPU target maps them to blocks and threads), reductions and
// recurrences are `scf.for`. Storage may be bf16/f16/f32; arithmetic is f32:
// `load` widens and `store` narrows.
//
// A kernel receives each tensor as a bare pointer (a rank-0 memref) and
// views it with `memref.reinterpret_cast` at its symbolic shape, so that
// the calling convention needs no memref descriptors.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_KERNELBUILDER_H
#define K3_LOWERING_KERNELBUILDER_H

#include "lowering/SymbolicShape.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"

#include <optional>

#include <functional>

namespace mlir::k3 {

class KernelBuilder {
public:
  /// Starts at the current insertion point, the kernel's entry block.
  KernelBuilder(OpBuilder &b, Location loc, Value numTokens, Value numSeqs)
      : b(b), loc(loc), numTokens(numTokens), numSeqs(numSeqs),
        entry(b.getInsertionBlock()) {}

  OpBuilder &builder() { return b; }
  Location getLoc() { return loc; }

  // Constants and sizes.
  Value idx(int64_t v);
  Value f32(double v);
  Value boolean(bool v);
  /// A symbolic or static dimension as an index value.
  Value dim(int64_t symDim);
  /// The number of elements of a symbolic shape (1 for no dimensions): a
  /// tensor's rows are numElements(shape.drop_back()).
  Value numElements(ArrayRef<int64_t> symShape);
  Value tokens() { return numTokens; }
  Value seqs() { return numSeqs; }

  /// Views the bare pointer `base` (rank-0 memref) as a row-major memref of
  /// the given sizes.
  Value view(Value base, ArrayRef<Value> sizes);
  Value view(Value base, ArrayRef<int64_t> symShape);

  // Memory: floats are widened to f32 on load and narrowed on store; i32
  // is loaded as index and stored from index.
  Value load(Value mem, ValueRange ivs);
  Value loadIndex(Value mem, ValueRange ivs);
  void store(Value v, Value mem, ValueRange ivs);
  void storeIndex(Value v, Value mem, ValueRange ivs);
  /// A stack buffer of `n` f32 scratch values, allocated once at kernel
  /// entry: a CPU kernel runs its parallel loops in order, so iterations
  /// reuse it. (Targets that run iterations concurrently give each its own.)
  Value scratch(int64_t n);
  /// Marks the extent of an iteration's scratch use.
  void scope(const std::function<void()> &body) { body(); }

  // Loops.
  void forRange(Value lb, Value ub, const std::function<void(Value)> &body);
  void forRange(Value ub, const std::function<void(Value)> &body) {
    forRange(idx(0), ub, body);
  }
  Value reduce(Value lb, Value ub, Value init,
               const std::function<Value(Value, Value)> &body);
  Value reduce(Value ub, Value init,
               const std::function<Value(Value, Value)> &body) {
    return reduce(idx(0), ub, init, body);
  }
  SmallVector<Value>
  reduceN(Value lb, Value ub, ValueRange inits,
          const std::function<SmallVector<Value>(Value, ValueRange)> &body);
  void parallel(ArrayRef<Value> ubs,
                const std::function<void(ValueRange)> &body);
  /// A parallel loop whose iterations are long sums (dot products over a
  /// hidden width): on a GPU (setWarpLanes(32)) each iteration takes a
  /// warp, whose lanes split the reduceSum(N)s inside it; elsewhere
  /// parallel().
  void parallelWarps(ArrayRef<Value> ubs,
                     const std::function<void(ValueRange)> &body);
  /// reduceN for sums: the body must return acc + (its term) for each
  /// value. Inside parallelWarps on a GPU, lane l sums the iterations l,
  /// l + 32, ... (consecutive lanes read consecutive elements), then a
  /// butterfly of shuffles adds the lanes; the result (in every lane) is
  /// inits + the sum, in another order than reduceN's.
  SmallVector<Value>
  reduceSumN(Value ub, ValueRange inits,
             const std::function<SmallVector<Value>(Value, ValueRange)> &body);
  Value reduceSum(Value ub, Value init,
                  const std::function<Value(Value, Value)> &body);
  /// reduceN for a selection (an argmax): `inits` must be the identity of
  /// `combine`, which merges two partial results and must be associative
  /// and commutative. Inside parallelWarps on a GPU, lane l scans the
  /// iterations l, l + 32, ... and a butterfly of shuffles combines the
  /// lanes (index values travel as i32); elsewhere reduceN.
  SmallVector<Value> reduceLanesN(
      Value ub, ValueRange inits,
      const std::function<SmallVector<Value>(Value, ValueRange)> &body,
      const std::function<SmallVector<Value>(ValueRange, ValueRange)> &combine);
  /// Lanes per parallelWarps iteration: 32 on a GPU target, 1 (the plain
  /// loop nest) elsewhere.
  void setWarpLanes(int64_t lanes) { warpLanes = lanes; }
  /// Whether the kernel is built for a GPU target (32 lanes a warp).
  bool forGPU() const { return warpLanes > 1; }
  void ifThen(Value cond, const std::function<void()> &body);
  /// An f32 (or other single) value computed on one of two branches, for
  /// loads that are only in bounds on one of them.
  Value ifElse(Value cond, Type type, const std::function<Value()> &thenFn,
               const std::function<Value()> &elseFn);

  // f32 arithmetic.
  Value add(Value a, Value b);
  Value sub(Value a, Value b);
  Value mul(Value a, Value b);
  Value div(Value a, Value b);
  Value neg(Value a);
  Value fma(Value a, Value b, Value c) { return add(mul(a, b), c); }
  Value exp(Value a);
  Value log1p(Value a);
  Value tanh(Value a);
  Value sqrt(Value a);
  Value rsqrt(Value a);
  Value sigmoid(Value a);
  Value silu(Value a) { return mul(a, sigmoid(a)); }
  Value softplus(Value a);
  Value maxf(Value a, Value b);
  Value gtf(Value a, Value b);
  Value eqf(Value a, Value b);
  Value select(Value c, Value a, Value b);

  // index arithmetic.
  Value addi(Value a, Value b);
  Value subi(Value a, Value b);
  Value muli(Value a, Value b);
  Value minsi(Value a, Value b);
  Value maxsi(Value a, Value b);
  Value lti(Value a, Value b);
  Value gei(Value a, Value b);
  Value eqi(Value a, Value b);
  Value andi(Value a, Value b);
  Value ori(Value a, Value b);
  Value notb(Value a);
  /// Unsigned quotient and remainder by a constant (thread and block ids).
  Value divui(Value a, int64_t d);
  Value remui(Value a, int64_t d);

  /// f32 value `v` as a buffer of element type `elem` holds it: rounded to
  /// `elem` and widened back (`v` itself for f32), so that a sum that the
  /// reference rounds before its next use is rounded here too.
  Value roundTo(Value v, Type elem);

  /// An index value as `a * symbol + b` (symbol kNumTokens or kNumSeqs,
  /// or 0 for a constant), when the builder can tell.
  struct Linear {
    int64_t symbol = 0, a = 0, b = 0;
  };
  std::optional<Linear> linearForm(Value v) const;

private:
  scf::ParallelOp parallelLoop(ArrayRef<Value> ubs,
                               const std::function<void(ValueRange)> &body);
  /// The scf.for of the reductions: iterations lb, lb + step, ... < ub.
  SmallVector<Value> reduceStrided(
      Value lb, Value ub, Value step, ValueRange inits,
      const std::function<SmallVector<Value>(Value, ValueRange)> &body);
  int64_t warpLanes = 1;
  bool inWarpLoop = false;
  void track(Value v, std::optional<Linear> form);

  OpBuilder &b;
  Location loc;
  Value numTokens, numSeqs;
  Block *entry;
  llvm::DenseMap<Value, Linear> forms;
};

// A kernel's top-level scf.parallel carries its iteration count as
// `k3.extent` = [symbol, a, b] meaning a * symbol + b (symbol 0 for a
// constant); GPU targets size their grids from it.

/// The tensors of one kernel: bare pointers and their symbolic shapes.
struct KernelOperand {
  Value base;     // rank-0 memref, the bare pointer
  SymShape shape; // symbolic shape
  Value full;     // `base` viewed at `shape`; MXFP4: unused (its bytes)
  Type stored;    // the tensor's element type (f4E2M1FN: bytes in `base`)

  /// False for an absent optional operand (a default-constructed one).
  explicit operator bool() const { return static_cast<bool>(base); }
};

/// Emits the body of the kernel that implements `op` (a k3 op or a tensor
/// slice/concat). Returns failure with a diagnostic for unsupported forms.
LogicalResult emitKernelBody(Operation *op, KernelBuilder &kb,
                             ArrayRef<KernelOperand> inputs,
                             ArrayRef<KernelOperand> outputs);

} // namespace mlir::k3

#endif // K3_LOWERING_KERNELBUILDER_H
