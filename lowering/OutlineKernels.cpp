//===- OutlineKernels.cpp - K3 ops to kernels and launches ------*- C++ -*-===//
#include "lowering/KernelBuilder.h"
#include "lowering/KernelConfigRules.h"
#include "lowering/KernelPatterns.h"
#include "lowering/ModelFunction.h"
#include "lowering/Passes.h"
#include "lowering/StateInPlace.h"
#include "lowering/SymbolicShape.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3OUTLINEKERNELS
#include "lowering/Passes.h.inc"

namespace {

constexpr StringLiteral kKernelsModule = "k3_kernels";

Attribute shapeAttr(Builder &b, ArrayRef<int64_t> shape) {
  return b.getDenseI64ArrayAttr(shape);
}

/// Short op name for kernel symbols: "k3.moe_router" -> "moe_router".
std::string kernelStem(Operation *op) {
  std::string s = op->getName().stripDialect().str();
  for (char &c : s)
    if (!isalnum(static_cast<unsigned char>(c)))
      c = '_';
  if (!isa<K3Dialect>(op->getDialect()))
    s = op->getName().getDialectNamespace().str() + "_" + s;
  return s;
}

struct K3OutlineKernelsPass : impl::K3OutlineKernelsBase<K3OutlineKernelsPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    target = K3Dialect::TargetAttrHelper(ctx).getAttr(module);
    if (!target)
      target = CPUTargetAttr::get(ctx);
    KernelPatternSet set;
    populateLoopNestKernelPatterns(set);
    if (isa<GPUTargetAttr>(target))
      populateCUDAKernelPatterns(set);
    patterns = &set;
    SmallVector<func::FuncOp, 2> fns = modelEntries(module, entry);
    if (fns.empty())
      return signalPassFailure();
    for (func::FuncOp fn : fns)
      if (failed(outlineFunction(module, fn)))
        return signalPassFailure();
  }

  /// Outlines one entry; kernels go to (or are shared through) @k3_kernels.
  LogicalResult outlineFunction(ModuleOp module, func::FuncOp fn) {
    if (!fn.getBody().hasOneBlock()) {
      fn.emitOpError() << "model function must be a single block (run "
                          "--k3-inline-layers first)";
      return failure();
    }
    SymbolicShapes shapes;
    if (failed(shapes.analyze(fn)))
      return failure();
    if (failed(getKernelsModule(module)))
      return failure();
    // Kernels outlined for another entry are shared (same key, same kernel;
    // on the GPU the kernel is the function listing its phases, which are
    // copies carrying the same key).
    MLIRContext *ctx = module.getContext();
    K3Dialect::KeyAttrHelper keyAttr(ctx);
    K3Dialect::PhasesAttrHelper phasesAttr(ctx);
    for (Operation &k : kernels->getRegion(0).front())
      if (StringAttr key = keyAttr.getAttr(&k))
        if (!isGPU() || phasesAttr.isAttrPresent(&k))
          cache[key.getValue()] = cast<FunctionOpInterface>(&k);

    // Record shapes on the model function before ops are replaced.
    OpBuilder b(ctx);
    for (BlockArgument arg : fn.getArguments())
      fn.setArgAttr(arg.getArgNumber(),
                    K3Dialect::DimsAttrHelper(ctx).getName(),
                    shapeAttr(b, shapes.lookup(arg)));

    SmallVector<Operation *> ops;
    for (Operation &op : fn.getBody().front())
      ops.push_back(&op);
    if (failed(verifyConfigs(ops)))
      return failure();
    // State writes whose value already sits in the state's buffer.
    llvm::DenseSet<Operation *> writtenInPlace;
    for (Operation *op : ops) {
      if (auto write = dyn_cast<StateWriteOp>(op)) {
        if (writtenInPlace.contains(op))
          continue;
        if (failed(outline(op, {write.getValue()}, shapes, b)))
          return failure();
        continue;
      }
      if (!needsKernel(op)) {
        annotate(op, shapes, b);
        continue;
      }
      markStateInPlace(op, writtenInPlace);
      if (failed(outline(op, op->getOperands(), shapes, b)))
        return failure();
    }
    return success();
  }

  /// A config may be written by hand or by another tool after
  /// k3-select-kernel-config: the same rules hold for it. They look at an
  /// op's producers (the MoE ops' dispatch tiles), so every op is checked
  /// before any is replaced by its kernel's call.
  LogicalResult verifyConfigs(ArrayRef<Operation *> ops) {
    for (Operation *op : ops)
      if (KernelConfigAttr c =
              K3Dialect::KernelConfigAttrHelper(op->getContext()).getAttr(op))
        if (failed(verifyKernelConfig(op, c, target)))
          return failure();
    return success();
  }

  /// Marks `op` k3.state_in_place when a result of it may take its state's
  /// buffer (StateInPlace.h); that write then needs no copy. Marks it
  /// k3.unread_state when nothing reads an updated state of it. Before the
  /// kernel is emitted: the marks are part of its key and its body.
  void markStateInPlace(Operation *op,
                        llvm::DenseSet<Operation *> &writtenInPlace) {
    for (OpResult r : op->getResults()) {
      if (StateWriteOp w = stateWrittenInPlace(r)) {
        K3Dialect::StateInPlaceAttrHelper(op->getContext())
            .setAttr(op, UnitAttr::get(op->getContext()));
        writtenInPlace.insert(w);
      }
      // The last tokens' attention after a prefill's append: its kernel
      // need not copy the whole cache into a buffer nothing reads (1 ms of
      // a 8192-token prefill on an H100, 32 blocks copying 9.4 MB).
      if (isUnreadState(r))
        K3Dialect::UnreadStateAttrHelper(op->getContext())
            .setAttr(op, UnitAttr::get(op->getContext()));
    }
  }

  /// Attaches `k3.shapes` (one symbolic shape per tensor result).
  void annotate(Operation *op, const SymbolicShapes &shapes, Builder &b) {
    SmallVector<Attribute> attrs;
    for (Value r : op->getResults())
      if (isa<RankedTensorType>(r.getType()))
        attrs.push_back(shapeAttr(b, shapes.lookup(r)));
    if (!attrs.empty())
      K3Dialect::ShapesAttrHelper(op->getContext())
          .setAttr(op, b.getArrayAttr(attrs));
  }

  /// Replaces `op` by a launch of its kernel. For a state write the kernel
  /// is a copy of `tensorOperands[0]` and the write takes the copy.
  LogicalResult outline(Operation *op, ValueRange operands,
                        SymbolicShapes &shapes, OpBuilder &b) {
    SmallVector<Value> inputs;
    SmallVector<SymShape> inShapes, outShapes;
    SmallVector<Type> outTypes;
    for (Value v : operands) {
      if (!isa<RankedTensorType>(v.getType()))
        continue; // index operands (slice sizes) are folded into shapes
      inputs.push_back(v);
      inShapes.push_back(shapes.lookup(v));
    }
    bool isWrite = isa<StateWriteOp>(op);
    if (isWrite) {
      outTypes.push_back(inputs[0].getType());
      outShapes.push_back(inShapes[0]);
    } else {
      for (Value r : op->getResults()) {
        outTypes.push_back(r.getType());
        outShapes.push_back(shapes.lookup(r));
      }
    }
    unsigned numResults = outTypes.size();

    // The op's config names the kernel; its pattern emits the body and may
    // ask for workspace, extra results of the launch that only it uses.
    FailureOr<std::pair<const KernelPattern *, KernelConfigAttr>> chosen =
        choosePattern(op);
    if (failed(chosen))
      return failure();
    auto [pattern, config] = *chosen;
    for (const KernelWorkspace &w : pattern->workspace(op, config, inShapes)) {
      SmallVector<int64_t> dims;
      for (int64_t d : w.shape)
        dims.push_back(d < 0 ? ShapedType::kDynamic : d);
      outTypes.push_back(RankedTensorType::get(dims, w.elementType));
      outShapes.push_back(w.shape);
    }

    FailureOr<FunctionOpInterface> kernel = getOrCreateKernel(
        op, inputs, inShapes, outTypes, outShapes, pattern, config, b);
    if (failed(kernel))
      return failure();

    b.setInsertionPoint(op);
    auto ref =
        SymbolRefAttr::get(b.getStringAttr(kKernelsModule),
                           {FlatSymbolRefAttr::get((*kernel).getNameAttr())});
    auto launch = LaunchOp::create(b, op->getLoc(), outTypes, ref, inputs);
    SmallVector<Attribute> attrs;
    for (const SymShape &s : outShapes)
      attrs.push_back(shapeAttr(b, s));
    K3Dialect::ShapesAttrHelper(op->getContext())
        .setAttr(launch, b.getArrayAttr(attrs));
    for (auto [r, s] : llvm::zip(launch.getResults(), outShapes))
      shapes.record(r, s);
    if (isWrite) {
      op->setOperand(0, launch.getResult(0));
      return success();
    }
    op->replaceAllUsesWith(launch.getResults().take_front(numResults));
    op->erase();
    return success();
  }

  /// The pattern that lowers `op` with its config (the loop nest when it
  /// has none).
  FailureOr<std::pair<const KernelPattern *, KernelConfigAttr>>
  choosePattern(Operation *op) {
    MLIRContext *ctx = op->getContext();
    KernelConfigAttr config =
        K3Dialect::KernelConfigAttrHelper(ctx).getAttr(op);
    if (!config)
      config = KernelConfigAttr::get(
          ctx, KernelKind::loop_nest, ArrayRef<int64_t>{},
          isGPU() ? kLoopNestWarps : 0, 0, 0, 0, 0, TileScheduler::strided,
          /*prefetch=*/0);
    const KernelPattern *pattern = patterns->lookup(op, config.getKernel());
    if (!pattern)
      return op->emitOpError()
             << "has no kernel pattern for " << config << " on " << target;
    return std::make_pair(pattern, config);
  }

  FailureOr<FunctionOpInterface>
  getOrCreateKernel(Operation *op, ArrayRef<Value> inputs,
                    ArrayRef<SymShape> inShapes, ArrayRef<Type> outTypes,
                    ArrayRef<SymShape> outShapes, const KernelPattern *pattern,
                    KernelConfigAttr config, OpBuilder &b) {
    // Identical ops share a kernel: key on kind, attributes and signature.
    std::string key;
    llvm::raw_string_ostream os(key);
    os << op->getName();
    if (!isa<StateWriteOp>(op)) // a state's name does not change its copy
      os << op->getAttrDictionary();
    for (auto [v, s] : llvm::zip(inputs, inShapes))
      os << "|" << cast<RankedTensorType>(v.getType()).getElementType() << ":"
         << symShapeToString(s);
    for (auto [t, s] : llvm::zip(outTypes, outShapes))
      os << "|" << cast<RankedTensorType>(t).getElementType() << ":"
         << symShapeToString(s);
    auto it = cache.find(key);
    if (it != cache.end())
      return it->second;

    std::string name =
        (isa<StateWriteOp>(op) ? std::string("copy") : kernelStem(op)) + "_" +
        std::to_string(cache.size());
    SmallVector<Type> argTypes;
    // An MXFP4 (f4E2M1FN) tensor is its bytes: codes, then scales.
    auto bare = [&](Type tensor) {
      Type e = cast<RankedTensorType>(tensor).getElementType();
      return MemRefType::get({}, isa<Float4E2M1FNType>(e) ? b.getI8Type() : e);
    };
    for (Value v : inputs)
      argTypes.push_back(bare(v.getType()));
    for (Type t : outTypes)
      argTypes.push_back(bare(t));
    argTypes.push_back(b.getI64Type()); // num_tokens
    argTypes.push_back(b.getI64Type()); // num_seqs

    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToEnd(&kernels->getRegion(0).front());
    FunctionType fnType = b.getFunctionType(argTypes, {});
    FunctionOpInterface fn;
    Block *body;
    if (isGPU()) {
      auto gfn = gpu::GPUFuncOp::create(b, op->getLoc(), name, fnType);
      gfn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
      fn = gfn;
      body = &gfn.getBody().front();
    } else {
      auto cfn = func::FuncOp::create(b, op->getLoc(), name, fnType);
      fn = cfn;
      body = cfn.addEntryBlock();
    }
    MLIRContext *ctx = b.getContext();
    K3Dialect::KernelAttrHelper(ctx).setAttr(fn, b.getUnitAttr());
    K3Dialect::KeyAttrHelper(ctx).setAttr(fn, b.getStringAttr(key));
    StringAttr dims = K3Dialect::DimsAttrHelper(ctx).getName();
    unsigned numIn = inputs.size(), numOut = outTypes.size();
    for (unsigned i = 0; i < numIn; ++i)
      fn.setArgAttr(i, dims, shapeAttr(b, inShapes[i]));
    for (unsigned i = 0; i < numOut; ++i)
      fn.setArgAttr(numIn + i, dims, shapeAttr(b, outShapes[i]));

    b.setInsertionPointToStart(body);
    Location loc = op->getLoc();
    Value numTokens = arith::IndexCastOp::create(
        b, loc, b.getIndexType(), body->getArgument(numIn + numOut));
    Value numSeqs = arith::IndexCastOp::create(
        b, loc, b.getIndexType(), body->getArgument(numIn + numOut + 1));
    KernelBuilder kb(b, loc, numTokens, numSeqs);
    SmallVector<KernelOperand> ins, outs;
    for (unsigned i = 0; i < numIn; ++i) {
      Value base = body->getArgument(i);
      ins.push_back(
          {base, inShapes[i], kb.view(base, inShapes[i]),
           cast<RankedTensorType>(inputs[i].getType()).getElementType()});
    }
    for (unsigned i = 0; i < numOut; ++i) {
      Value base = body->getArgument(numIn + i);
      outs.push_back({base, outShapes[i], kb.view(base, outShapes[i]),
                      cast<RankedTensorType>(outTypes[i]).getElementType()});
    }
    // The kernel records the config that built it.
    K3Dialect::KernelConfigAttrHelper(ctx).setAttr(fn, config);
    KernelEmission emission{fn, kb, ins, outs, config, target};
    if (failed(pattern->emit(op, emission)))
      return failure();
    if (!isGPU())
      func::ReturnOp::create(b, loc);
    cache[key] = fn;
    return fn;
  }

  bool isGPU() const { return isa<GPUTargetAttr>(target); }

  /// Finds or creates @k3_kernels for the module's target.
  LogicalResult getKernelsModule(ModuleOp module) {
    K3Dialect::TargetAttrHelper targetAttr(module.getContext());
    kernels = SymbolTable::lookupSymbolIn(module, kKernelsModule);
    if (kernels) {
      if (targetAttr.getAttr(kernels) != target)
        return module.emitError()
               << "kernels of another target are already outlined";
      return success();
    }
    OpBuilder b(module.getContext());
    b.setInsertionPointToEnd(module.getBody());
    if (auto gpu = dyn_cast<GPUTargetAttr>(target)) {
      auto nvvm = NVVM::NVVMTargetAttr::get(module.getContext(), /*optLevel=*/3,
                                            "nvptx64-nvidia-cuda",
                                            gpu.getChip(), gpu.getFeatures());
      kernels = gpu::GPUModuleOp::create(b, module.getLoc(), kKernelsModule,
                                         b.getArrayAttr({nvvm}));
      module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                      b.getUnitAttr());
    } else {
      kernels = ModuleOp::create(b, module.getLoc(), StringRef(kKernelsModule));
    }
    targetAttr.setAttr(kernels, target);
    return success();
  }

  Attribute target;
  const KernelPatternSet *patterns = nullptr; // for one run
  Operation *kernels = nullptr;
  llvm::StringMap<FunctionOpInterface> cache;
};

} // namespace
} // namespace mlir::k3
