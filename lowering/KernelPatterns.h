//===- KernelPatterns.h - one kernel pattern per op -------------*- C++ -*-===//
//
// How k3-outline-kernels turns an op into a kernel body: the op's
// #k3.kernel_config names a kernel kind, and the pattern registered for the
// op and that kind emits the body into the kernel function (and, on a GPU,
// states its launch shape). Dedicated GPU kernels are one pattern per op
// (lowering/cuda/Patterns.cpp); every op also has the generic loop nest
// (lowering/kernels/), the fallback pattern of kind `loop_nest`.
//
// Patterns see the op's tensor operands through the op's ODS adaptor over
// KernelOperands, so operands are reached by name (`a.getCuSeqlens()`),
// never by position.
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_KERNELPATTERNS_H
#define K3_LOWERING_KERNELPATTERNS_H

#include "dialects/K3/K3Dialect.h"
#include "lowering/KernelBuilder.h"

#include "mlir/Interfaces/FunctionInterfaces.h"

#include <functional>
#include <memory>
#include <vector>

namespace mlir::k3 {

/// What a pattern emits into: the kernel function (func.func on the CPU,
/// gpu.func on a GPU; the builder is at its body's start), the op's tensor
/// operands and results as views, its config and the target.
struct KernelEmission {
  FunctionOpInterface fn;
  KernelBuilder &kb;
  ArrayRef<KernelOperand> inputs, outputs;
  KernelConfigAttr config;
  Attribute target;

  /// Sets the GPU kernel's launch: grid.x = ceil_div(scale * sym + offset,
  /// divisor) blocks of `block` threads, `smem` bytes of dynamic shared
  /// memory; and its launch bounds (setLaunchBounds).
  void setLaunch(GridSymbol sym, int64_t scale, int64_t offset, int64_t divisor,
                 ArrayRef<int64_t> block, int64_t smem = 0) const;
  /// The same with the grid's size a KernelBuilder::Linear form (a * symbol
  /// + b) times `perUnit`, divided by `divisor`.
  void setLaunch(const KernelBuilder::Linear &form, int64_t perUnit,
                 int64_t extra, int64_t divisor, ArrayRef<int64_t> block,
                 int64_t smem = 0) const;
  /// The token count `symDim` (a symbolic dimension) as a Linear form for
  /// setLaunch; an error on `op`, naming the config's kernel, when it is
  /// not linear in one runtime size.
  FailureOr<KernelBuilder::Linear> tokenForm(Operation *op,
                                             int64_t symDim) const;
  /// Where the config caps resident blocks (blocks_per_sm > 0), tells ptxas
  /// the block size (`nvvm.maxntid`) and that many blocks per SM
  /// (`nvvm.minctasm`), from which it sizes the register budget.
  void setLaunchBounds(ArrayRef<int64_t> block) const;
  /// Launches the kernel set by setLaunch as clusters of `blocks` blocks
  /// along y (LaunchShapeAttr's cluster_y; `nvvm.cluster_dim`, which ptxas
  /// turns into `.reqnctapercluster`, so a plain launch forms them).
  void setClusterY(int64_t blocks) const;
  /// Ends a single-phase GPU kernel whose body was emitted: its return, and
  /// the kernel itself as its one launch (`k3.phases`).
  void finishSinglePhase(Location loc) const;

  /// The launch shape that setLaunch would set, for one phase of a kernel
  /// of several (finishPhases).
  LaunchShapeAttr launchShape(const KernelBuilder::Linear &form,
                              int64_t perUnit, int64_t extra, int64_t divisor,
                              ArrayRef<int64_t> block, int64_t smem = 0) const;
  /// Emits `body` as phase `index` of a kernel of several launches: into
  /// an scf.execute_region marked with the index, which finishPhases keeps
  /// in that phase's function only. Values defined before the regions (the
  /// operands' views, thread indices) are shared by all phases.
  void emitPhase(int64_t index, const std::function<void()> &body) const;
  /// Ends a kernel whose phases were emitted by emitPhase: phase 0 stays in
  /// the kernel function, phase p > 0 moves to a copy named `<kernel>__p`,
  /// each with its launch shape (`launches[p]`) and launch bounds; the
  /// kernel lists them in order (`k3.phases`), the launches the runtime
  /// makes one after the other on the stream, so a phase sees all of the
  /// previous one's writes.
  void finishPhases(Location loc, ArrayRef<LaunchShapeAttr> launches) const;
};

/// Global memory a kernel needs beyond its op's results (partial results
/// passed between the phases of a loop nest, split-K partial sums): an
/// extra result of the launch, planned in the arena like an activation and
/// used by nothing else. `shape` is symbolic (SymbolicShape.h).
struct KernelWorkspace {
  Type elementType;
  SymShape shape;
};

/// Lowers ops of one name (or, for the fallback, every op) with one kind of
/// kernel.
class KernelPattern {
public:
  /// `rootName` empty: any op.
  KernelPattern(StringRef rootName, KernelKind kind)
      : rootName(rootName.str()), kind(kind) {}
  virtual ~KernelPattern() = default;

  StringRef getRootName() const { return rootName; }
  KernelKind getKind() const { return kind; }

  /// Emits the body of `op`'s kernel; failure with a diagnostic at `op`.
  /// The workspace comes after the op's results in `e.outputs`.
  virtual LogicalResult emit(Operation *op, KernelEmission &e) const = 0;

  /// The workspace `op`'s kernel needs, given its operands' shapes.
  virtual SmallVector<KernelWorkspace>
  workspace(Operation *op, KernelConfigAttr config,
            ArrayRef<SymShape> inputShapes) const {
    return {};
  }

private:
  std::string rootName;
  KernelKind kind;
};

/// A pattern for one op type, which receives the op's operands through its
/// ODS adaptor.
template <typename OpTy> class OpKernelPattern : public KernelPattern {
public:
  using Adaptor =
      typename OpTy::template GenericAdaptor<ArrayRef<KernelOperand>>;
  explicit OpKernelPattern(KernelKind kind)
      : KernelPattern(OpTy::getOperationName(), kind) {}

  virtual LogicalResult emit(OpTy op, Adaptor operands,
                             KernelEmission &e) const = 0;

  LogicalResult emit(Operation *op, KernelEmission &e) const final {
    auto typed = cast<OpTy>(op);
    if (e.inputs.size() != op->getNumOperands())
      return op->emitOpError()
             << "kernel pattern expects all " << op->getNumOperands()
             << " operands to be tensors";
    return emit(typed, Adaptor(e.inputs, typed), e);
  }
};

/// The patterns a compilation uses, looked up by op name and kernel kind.
class KernelPatternSet {
public:
  template <typename... Ps> KernelPatternSet &add() {
    (patterns.push_back(std::make_unique<Ps>()), ...);
    return *this;
  }
  /// The pattern for `op` and `kind`: one registered for the op's name,
  /// else one registered for any op; null when there is none.
  const KernelPattern *lookup(Operation *op, KernelKind kind) const;

private:
  std::vector<std::unique_ptr<KernelPattern>> patterns;
};

/// The generic loop nest of every op (lowering/kernels/), spread over the
/// threads of a GPU (GPUDistribute.h) with the config's warps per block.
void populateLoopNestKernelPatterns(KernelPatternSet &patterns);

/// The dedicated GPU kernels (lowering/cuda/).
void populateCUDAKernelPatterns(KernelPatternSet &patterns);

} // namespace mlir::k3

#endif // K3_LOWERING_KERNELPATTERNS_H
