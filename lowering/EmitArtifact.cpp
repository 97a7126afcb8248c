//===- EmitArtifact.cpp - write the .k3bin of a planned model ---*- C++ -*-===//
//
// The k3-emit-artifact pass: metadata from the module, the kernels compiled
// (KernelCompilation.h), each entry's buffers and launches planned
// (ArtifactPlan.h), and the artifact serialised.
//
//===----------------------------------------------------------------------===//
#include "lowering/ArtifactPlan.h"
#include "lowering/KernelCompilation.h"
#include "lowering/Passes.h"

#include "k3/artifact.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3EMITARTIFACT
#include "lowering/Passes.h.inc"

namespace art = ::k3::artifact;

namespace {

/// Most SMs a device may report for `device_sm_count` (its symbol's bound).
constexpr int64_t kMaxDeviceSMs = 1024;

/// The model's description (k3-import, examples/) as artifact metadata.
void addMetadata(ModuleOp module, art::Builder &builder) {
  MLIRContext *ctx = module.getContext();
  if (StringAttr name = K3Dialect::ModelAttrHelper(ctx).getAttr(module))
    builder.setMetadata(art::kMetaModelName, name.str());
  if (IntegerAttr v = K3Dialect::VocabSizeAttrHelper(ctx).getAttr(module))
    builder.setMetadata(art::kMetaVocabSize, std::to_string(v.getInt()));
  if (IntegerAttr v = K3Dialect::HiddenSizeAttrHelper(ctx).getAttr(module))
    builder.setMetadata("hidden_size", std::to_string(v.getInt()));
  if (IntegerAttr v = K3Dialect::MaxContextAttrHelper(ctx).getAttr(module))
    builder.setMetadata("max_seq_len", std::to_string(v.getInt()));
}

struct K3EmitArtifactPass : impl::K3EmitArtifactBase<K3EmitArtifactPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    auto fn = module.lookupSymbol<func::FuncOp>(entry);
    Operation *kernels = SymbolTable::lookupSymbolIn(module, "k3_kernels");
    IntegerAttr arena = K3Dialect::ArenaBytesAttrHelper(ctx).getAttr(module);
    IntegerAttr maxTokens = K3Dialect::MaxTokensAttrHelper(ctx).getAttr(module);
    IntegerAttr maxSeqs = K3Dialect::MaxSeqsAttrHelper(ctx).getAttr(module);
    if (!fn || !kernels || !arena || !maxTokens || !maxSeqs)
      return module.emitError()
             << "expects an outlined and planned model function '" << entry
             << "' (run --k3-outline-kernels and --k3-plan-memory)";

    art::Builder builder;
    addMetadata(module, builder);
    builder.setMetadata(art::kMetaMaxTokens,
                        std::to_string(maxTokens.getInt()));
    builder.setMetadata(art::kMetaMaxSeqs, std::to_string(maxSeqs.getInt()));
    // The order is ArtifactSymbol's.
    builder.addSymbol("num_tokens", maxTokens.getInt());
    builder.addSymbol("num_seqs", maxSeqs.getInt());

    FailureOr<CompiledKernels> compiled =
        compileKernels(kernels, linker, ptxOutput);
    if (failed(compiled))
      return failure();
    if (compiled->gpu) {
      builder.addSymbol(art::kSymbolDeviceSMCount, kMaxDeviceSMs);
      // Every kernel waits for its predecessor (CompileCUDA.cpp runs
      // k3-grid-dependency-control): launches may overlap.
      builder.setMetadata(art::kMetaGridDependencyControl, "1");
    }
    uint32_t objectId = builder.addKernelObject(
        compiled->gpu ? art::kTargetCudaSm90a : art::kTargetCpuX86_64,
        std::move(compiled->object), compiled->symbols);

    ArtifactPlanner planner(builder, kernels, objectId, maxTokens.getInt(),
                            maxSeqs.getInt());
    if (failed(planner.planEntry(fn, entry)))
      return failure();
    // The decode entry (k3-decode-entry), when it was outlined and planned.
    // It takes one token per sequence, which its in-place state updates
    // rely on (StateInPlace.h); the runtime enforces it.
    if (auto decode = module.lookupSymbol<func::FuncOp>(entry + "_decode"))
      if (K3Dialect::DecodeAttrHelper(ctx).isAttrPresent(decode)) {
        if (failed(planner.planEntry(decode, decode.getSymName())))
          return failure();
        builder.setMetadata(art::kMetaOneTokenEntries,
                            decode.getSymName().str());
      }

    std::string err;
    if (!builder.writeFile(output, err))
      return module.emitError() << "cannot write artifact: " << err;
    return success();
  }
};

} // namespace
} // namespace mlir::k3
