//===- CompileCPU.cpp - kernels module to a host shared object --*- C++ -*-===//
//
// The generated code needs nothing but libm: bare-pointer kernels use no
// memref descriptors (so no memrefCopy), and scratch lives on the stack
// (memref.alloca inside memref.alloca_scope), so no malloc.
//
//===----------------------------------------------------------------------===//
#include "lowering/CompileCPU.h"

#include "dialects/K3/K3Dialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

using namespace mlir;

namespace {

// arith-expand with bf16: f32 <-> bf16 conversions become integer ops, so
// the shared object needs no compiler runtime (__truncsfbf2) beside libm.
constexpr const char *kHostPipeline =
    "expand-strided-metadata,lower-affine,convert-scf-to-cf,"
    "convert-math-to-llvm,convert-math-to-libm,finalize-memref-to-llvm,"
    "arith-expand{include-bf16=1},convert-arith-to-llvm,convert-cf-to-llvm,"
    "convert-func-to-llvm{use-bare-ptr-memref-call-conv=1},"
    "reconcile-unrealized-casts";

/// Adds `void name(void **params)` calling `name_impl` with the values that
/// params[i] point to.
void addPackedEntry(ModuleOp module, LLVM::LLVMFuncOp impl, StringRef name) {
  OpBuilder b(module.getContext());
  b.setInsertionPointAfter(impl);
  Location loc = impl.getLoc();
  auto ptrTy = LLVM::LLVMPointerType::get(b.getContext());
  auto fnTy = LLVM::LLVMFunctionType::get(
      LLVM::LLVMVoidType::get(b.getContext()), {ptrTy});
  auto entry = LLVM::LLVMFuncOp::create(b, loc, name, fnTy);
  Block *block = entry.addEntryBlock(b);
  b.setInsertionPointToStart(block);
  Value params = block->getArgument(0);
  SmallVector<Value> args;
  for (auto [i, type] : llvm::enumerate(impl.getFunctionType().getParams())) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrTy, ptrTy, params,
                                     ArrayRef<LLVM::GEPArg>{(int32_t)i});
    Value valuePtr = LLVM::LoadOp::create(b, loc, ptrTy, slot);
    args.push_back(LLVM::LoadOp::create(b, loc, type, valuePtr));
  }
  LLVM::CallOp::create(b, loc, impl, args);
  LLVM::ReturnOp::create(b, loc, ValueRange{});
}

} // namespace

LogicalResult
mlir::k3::compileKernelsForHost(ModuleOp kernels, StringRef linker,
                                std::vector<uint8_t> &sharedObject,
                                std::vector<std::string> &symbols) {
  MLIRContext *ctx = kernels.getContext();
  OwningOpRef<ModuleOp> module(cast<ModuleOp>(kernels->clone()));
  (*module)->removeAttr(SymbolTable::getSymbolAttrName());

  symbols.clear();
  for (auto fn : module->getOps<func::FuncOp>()) {
    symbols.push_back(fn.getSymName().str());
    fn.setSymName((fn.getSymName() + "_impl").str());
    // The compiler's annotations mean nothing to LLVM.
    stripK3Attributes(fn);
  }

  PassManager pm(ctx);
  if (failed(parsePassPipeline(kHostPipeline, pm)))
    return kernels.emitError() << "internal: bad host pipeline";
  if (failed(pm.run(*module)))
    return kernels.emitError() << "lowering the kernels to LLVM failed";
  for (const std::string &name : symbols) {
    auto impl = module->lookupSymbol<LLVM::LLVMFuncOp>(name + "_impl");
    if (!impl)
      return kernels.emitError() << "internal: kernel " << name << " lost";
    impl.setLinkage(LLVM::Linkage::Internal);
    addPackedEntry(*module, impl, name);
  }

  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  std::string err;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!target)
    return kernels.emitError()
           << "no LLVM target for " << triple.getTriple() << ": " << err;
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, "generic", "", options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));

  llvm::LLVMContext llvmCtx;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(*module, llvmCtx, "k3_kernels");
  if (!llvmModule)
    return kernels.emitError() << "translation to LLVM IR failed";
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(tm->createDataLayout());
  if (llvm::Error e =
          makeOptimizingTransformer(3, 0, tm.get())(llvmModule.get()))
    return kernels.emitError()
           << "LLVM optimisation failed: " << llvm::toString(std::move(e));

  // Object file, then a shared object through the system linker.
  llvm::SmallString<128> objPath, soPath;
  int fd = -1;
  if (llvm::sys::fs::createTemporaryFile("k3-kernels", "o", fd, objPath))
    return kernels.emitError() << "cannot create a temporary object file";
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    llvm::legacy::PassManager codegen;
    if (tm->addPassesToEmitFile(codegen, os, nullptr,
                                llvm::CodeGenFileType::ObjectFile))
      return kernels.emitError() << "the host target cannot emit objects";
    codegen.run(*llvmModule);
  }
  if (llvm::sys::fs::createTemporaryFile("k3-kernels", "so", soPath))
    return kernels.emitError() << "cannot create a temporary file";
  auto linkerPath = llvm::sys::findProgramByName(linker);
  if (!linkerPath) {
    llvm::sys::fs::remove(objPath);
    return kernels.emitError() << "linker '" << linker << "' not found on PATH";
  }
  std::string errMsg;
  SmallVector<StringRef> argv = {*linkerPath, "-shared", "-o",
                                 soPath,      objPath,   "-lm"};
  int rc = llvm::sys::ExecuteAndWait(*linkerPath, argv, std::nullopt, {}, 0, 0,
                                     &errMsg);
  llvm::sys::fs::remove(objPath);
  if (rc != 0) {
    llvm::sys::fs::remove(soPath);
    return kernels.emitError() << "linking the kernels failed (" << linker
                               << " exited with " << rc << ") " << errMsg;
  }
  auto buffer = llvm::MemoryBuffer::getFile(soPath);
  llvm::sys::fs::remove(soPath);
  if (!buffer)
    return kernels.emitError() << "cannot read the linked kernels";
  sharedObject.assign((*buffer)->getBufferStart(), (*buffer)->getBufferEnd());
  return success();
}
