//===- ArtifactPlan.h - an entry's buffers and launches ---------*- C++ -*-===//
//
// Reads an outlined, planned model function as the execution plan: where
// each value lives (an input or output buffer, a weight, a decode-state
// slot, an arena offset) and the ordered kernel launches, each recorded as
// `gpu.launch_func` states a launch (kernel, grid, block, dynamic shared
// memory, arguments).
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_ARTIFACTPLAN_H
#define K3_LOWERING_ARTIFACTPLAN_H

#include "dialects/K3/K3Dialect.h"

#include "k3/artifact.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::k3 {

/// Symbols of the artifact, in order: the call's sizes, then the device's
/// (filled in by the runtime).
enum ArtifactSymbol : uint32_t {
  kSymNumTokens = 0,
  kSymNumSeqs = 1,
  kSymDeviceSMCount = 2,
};

/// One kernel launch, as gpu.launch_func states it.
struct LaunchRecord {
  std::string kernel; // entry point in the kernel object
  ::k3::artifact::DimExpr grid[3], block[3];
  ::k3::artifact::DimExpr dynamicSharedMemory;
  std::vector<::k3::artifact::Arg> args;
  /// What the kernel takes through each arg (section ANED).
  std::vector<::k3::artifact::ArgNeed> needs;
};

/// Plans the entries of one artifact into `builder`. Weights, decode state
/// and kernels are shared by the entries; inputs and outputs of the same
/// name, kind and size share a buffer (the entries never run at once).
class ArtifactPlanner {
public:
  ArtifactPlanner(::k3::artifact::Builder &builder, Operation *kernels,
                  uint32_t objectId, int64_t maxTokens, int64_t maxSeqs)
      : builder(builder), kernels(kernels), objectId(objectId),
        maxTokens(maxTokens), maxSeqs(maxSeqs) {}

  /// Adds the entry `name` planned from `fn`.
  LogicalResult planEntry(func::FuncOp fn, StringRef name);

private:
  using Where = llvm::DenseMap<Value, ::k3::artifact::Arg>;

  LogicalResult planInputs(func::FuncOp fn, uint32_t entry, Where &where);
  /// The bound on the values of argument `argNo` (`k3.max_value`, with its
  /// `k3.max_value_reason`), recorded on the entry's input `input`.
  LogicalResult planMaxValue(func::FuncOp fn, unsigned argNo, uint32_t entry,
                             uint32_t input);
  LogicalResult planOutputs(func::FuncOp fn, uint32_t entry,
                            llvm::DenseMap<Value, uint32_t> &outputBuffer);
  LogicalResult planResults(Operation &op,
                            const llvm::DenseMap<Value, uint32_t> &outputs,
                            Where &where);
  FailureOr<uint32_t> weightBuffer(WeightOp w);
  /// The buffer of state `name`, created at its first use `v`; an error
  /// where `v`'s type is not the state's first use's (a state written as
  /// f32 and read as bf16 would overrun its buffer).
  FailureOr<uint32_t> stateBuffer(StringRef name, Value v);
  uint32_t ioBuffer(const std::string &name, ::k3::artifact::BufferKind kind,
                    uint64_t bytes, uint32_t flags);
  /// What the kernel of `launch` takes through `arg`, the arg of its
  /// operand `v` (section ANED); `written`: `v` is one of its results.
  ::k3::artifact::ArgNeed needOf(Operation *launch, Value v,
                                 const ::k3::artifact::Arg &arg, bool written);
  /// The launches of one k3.launch: one on the CPU, one per parallel phase
  /// on a GPU.
  FailureOr<std::vector<LaunchRecord>> launchRecords(LaunchOp launch,
                                                     const Where &where);
  /// The tensor-map arguments a GPU kernel takes after its sizes
  /// (`k3.tensor_maps`), over the launch's operand arguments `args`.
  FailureOr<std::vector<::k3::artifact::Arg>>
  tensorMapArgs(LaunchOp launch, Operation *phase,
                ArrayRef<::k3::artifact::Arg> args);
  /// A collective op as a collective launch (artifact format 1.3).
  LogicalResult planCollective(Operation &op, uint32_t entry,
                               const Where &where);
  int64_t bytesOf(Value v, ArrayRef<int64_t> shape) const;

  ::k3::artifact::Builder &builder;
  Operation *kernels;
  uint32_t objectId;
  int64_t maxTokens, maxSeqs;
  llvm::StringMap<uint32_t> weights, states, ioBuffers;
  llvm::StringMap<Type> stateTypes; // element type at a state's first use
  unsigned arenaCount = 0;
};

} // namespace mlir::k3

#endif // K3_LOWERING_ARTIFACTPLAN_H
