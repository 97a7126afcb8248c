//===- OutlineKernels.cpp - K3 ops to kernels and launches ------*- C++ -*-===//
#include "lowering/GPUDistribute.h"
#include "lowering/KernelBuilder.h"
#include "lowering/ModelFunction.h"
#include "lowering/Passes.h"
#include "lowering/SymbolicShape.h"
#include "lowering/cuda/CUDAKernels.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringMap.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3OUTLINEKERNELS
#include "lowering/Passes.h.inc"

namespace {

constexpr StringLiteral kKernelsModule = "k3_kernels";

/// Ops that compute and therefore become kernels; the rest (weights, state
/// reads, reshapes, index arithmetic) only name or alias memory.
bool needsKernel(Operation *op) {
  if (isa<WeightOp, StateReadOp, StateWriteOp, LaunchOp>(op))
    return false;
  if (isa<K3Dialect>(op->getDialect()))
    return true;
  return isa<tensor::ExtractSliceOp, tensor::ConcatOp>(op);
}

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
  CUDAKernelOptions cudaOptions;

  void runOnOperation() override {
    ModuleOp module = getOperation();
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
    cudaOptions.kdaMMAWarps = cudaKdaMMAWarps;
    cudaOptions.smCount = cudaSMCount;
    cudaOptions.kdaMMAStages = cudaKdaMMAStages;
    cudaOptions.kdaOperandsBlocksPerSM = cudaKdaOperandsBlocksPerSM;
    cudaOptions.kdaRecurrentTile = cudaKdaRecurrentTile;
    cudaOptions.linearKernel = cudaLinear;
    // A decode entry (k3-decode-entry, attribute k3.decode) runs one token
    // per sequence: the recurrent KDA kernel stages one token at a time.
    decodeEntry = fn->hasAttr("k3.decode");
    cudaOptions.decode = decodeEntry;
    if (target == "cuda" && failed(cudaOptions.verify(module)))
      return failure();

    OpBuilder b(module.getContext());
    if (target != "cpu" && target != "cuda") {
      module.emitError() << "unknown target '" << target
                         << "' (expected cpu or cuda)";
      return failure();
    }
    kernels = SymbolTable::lookupSymbolIn(module, kKernelsModule);
    if (!kernels) {
      b.setInsertionPointToEnd(module.getBody());
      if (target == "cuda") {
        // sm_90a: the Hopper features (wgmma, TMA) need the "a" variant.
        auto nvvm = NVVM::NVVMTargetAttr::get(
            module.getContext(), /*optLevel=*/3, "nvptx64-nvidia-cuda",
            "sm_90a", "+ptx80");
        kernels = gpu::GPUModuleOp::create(b, module.getLoc(), kKernelsModule,
                                           b.getArrayAttr({nvvm}));
        module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                        b.getUnitAttr());
      } else {
        kernels =
            ModuleOp::create(b, module.getLoc(), StringRef(kKernelsModule));
      }
      kernels->setAttr("k3.target", b.getStringAttr(target));
    } else if (auto t = kernels->getAttrOfType<StringAttr>("k3.target");
               !t || t.getValue() != target) {
      module.emitError() << "kernels of another target are already outlined";
      return failure();
    }
    // Kernels outlined for another entry are shared (same key, same kernel;
    // on the GPU the kernel is the function listing its phases, which are
    // copies carrying the same key).
    for (Operation &k : kernels->getRegion(0).front())
      if (auto key = k.getAttrOfType<StringAttr>("k3.key"))
        if (target == "cpu" || k.hasAttr("k3.phases"))
          cache[key.getValue()] = cast<FunctionOpInterface>(&k);

    // Record shapes on the model function before ops are replaced.
    for (BlockArgument arg : fn.getArguments())
      fn.setArgAttr(arg.getArgNumber(), "k3.dims",
                    shapeAttr(b, shapes.lookup(arg)));

    SmallVector<Operation *> ops;
    for (Operation &op : fn.getBody().front())
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (auto write = dyn_cast<StateWriteOp>(op)) {
        if (failed(outline(op, {write.getValue()}, shapes, b)))
          return failure();
        continue;
      }
      if (!needsKernel(op)) {
        annotate(op, shapes, b);
        continue;
      }
      if (failed(outline(op, op->getOperands(), shapes, b)))
        return failure();
    }
    return success();
  }

  /// Attaches `k3.shapes` (one symbolic shape per tensor result).
  void annotate(Operation *op, const SymbolicShapes &shapes, Builder &b) {
    SmallVector<Attribute> attrs;
    for (Value r : op->getResults())
      if (isa<RankedTensorType>(r.getType()))
        attrs.push_back(shapeAttr(b, shapes.lookup(r)));
    if (!attrs.empty())
      op->setAttr("k3.shapes", b.getArrayAttr(attrs));
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

    FailureOr<FunctionOpInterface> kernel =
        getOrCreateKernel(op, inputs, inShapes, outTypes, outShapes, b);
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
    launch->setAttr("k3.shapes", b.getArrayAttr(attrs));
    for (auto [r, s] : llvm::zip(launch.getResults(), outShapes))
      shapes.record(r, s);
    if (isWrite) {
      op->setOperand(0, launch.getResult(0));
      return success();
    }
    op->replaceAllUsesWith(launch.getResults());
    op->erase();
    return success();
  }

  FailureOr<FunctionOpInterface>
  getOrCreateKernel(Operation *op, ArrayRef<Value> inputs,
                    ArrayRef<SymShape> inShapes, ArrayRef<Type> outTypes,
                    ArrayRef<SymShape> outShapes, OpBuilder &b) {
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
    if (decodeEntry && isa<KDAOp>(op))
      os << "|decode";
    auto it = cache.find(key);
    if (it != cache.end())
      return it->second;

    std::string name =
        (isa<StateWriteOp>(op) ? std::string("copy") : kernelStem(op)) + "_" +
        std::to_string(cache.size());
    SmallVector<Type> argTypes;
    auto bare = [&](Type tensor) {
      return MemRefType::get({},
                             cast<RankedTensorType>(tensor).getElementType());
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
    if (target == "cuda") {
      auto gfn = gpu::GPUFuncOp::create(b, op->getLoc(), name, fnType);
      gfn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
      fn = gfn;
      body = &gfn.getBody().front();
    } else {
      auto cfn = func::FuncOp::create(b, op->getLoc(), name, fnType);
      fn = cfn;
      body = cfn.addEntryBlock();
    }
    fn->setAttr("k3.kernel", b.getUnitAttr());
    fn->setAttr("k3.key", b.getStringAttr(key));
    unsigned numIn = inputs.size(), numOut = outTypes.size();
    for (unsigned i = 0; i < numIn; ++i)
      fn.setArgAttr(i, "k3.dims", shapeAttr(b, inShapes[i]));
    for (unsigned i = 0; i < numOut; ++i)
      fn.setArgAttr(numIn + i, "k3.dims", shapeAttr(b, outShapes[i]));

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
      ins.push_back({base, inShapes[i], kb.view(base, inShapes[i])});
    }
    for (unsigned i = 0; i < numOut; ++i) {
      Value base = body->getArgument(numIn + i);
      outs.push_back({base, outShapes[i], kb.view(base, outShapes[i])});
    }
    if (target == "cuda") {
      auto gfn = cast<gpu::GPUFuncOp>(fn.getOperation());
      FailureOr<bool> dedicated =
          emitDedicatedCUDAKernel(op, gfn, kb, ins, outs, cudaOptions);
      if (failed(dedicated))
        return failure();
      if (*dedicated) {
        gpu::ReturnOp::create(b, loc);
        fn->setAttr(
            "k3.phases",
            b.getArrayAttr({FlatSymbolRefAttr::get(gfn.getNameAttr())}));
        cache[key] = fn;
        return fn;
      }
    }
    if (failed(emitKernelBody(op, kb, ins, outs)))
      return failure();
    if (target == "cuda") {
      gpu::ReturnOp::create(b, loc);
      // One kernel per parallel phase; the launch lists them in order.
      SmallVector<Attribute> names;
      for (gpu::GPUFuncOp phase :
           distributeOverThreads(cast<gpu::GPUFuncOp>(fn.getOperation())))
        names.push_back(FlatSymbolRefAttr::get(phase.getNameAttr()));
      fn->setAttr("k3.phases", b.getArrayAttr(names));
    } else {
      func::ReturnOp::create(b, loc);
    }
    cache[key] = fn;
    return fn;
  }

  Operation *kernels = nullptr;
  llvm::StringMap<FunctionOpInterface> cache;
  bool decodeEntry = false;
};

} // namespace
} // namespace mlir::k3
