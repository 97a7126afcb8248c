//===- ArtifactPlan.cpp - an entry's buffers and launches -------*- C++ -*-===//
#include "lowering/ArtifactPlan.h"
#include "lowering/ModelFunction.h"
#include "lowering/SymbolicShape.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <cmath>

using namespace mlir;
using namespace mlir::k3;
namespace art = ::k3::artifact;

namespace {

FailureOr<art::DType> dtypeOf(Operation *where, Type t) {
  Type e = cast<ShapedType>(t).getElementType();
  if (e.isBF16())
    return art::DType::BF16;
  if (e.isF16())
    return art::DType::F16;
  if (e.isF32())
    return art::DType::F32;
  if (e.isInteger(32))
    return art::DType::I32;
  if (isa<Float4E2M1FNType>(e))
    return art::DType::MXFP4;
  return where->emitOpError()
         << "element type " << e << " has no artifact dtype";
}

art::DimExpr dimExpr(int64_t d) {
  switch (d) {
  case kNumTokens:
    return art::DimExpr::symbol(kSymNumTokens);
  case kNumSeqs:
    return art::DimExpr::symbol(kSymNumSeqs);
  case kNumSeqsPlus1:
    return art::DimExpr::symbol(kSymNumSeqs, 1, 1, 1);
  default:
    return art::DimExpr::constant(d);
  }
}

std::vector<art::DimExpr> dimExprs(ArrayRef<int64_t> shape) {
  std::vector<art::DimExpr> out;
  for (int64_t d : shape)
    out.push_back(dimExpr(d));
  return out;
}

/// Deterministic random initialisation of a weight, by its role, so that a
/// random-weight model behaves like a trained one numerically: norms are
/// ones, biases zeros, projections scaled by 1/sqrt(fan-in).
art::WeightInit initFor(StringRef name, ArrayRef<int64_t> shape) {
  if (name.contains("norm"))
    return art::WeightInit::constant(1.0);
  if (name.ends_with("e_score_correction_bias"))
    return art::WeightInit::constant(0.0);
  if (name.ends_with("A_log") || name.ends_with("dt_bias"))
    return art::WeightInit::uniform(0.5);
  if (name.contains("conv1d"))
    return art::WeightInit::normal(0.5);
  if (name.contains("embed_tokens"))
    return art::WeightInit::normal(1.0);
  if (name.contains("_res_proj"))
    return art::WeightInit::normal(0.1);
  return art::WeightInit::normal(1.0 / std::sqrt((double)shape.back()));
}

/// The symbolic shape of a model argument (`k3.dims`) or op result
/// (`k3.shapes`), as k3-outline-kernels recorded it.
SmallVector<int64_t> symbolicShape(Value v) {
  MLIRContext *ctx = v.getContext();
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto fn = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    auto dims = fn.getArgAttrOfType<DenseI64ArrayAttr>(
        arg.getArgNumber(), K3Dialect::DimsAttrHelper(ctx).getName());
    return SmallVector<int64_t>(dims.asArrayRef());
  }
  ArrayAttr shapes =
      K3Dialect::ShapesAttrHelper(ctx).getAttr(v.getDefiningOp());
  unsigned i = cast<OpResult>(v).getResultNumber();
  return SmallVector<int64_t>(cast<DenseI64ArrayAttr>(shapes[i]).asArrayRef());
}

/// `scale` times the product of symbolic dims as one artifact dim; none
/// when two of them are symbolic.
std::optional<art::DimExpr> scaledProduct(ArrayRef<int64_t> dims,
                                          int64_t scale = 1) {
  int64_t k = scale;
  std::optional<int64_t> sym;
  for (int64_t d : dims) {
    if (d >= 0) {
      k *= d;
      continue;
    }
    if (sym)
      return std::nullopt;
    sym = d;
  }
  if (!sym)
    return art::DimExpr::constant(k);
  art::DimExpr e = dimExpr(*sym);
  return art::DimExpr::symbol(e.sym, e.a * k, e.b * k, e.c);
}

/// The product of symbolic dims as one artifact dim: at most one of them
/// symbolic.
FailureOr<art::DimExpr> productDim(Operation *op, ArrayRef<int64_t> dims) {
  if (std::optional<art::DimExpr> e = scaledProduct(dims))
    return *e;
  return op->emitOpError() << "spans two dynamic dimensions; the "
                              "artifact sizes a collective by one";
}

/// A GPU kernel's grid.x as the artifact evaluates it.
art::DimExpr gridOf(LaunchShapeAttr s) {
  switch (s.getGridSymbol()) {
  case GridSymbol::none:
    return art::DimExpr::constant((s.getGridOffset() + s.getGridDivisor() - 1) /
                                  s.getGridDivisor());
  case GridSymbol::num_tokens:
    return art::DimExpr::symbol(kSymNumTokens, s.getGridScale(),
                                s.getGridOffset(), s.getGridDivisor());
  case GridSymbol::num_seqs:
    return art::DimExpr::symbol(kSymNumSeqs, s.getGridScale(),
                                s.getGridOffset(), s.getGridDivisor());
  case GridSymbol::device_sm_count:
    return art::DimExpr::symbol(kSymDeviceSMCount, s.getGridScale(),
                                s.getGridOffset(), s.getGridDivisor());
  }
  llvm_unreachable("grid symbol");
}

} // namespace

int64_t ArtifactPlanner::bytesOf(Value v, ArrayRef<int64_t> shape) const {
  int64_t elt =
      (cast<RankedTensorType>(v.getType()).getElementTypeBitWidth() + 7) / 8;
  return evalSymNumElements(shape, maxTokens, maxSeqs) * elt;
}

uint32_t ArtifactPlanner::ioBuffer(const std::string &name,
                                   art::BufferKind kind, uint64_t bytes,
                                   uint32_t flags) {
  if (auto it = ioBuffers.find(name); it != ioBuffers.end()) {
    const art::Buffer &b = builder.artifact().buffers[it->second];
    if (b.kind == kind && b.size == bytes)
      return it->second;
  }
  std::string unique = name;
  for (int i = 2; ioBuffers.count(unique); ++i)
    unique = name + "#" + std::to_string(i);
  uint32_t id = builder.addBuffer(unique, kind, bytes, 0, 0, 0, flags);
  ioBuffers[unique] = id;
  return id;
}

FailureOr<uint32_t> ArtifactPlanner::stateBuffer(StringRef name, Value v) {
  auto it = states.find(name);
  if (it != states.end()) {
    Type first = stateTypes.lookup(name);
    Type here = cast<RankedTensorType>(v.getType()).getElementType();
    if (first != here) {
      Operation *at = v.getDefiningOp();
      return (at ? at->emitOpError() : emitError(v.getLoc()))
             << "state '" << name << "' is " << here << " here and " << first
             << " at its first use";
    }
    return it->second;
  }
  stateTypes[name] = cast<RankedTensorType>(v.getType()).getElementType();
  SmallVector<int64_t> shape = symbolicShape(v);
  int64_t perSeq = bytesOf(v, ArrayRef<int64_t>(shape).drop_front());
  uint32_t id =
      builder.addBuffer(name.str(), art::BufferKind::State, perSeq * maxSeqs, 0,
                        perSeq, 0, art::kBufferFlagDump);
  states[name] = id;
  return id;
}

FailureOr<uint32_t> ArtifactPlanner::weightBuffer(WeightOp w) {
  auto it = weights.find(w.getName());
  if (it != weights.end())
    return it->second;
  FailureOr<art::DType> dt = dtypeOf(w, w.getType());
  if (failed(dt))
    return failure();
  auto shape = w.getType().getShape();
  // A shard's values are its slice of the whole weight's, whose fan-in
  // sets their scale.
  SmallVector<int64_t> whole(shape);
  WeightShardAttr shard = K3Dialect::ShardAttrHelper(w.getContext()).getAttr(w);
  if (shard)
    whole[shard.getDim()] = shard.getExtent()
                                ? shard.getExtent()
                                : shape[shard.getDim()] * shard.getParts();
  uint32_t id = builder.addWeight(
      w.getName().str(), *dt, std::vector<int64_t>(shape.begin(), shape.end()),
      initFor(w.getName(), whole));
  if (shard)
    builder.addWeightShard({id, uint32_t(shard.getDim()),
                            shard.getGroup().str(), uint32_t(shard.getParts()),
                            uint64_t(whole[shard.getDim()])});
  weights[w.getName()] = id;
  return id;
}

LogicalResult ArtifactPlanner::planInputs(func::FuncOp fn, uint32_t entry,
                                          Where &where) {
  StringAttr nameAttr = K3Dialect::NameAttrHelper(fn.getContext()).getName();
  for (BlockArgument arg : fn.getArguments()) {
    auto name = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), nameAttr);
    std::string n =
        name ? name.str() : "arg" + std::to_string(arg.getArgNumber());
    SmallVector<int64_t> shape = symbolicShape(arg);
    FailureOr<art::DType> dt = dtypeOf(fn, arg.getType());
    if (failed(dt))
      return failure();
    uint32_t id = ioBuffer(n, art::BufferKind::Input, bytesOf(arg, shape), 0);
    uint32_t input = builder.addInput(entry, n, *dt, dimExprs(shape), id);
    if (failed(planMaxValue(fn, arg.getArgNumber(), entry, input)))
      return failure();
    where[arg] = art::Arg::buffer(id);
  }
  return success();
}

LogicalResult ArtifactPlanner::planMaxValue(func::FuncOp fn, unsigned argNo,
                                            uint32_t entry, uint32_t input) {
  StringRef kMaxValueAttr =
      K3Dialect::MaxValueAttrHelper(fn.getContext()).getName().getValue();
  StringRef kMaxValueReasonAttr =
      K3Dialect::MaxValueReasonAttrHelper(fn.getContext()).getName().getValue();
  Attribute bound = fn.getArgAttr(argNo, kMaxValueAttr);
  Attribute reason = fn.getArgAttr(argNo, kMaxValueReasonAttr);
  if (!bound && !reason)
    return success();
  const art::TensorSpec &t = builder.artifact().entries[entry].inputs[input];
  auto error = [&]() {
    return fn.emitOpError()
           << "argument " << argNo << " ('" << t.name << "'): ";
  };
  auto value = dyn_cast_or_null<IntegerAttr>(bound);
  auto text = dyn_cast_or_null<StringAttr>(reason);
  if (!bound)
    return error() << kMaxValueReasonAttr << " without " << kMaxValueAttr;
  if (!value || !value.getType().isIntOrIndex())
    return error() << kMaxValueAttr << " must be an integer, got " << bound;
  if (reason && !text)
    return error() << kMaxValueReasonAttr << " must be a string, got "
                   << reason;
  if (!art::dtypeIsInteger(t.dtype))
    return error() << kMaxValueAttr << " needs an integer input, not "
                   << art::dtypeName(t.dtype);
  const APInt &v = value.getValue();
  bool isUnsigned = value.getType().isUnsignedInteger();
  if (!isUnsigned && v.isNegative())
    return error() << kMaxValueAttr << " must not be negative, got " << bound;
  if (isUnsigned ? v.getActiveBits() > 63 : v.getSignificantBits() > 64)
    return error() << kMaxValueAttr << " does not fit in i64, got " << bound;
  builder.setInputMaxValue(
      entry, input, isUnsigned ? int64_t(v.getZExtValue()) : v.getSExtValue(),
      text ? text.str() : std::string());
  return success();
}

LogicalResult
ArtifactPlanner::planOutputs(func::FuncOp fn, uint32_t entry,
                             llvm::DenseMap<Value, uint32_t> &outputBuffer) {
  StringAttr nameAttr = K3Dialect::NameAttrHelper(fn.getContext()).getName();
  auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
    auto name = fn.getResultAttrOfType<StringAttr>(i, nameAttr);
    std::string n = name ? name.str() : "output" + std::to_string(i);
    Value root = bufferRoot(v);
    SmallVector<int64_t> shape = symbolicShape(root);
    FailureOr<art::DType> dt = dtypeOf(fn, v.getType());
    if (failed(dt))
      return failure();
    uint32_t id = ioBuffer(n, art::BufferKind::Output, bytesOf(root, shape),
                           art::kBufferFlagDump);
    builder.addOutput(entry, n, *dt, dimExprs(symbolicShape(v)), id);
    outputBuffer[root] = id;
  }
  return success();
}

LogicalResult ArtifactPlanner::planResults(
    Operation &op, const llvm::DenseMap<Value, uint32_t> &outputBuffer,
    Where &where) {
  ArrayAttr planned = K3Dialect::BufferAttrHelper(op.getContext()).getAttr(&op);
  for (Value r : op.getResults()) {
    unsigned i = cast<OpResult>(r).getResultNumber();
    if (auto it = outputBuffer.find(r); it != outputBuffer.end()) {
      where[r] = art::Arg::buffer(it->second);
      continue;
    }
    // Written to a state: its buffer (the other users of an in-place
    // update read it there, StateInPlace.h).
    auto writes = llvm::make_filter_range(
        r.getUsers(), [](Operation *u) { return isa<StateWriteOp>(u); });
    if (!writes.empty()) {
      auto w = cast<StateWriteOp>(*writes.begin());
      FailureOr<uint32_t> id = stateBuffer(w.getName(), r);
      if (failed(id))
        return failure();
      where[r] = art::Arg::buffer(*id);
      continue;
    }
    if (!planned || cast<IntegerAttr>(planned[i]).getInt() < 0)
      return op.emitOpError() << "result " << i << " has no planned buffer";
    // An empty tensor (no closed AttnRes block yet) still needs an address;
    // the artifact format has no empty buffers.
    uint64_t bytes =
        std::max<int64_t>(bytesOf(r, symbolicShape(r)), art::kArenaAlignment);
    uint32_t id = builder.addBuffer("act" + std::to_string(arenaCount++),
                                    art::BufferKind::Arena, bytes,
                                    cast<IntegerAttr>(planned[i]).getInt());
    where[r] = art::Arg::buffer(id);
  }
  return success();
}

FailureOr<std::vector<art::Arg>>
ArtifactPlanner::tensorMapArgs(LaunchOp launch, Operation *phase,
                               ArrayRef<art::Arg> args) {
  std::vector<art::Arg> out;
  ArrayAttr maps =
      K3Dialect::TensorMapsAttrHelper(launch.getContext()).getAttr(phase);
  if (!maps)
    return out;
  SmallVector<Value> operands(launch.getInputs());
  llvm::append_range(operands, launch.getResults());
  for (Attribute a : maps) {
    auto map = cast<TensorMapAttr>(a);
    int64_t i = map.getOperand();
    if (i < 0 || i >= (int64_t)operands.size())
      return launch.emitOpError()
             << "tensor map of operand " << i << " out of range";
    // The operand's own shape, not its buffer's: a reshaped view (an MLA
    // output [T, H, V] read as [T, H V] by its projection) shares the
    // buffer, and the kernel's box has the operand's rank.
    Value v = operands[i];
    SmallVector<int64_t> shape = symbolicShape(v);
    FailureOr<art::DType> dt = dtypeOf(launch, v.getType());
    if (failed(dt))
      return failure();
    // A box of lower rank reads the operand's leading dimensions as one
    // (row-major, they are contiguous): the grouped MoE down GEMM's rows
    // of h [T, K, I] as [T K, I].
    int64_t rank = map.getBox().size();
    if (rank < 1 || rank > (int64_t)shape.size())
      return launch.emitOpError()
             << "tensor map of operand " << i << " has a box of rank " << rank
             << " over " << shape.size() << " dimensions";
    int64_t collapsed = shape.size() - rank + 1;
    FailureOr<art::DimExpr> outer =
        productDim(launch, ArrayRef<int64_t>(shape).take_front(collapsed));
    if (failed(outer))
      return failure();
    art::TensorMapSpec spec;
    spec.source = args[i];
    spec.dtype = *dt;
    spec.rank = rank;
    // Innermost first; row-major byte strides, which need static inner
    // dimensions.
    int64_t stride = art::dtypeSize(*dt);
    for (int64_t d = shape.size() - 1; d >= collapsed; --d) {
      if (shape[d] < 0)
        return launch.emitOpError() << "tensor map of operand " << i
                                    << " needs static inner dimensions";
      spec.dims.push_back(dimExpr(shape[d]));
      if (d + 1 < (int64_t)shape.size())
        spec.strides.push_back(art::DimExpr::constant(stride));
      stride *= shape[d];
    }
    spec.dims.push_back(*outer);
    if (rank > 1)
      spec.strides.push_back(art::DimExpr::constant(stride));
    for (int64_t b : map.getBox())
      spec.box.push_back(b);
    spec.swizzle = static_cast<uint8_t>(map.getSwizzle());
    spec.l2Promotion = 3; // 256 bytes
    out.push_back(art::Arg::tensorMap(builder.addTensorMap(std::move(spec))));
  }
  return out;
}

/// What a kernel takes through the arg `arg` of operand `v`: a weight its
/// own bytes, an activation or state the bytes of the operand's symbolic
/// shape (0, unchecked, where that is not one linear expression). A buffer
/// is `written` where `v` is a result of the launch: its kernel writes only
/// its results (state updated in place is a result bound to the state's
/// buffer), which lets launch graphs run independent launches side by side.
art::ArgNeed ArtifactPlanner::needOf(Operation *launch, Value v,
                                     const art::Arg &arg, bool written) {
  art::ArgNeed need;
  need.kind = arg.kind;
  if (arg.kind == art::ArgKind::Buffer)
    need.access = written ? art::ArgAccess::Written : art::ArgAccess::Read;
  if (arg.kind == art::ArgKind::Weight) {
    need.bytes = art::DimExpr::constant(
        int64_t(art::weightBytes(builder.artifact().weights[arg.index])));
    return need;
  }
  if (arg.kind != art::ArgKind::Buffer)
    return need;
  FailureOr<art::DType> dt = dtypeOf(launch, v.getType());
  if (failed(dt) || art::dtypeSize(*dt) == 0)
    return need;
  if (std::optional<art::DimExpr> bytes =
          scaledProduct(symbolicShape(v), int64_t(art::dtypeSize(*dt))))
    need.bytes = *bytes;
  return need;
}

FailureOr<std::vector<LaunchRecord>>
ArtifactPlanner::launchRecords(LaunchOp launch, const Where &where) {
  LaunchRecord base;
  for (Value v : launch.getInputs()) {
    auto it = where.find(bufferRoot(v));
    if (it == where.end())
      return launch.emitOpError() << "operand has no buffer";
    base.args.push_back(it->second);
    base.needs.push_back(needOf(launch, v, it->second, /*written=*/false));
  }
  for (Value r : launch.getResults()) {
    base.args.push_back(where.lookup(r));
    base.needs.push_back(needOf(launch, r, base.args.back(), /*written=*/true));
  }
  base.args.push_back(art::Arg::symbol(kSymNumTokens));
  base.args.push_back(art::Arg::symbol(kSymNumSeqs));
  for (int s = 0; s < 2; ++s)
    base.needs.push_back({art::ArgKind::Symbol, art::DimExpr::constant(0)});
  for (int d = 0; d < 3; ++d)
    base.grid[d] = base.block[d] = art::DimExpr::constant(1);
  base.dynamicSharedMemory = art::DimExpr::constant(0);

  std::vector<LaunchRecord> records;
  Operation *kernel =
      SymbolTable::lookupNearestSymbolFrom(launch, launch.getKernel());
  if (!isa<gpu::GPUModuleOp>(kernels)) {
    base.kernel = launch.getKernel().getLeafReference().str();
    records.push_back(base);
    return records;
  }
  // On the GPU each parallel phase of the kernel is its own launch.
  MLIRContext *ctx = launch.getContext();
  ArrayAttr phases = K3Dialect::PhasesAttrHelper(ctx).getAttr(kernel);
  if (!phases)
    return launch.emitOpError() << "kernel has no phases";
  for (Attribute a : phases) {
    StringRef name = cast<FlatSymbolRefAttr>(a).getValue();
    Operation *phase = SymbolTable::lookupSymbolIn(kernels, name);
    LaunchShapeAttr shape =
        phase ? K3Dialect::LaunchShapeAttrHelper(ctx).getAttr(phase)
              : LaunchShapeAttr();
    if (!shape)
      return launch.emitOpError()
             << "kernel phase " << name << " has no #k3.launch_shape";
    LaunchRecord r = base;
    r.kernel = name.str();
    FailureOr<std::vector<art::Arg>> maps =
        tensorMapArgs(launch, phase, base.args);
    if (failed(maps))
      return failure();
    llvm::append_range(r.args, *maps);
    for (size_t m = 0; m < maps->size(); ++m)
      r.needs.push_back({art::ArgKind::TensorMap, art::DimExpr::constant(0)});
    r.grid[0] = gridOf(shape);
    r.grid[1] = art::DimExpr::constant(shape.getClusterY());
    for (int d = 0; d < 3; ++d)
      r.block[d] = art::DimExpr::constant(shape.getBlock()[d]);
    r.dynamicSharedMemory = art::DimExpr::constant(shape.getDynamicSmem());
    records.push_back(std::move(r));
  }
  return records;
}

LogicalResult ArtifactPlanner::planCollective(Operation &op, uint32_t entry,
                                              const Where &where) {
  Value in = op.getOperand(0), out = op.getResult(0);
  SmallVector<int64_t> inShape = symbolicShape(in),
                       outShape = symbolicShape(out);
  art::Collective c;
  // [outer, chunk] of the rank's own tensor: the input of an all-gather,
  // the output of a reduce-scatter, either of an all-reduce.
  ArrayRef<int64_t> own = inShape;
  int64_t dim = 0;
  if (auto r = dyn_cast<AllReduceOp>(op)) {
    c.kind = art::CollectiveKind::AllReduce;
    c.reduce = r.getReduction() == ReductionKind::sum ? art::ReduceOp::Sum
                                                      : art::ReduceOp::Max;
  } else if (auto g = dyn_cast<AllGatherOp>(op)) {
    c.kind = art::CollectiveKind::AllGather;
    dim = g.getDim();
  } else if (auto s = dyn_cast<ReduceScatterOp>(op)) {
    c.kind = art::CollectiveKind::ReduceScatter;
    c.reduce = s.getReduction() == ReductionKind::sum ? art::ReduceOp::Sum
                                                      : art::ReduceOp::Max;
    dim = s.getDim();
    own = outShape;
  } else if (auto a = dyn_cast<AllToAllOp>(op)) {
    // Split and concatenated along one dimension (EP's rows): [outer,
    // chunk] from it on, the runtime cutting each row in group_size shards.
    if (a.getSplitDim() != a.getConcatDim())
      return op.emitOpError()
             << "is run by the runtime only with split_dim == concat_dim "
                "(got "
             << a.getSplitDim() << " and " << a.getConcatDim() << ")";
    c.kind = art::CollectiveKind::AllToAll;
    dim = a.getSplitDim();
  } else {
    return op.emitOpError() << "is not a collective the runtime runs";
  }
  FailureOr<art::DType> dt = dtypeOf(&op, in.getType());
  FailureOr<art::DimExpr> outer = productDim(&op, own.take_front(dim)),
                          chunk = productDim(&op, own.drop_front(dim));
  if (failed(dt) || failed(outer) || failed(chunk))
    return failure();
  c.dtype = *dt;
  c.outer = *outer;
  c.chunk = *chunk;
  c.group = op.getAttrOfType<StringAttr>("group").str();
  c.groupSize = uint32_t(op.getAttrOfType<IntegerAttr>("group_size").getInt());
  art::Arg inArg = where.lookup(bufferRoot(in)), outArg = where.lookup(out);
  if (inArg.kind != art::ArgKind::Buffer || outArg.kind != art::ArgKind::Buffer)
    return op.emitOpError() << "needs activations in and out (not a weight)";
  builder.addCollective(entry, std::move(c), inArg, outArg);
  return success();
}

LogicalResult ArtifactPlanner::planEntry(func::FuncOp fn, StringRef name) {
  uint32_t entry = builder.addEntry(name.str());
  Where where;
  llvm::DenseMap<Value, uint32_t> outputBuffer;
  if (failed(planInputs(fn, entry, where)) ||
      failed(planOutputs(fn, entry, outputBuffer)))
    return failure();
  for (Operation &op : fn.getBody().front()) {
    if (auto w = dyn_cast<WeightOp>(op)) {
      FailureOr<uint32_t> id = weightBuffer(w);
      if (failed(id))
        return failure();
      where[w] = art::Arg::weight(*id);
      continue;
    }
    if (auto r = dyn_cast<StateReadOp>(op)) {
      FailureOr<uint32_t> id = stateBuffer(r.getName(), r);
      if (failed(id))
        return failure();
      where[r] = art::Arg::buffer(*id);
      continue;
    }
    // A state write's copy launch already wrote the state buffer.
    if (!isa<LaunchOp, tensor::EmptyOp>(op) && !isCollective(&op))
      continue;
    if (failed(planResults(op, outputBuffer, where)))
      return failure();
    if (isCollective(&op)) {
      if (failed(planCollective(op, entry, where)))
        return failure();
      continue;
    }
    auto launch = dyn_cast<LaunchOp>(op);
    if (!launch)
      continue;
    FailureOr<std::vector<LaunchRecord>> records = launchRecords(launch, where);
    if (failed(records))
      return failure();
    for (const LaunchRecord &r : *records) {
      uint32_t id = builder.addLaunch(entry, objectId, r.kernel, r.args, r.grid,
                                      r.block, r.dynamicSharedMemory);
      builder.artifact().entries[entry].launches[id].needs = r.needs;
    }
  }
  builder.bindNeedsToInputs(entry);
  return success();
}
