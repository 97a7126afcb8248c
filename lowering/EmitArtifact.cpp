//===- EmitArtifact.cpp - write the .k3bin of a planned model ---*- C++ -*-===//
//
// Reads the outlined, planned model function as the execution plan: every
// k3.launch becomes a launch whose arguments are the buffers of its
// operands and results followed by the runtime sizes; weights, decode
// state, inputs and outputs become the artifact's manifest and buffers.
//
//===----------------------------------------------------------------------===//
#include "lowering/CompileCPU.h"
#include "lowering/CompileCUDA.h"
#include "lowering/GPUDistribute.h"
#include "lowering/ModelFunction.h"
#include "lowering/Passes.h"
#include "lowering/SymbolicShape.h"
#include "lowering/cuda/CUDAKernels.h"

#include "k3/artifact.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace mlir::k3 {
#define GEN_PASS_DEF_K3EMITARTIFACT
#include "lowering/Passes.h.inc"

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
  return where->emitOpError()
         << "element type " << e << " has no artifact dtype";
}

art::DimExpr dimExpr(int64_t d) {
  switch (d) {
  case kNumTokens:
    return art::DimExpr::symbol(0);
  case kNumSeqs:
    return art::DimExpr::symbol(1);
  case kNumSeqsPlus1:
    return art::DimExpr::symbol(1, 1, 1, 1);
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

SmallVector<int64_t> shapeOfResult(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto fn = cast<func::FuncOp>(arg.getOwner()->getParentOp());
    auto dims =
        fn.getArgAttrOfType<DenseI64ArrayAttr>(arg.getArgNumber(), "k3.dims");
    return SmallVector<int64_t>(dims.asArrayRef());
  }
  auto attr = v.getDefiningOp()->getAttrOfType<ArrayAttr>("k3.shapes");
  unsigned i = cast<OpResult>(v).getResultNumber();
  return SmallVector<int64_t>(cast<DenseI64ArrayAttr>(attr[i]).asArrayRef());
}

int64_t bytesOf(Value v, ArrayRef<int64_t> shape, int64_t maxTokens,
                int64_t maxSeqs) {
  int64_t elt =
      (cast<RankedTensorType>(v.getType()).getElementTypeBitWidth() + 7) / 8;
  return evalSymNumElements(shape, maxTokens, maxSeqs) * elt;
}

/// Blocks for a distributed kernel phase: enough for one iteration per
/// thread when the iteration count is known as a * symbol + b, else a fixed
/// grid (the grid-stride loop is correct with any grid).
art::DimExpr gridFor(Operation *phase, int64_t maxTokens, int64_t maxSeqs) {
  auto g = phase->getAttrOfType<DenseI64ArrayAttr>("k3.grid");
  if (!g)
    return art::DimExpr::constant(132 * 8);
  int64_t sym = g[0], a = g[1], b = g[2];
  if (sym == 0)
    return art::DimExpr::constant(
        std::max<int64_t>(1, (b + kGPUBlockSize - 1) / kGPUBlockSize));
  return art::DimExpr::symbol(sym == kNumTokens ? 0 : 1, a, b, kGPUBlockSize);
}

struct K3EmitArtifactPass : impl::K3EmitArtifactBase<K3EmitArtifactPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    auto fn = module.lookupSymbol<func::FuncOp>(entry);
    Operation *kernels = SymbolTable::lookupSymbolIn(module, "k3_kernels");
    auto arena = module->getAttrOfType<IntegerAttr>("k3.arena_bytes");
    if (!fn || !kernels || !arena)
      return module.emitError()
             << "expects an outlined and planned model function '" << entry
             << "' (run --k3-outline-kernels and --k3-plan-memory)";
    int64_t maxTokens =
        module->getAttrOfType<IntegerAttr>("k3.max_tokens").getInt();
    int64_t maxSeqs =
        module->getAttrOfType<IntegerAttr>("k3.max_seqs").getInt();

    art::Builder builder;
    if (auto name = module->getAttrOfType<StringAttr>("k3.model"))
      builder.setMetadata(art::kMetaModelName, name.str());
    if (auto vocab = module->getAttrOfType<IntegerAttr>("k3.vocab_size"))
      builder.setMetadata(art::kMetaVocabSize, std::to_string(vocab.getInt()));
    if (auto hidden = module->getAttrOfType<IntegerAttr>("k3.hidden_size"))
      builder.setMetadata("hidden_size", std::to_string(hidden.getInt()));
    if (auto ctx = module->getAttrOfType<IntegerAttr>("k3.max_context"))
      builder.setMetadata("max_seq_len", std::to_string(ctx.getInt()));
    builder.setMetadata(art::kMetaMaxTokens, std::to_string(maxTokens));
    builder.setMetadata(art::kMetaMaxSeqs, std::to_string(maxSeqs));
    builder.addSymbol("num_tokens", maxTokens);
    builder.addSymbol("num_seqs", maxSeqs);

    std::vector<uint8_t> object;
    std::vector<std::string> symbols;
    auto gpuKernels = dyn_cast<gpu::GPUModuleOp>(kernels);
    if (gpuKernels) {
      if (failed(compileKernelsForCUDA(gpuKernels, object, symbols)))
        return failure();
      if (!ptxOutput.empty()) {
        std::vector<uint8_t> ptx;
        std::vector<std::string> unused;
        if (failed(compileKernelsForCUDA(gpuKernels, ptx, unused, "isa")))
          return failure();
        std::error_code ec;
        llvm::raw_fd_ostream os(ptxOutput, ec);
        if (ec)
          return module.emitError()
                 << "cannot write " << ptxOutput << ": " << ec.message();
        os.write(reinterpret_cast<const char *>(ptx.data()), ptx.size());
      }
    } else if (failed(compileKernelsForHost(cast<ModuleOp>(kernels), linker,
                                            object, symbols))) {
      return failure();
    }
    uint32_t objectId = builder.addKernelObject(
        gpuKernels ? art::kTargetCudaSm90a : art::kTargetCpuX86_64,
        std::move(object), symbols);
    // Weights, decode state and kernels are shared by the entries; inputs
    // and outputs of the same name, kind and size share a buffer (the
    // entries never run at once).
    llvm::StringMap<uint32_t> weights, states, ioBuffers;
    unsigned arenaCount = 0;
    auto ioBuffer = [&](const std::string &name, art::BufferKind kind,
                        uint64_t bytes, uint32_t flags) -> uint32_t {
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
    };
    auto emitEntry = [&](func::FuncOp fn,
                         StringRef entryName) -> LogicalResult {
      uint32_t entryId = builder.addEntry(entryName.str());

      // Where each value's data lives.
      llvm::DenseMap<Value, art::Arg> where;
      for (BlockArgument arg : fn.getArguments()) {
        auto name =
            fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "k3.name");
        std::string n =
            name ? name.str() : "arg" + std::to_string(arg.getArgNumber());
        SmallVector<int64_t> shape = shapeOfResult(arg);
        FailureOr<art::DType> dt = dtypeOf(fn, arg.getType());
        if (failed(dt))
          return failure();
        uint32_t id = ioBuffer(n, art::BufferKind::Input,
                               bytesOf(arg, shape, maxTokens, maxSeqs), 0);
        builder.addInput(entryId, n, *dt, dimExprs(shape), id);
        where[arg] = art::Arg::buffer(id);
      }

      // Outputs: returned values get output buffers.
      auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
      llvm::DenseMap<Value, uint32_t> outputBuffer;
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        auto name = fn.getResultAttrOfType<StringAttr>(i, "k3.name");
        std::string n = name ? name.str() : "output" + std::to_string(i);
        Value root = bufferRoot(v);
        SmallVector<int64_t> shape = shapeOfResult(root);
        FailureOr<art::DType> dt = dtypeOf(fn, v.getType());
        if (failed(dt))
          return failure();
        uint32_t id = ioBuffer(n, art::BufferKind::Output,
                               bytesOf(root, shape, maxTokens, maxSeqs),
                               art::kBufferFlagDump);
        builder.addOutput(entryId, n, *dt, dimExprs(shapeOfResult(v)), id);
        outputBuffer[root] = id;
      }

      auto stateBuffer = [&](StringRef name, Value v) -> FailureOr<uint32_t> {
        auto it = states.find(name);
        if (it != states.end())
          return it->second;
        SmallVector<int64_t> shape = shapeOfResult(v);
        int64_t perSeq = bytesOf(v, ArrayRef<int64_t>(shape).drop_front(),
                                 maxTokens, maxSeqs);
        uint32_t id = builder.addBuffer(name.str(), art::BufferKind::State,
                                        perSeq * maxSeqs, 0, perSeq, 0,
                                        art::kBufferFlagDump);
        states[name] = id;
        return id;
      };

      for (Operation &op : fn.getBody().front()) {
        if (auto w = dyn_cast<WeightOp>(op)) {
          auto it = weights.find(w.getName());
          if (it == weights.end()) {
            FailureOr<art::DType> dt = dtypeOf(w, w.getType());
            if (failed(dt))
              return failure();
            auto shape = w.getType().getShape();
            uint32_t id = builder.addWeight(
                w.getName().str(), *dt,
                std::vector<int64_t>(shape.begin(), shape.end()),
                initFor(w.getName(), shape));
            it = weights.insert({w.getName(), id}).first;
          }
          where[w] = art::Arg::weight(it->second);
          continue;
        }
        if (auto r = dyn_cast<StateReadOp>(op)) {
          FailureOr<uint32_t> id = stateBuffer(r.getName(), r);
          if (failed(id))
            return failure();
          where[r] = art::Arg::buffer(*id);
          continue;
        }
        if (auto w = dyn_cast<StateWriteOp>(op)) {
          // The copy launch before it already wrote the state buffer.
          continue;
        }
        auto planned = op.getAttrOfType<ArrayAttr>("k3.buffer");
        if (!isa<LaunchOp, tensor::EmptyOp>(op))
          continue;
        for (Value r : op.getResults()) {
          unsigned i = cast<OpResult>(r).getResultNumber();
          if (auto it = outputBuffer.find(r); it != outputBuffer.end()) {
            where[r] = art::Arg::buffer(it->second);
            continue;
          }
          if (r.hasOneUse())
            if (auto w = dyn_cast<StateWriteOp>(*r.getUsers().begin())) {
              FailureOr<uint32_t> id = stateBuffer(w.getName(), r);
              if (failed(id))
                return failure();
              where[r] = art::Arg::buffer(*id);
              continue;
            }
          if (!planned || cast<IntegerAttr>(planned[i]).getInt() < 0)
            return op.emitOpError()
                   << "result " << i << " has no planned buffer";
          SmallVector<int64_t> shape = shapeOfResult(r);
          // An empty tensor (no closed AttnRes block yet) still needs an
          // address; the artifact format has no empty buffers.
          uint64_t bytes = std::max<int64_t>(
              bytesOf(r, shape, maxTokens, maxSeqs), art::kArenaAlignment);
          uint32_t id = builder.addBuffer(
              "act" + std::to_string(arenaCount++), art::BufferKind::Arena,
              bytes, cast<IntegerAttr>(planned[i]).getInt());
          where[r] = art::Arg::buffer(id);
        }
        auto launch = dyn_cast<LaunchOp>(op);
        if (!launch)
          continue;
        std::vector<art::Arg> args;
        for (Value v : launch.getInputs()) {
          auto it = where.find(bufferRoot(v));
          if (it == where.end())
            return launch.emitOpError() << "operand has no buffer";
          args.push_back(it->second);
        }
        for (Value r : launch.getResults())
          args.push_back(where[r]);
        args.push_back(art::Arg::symbol(0));
        args.push_back(art::Arg::symbol(1));
        const art::DimExpr one[3] = {art::DimExpr::constant(1),
                                     art::DimExpr::constant(1),
                                     art::DimExpr::constant(1)};
        auto kernel =
            SymbolTable::lookupNearestSymbolFrom(launch, launch.getKernel());
        if (!gpuKernels) {
          builder.addLaunch(entryId, objectId,
                            launch.getKernel().getLeafReference().str(), args,
                            one, one);
          continue;
        }
        // On the GPU each parallel phase of the kernel is its own launch.
        for (Attribute a : kernel->getAttrOfType<ArrayAttr>("k3.phases")) {
          auto phaseName = cast<FlatSymbolRefAttr>(a).getValue();
          Operation *phase = SymbolTable::lookupSymbolIn(kernels, phaseName);
          art::DimExpr grid[3] = {gridFor(phase, maxTokens, maxSeqs),
                                  art::DimExpr::constant(1),
                                  art::DimExpr::constant(1)};
          art::DimExpr block[3] = {art::DimExpr::constant(kGPUBlockSize),
                                   art::DimExpr::constant(1),
                                   art::DimExpr::constant(1)};
          art::DimExpr smem = art::DimExpr::constant(0);
          // Dedicated kernels (lowering/cuda) state their launch shape.
          if (auto g = phase->getAttrOfType<DenseI64ArrayAttr>(kLaunchGridAttr))
            grid[0] = g[0] == 0
                          ? art::DimExpr::constant((g[2] + g[3] - 1) / g[3])
                          : art::DimExpr::symbol(g[0] == kNumTokens ? 0 : 1,
                                                 g[1], g[2], g[3]);
          if (auto bl =
                  phase->getAttrOfType<DenseI64ArrayAttr>(kLaunchBlockAttr))
            for (int d = 0; d < 3; ++d)
              block[d] = art::DimExpr::constant(bl[d]);
          if (auto sm = phase->getAttrOfType<IntegerAttr>(kLaunchSmemAttr))
            smem = art::DimExpr::constant(sm.getInt());
          builder.addLaunch(entryId, objectId, phaseName.str(), args, grid,
                            block, smem);
        }
      }
      return success();
    };
    if (failed(emitEntry(fn, entry)))
      return failure();
    // The decode entry (k3-decode-entry), when it was outlined and planned.
    if (auto decode = module.lookupSymbol<func::FuncOp>(entry + "_decode"))
      if (decode->hasAttr("k3.decode") &&
          failed(emitEntry(decode, decode.getSymName())))
        return failure();

    std::string err;
    if (!builder.writeFile(output, err))
      return module.emitError() << "cannot write artifact: " << err;
    return success();
  }
};

} // namespace
} // namespace mlir::k3
