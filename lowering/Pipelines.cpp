//===- Pipelines.cpp - the k3-compile pipeline ------------------*- C++ -*-===//
#include "lowering/Passes.h"
#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace {

struct CompileOptions : public PassPipelineOptions<CompileOptions> {
  Option<std::string> entry{*this, "entry",
                            llvm::cl::desc("The model function"),
                            llvm::cl::init("forward")};
  Option<std::string> output{*this, "output",
                             llvm::cl::desc("Artifact to write"),
                             llvm::cl::init("model.k3bin")};
  Option<int64_t> maxTokens{*this, "max-tokens",
                            llvm::cl::desc("Most tokens per call"),
                            llvm::cl::init(4096)};
  Option<int64_t> maxSeqs{*this, "max-seqs",
                          llvm::cl::desc("Most sequences per call"),
                          llvm::cl::init(16)};
  Option<std::string> target{*this, "target",
                             llvm::cl::desc("cpu or cuda (sm_90a)"),
                             llvm::cl::init("cpu")};
  enum class KDALowering { Auto, Recurrent, Chunkwise };
  Option<KDALowering> kda{
      *this, "kda", llvm::cl::desc("KDA core lowering"),
      llvm::cl::init(KDALowering::Auto),
      llvm::cl::values(
          clEnumValN(KDALowering::Auto, "auto",
                     "chunkwise on the CPU; on CUDA the tensor-core chunk "
                     "kernels (k3-kda-mma-split) where they apply (bf16 "
                     "operands, bounded gate), else the recurrent kernel"),
          clEnumValN(KDALowering::Recurrent, "recurrent",
                     "token-by-token gated delta rule"),
          clEnumValN(KDALowering::Chunkwise, "chunkwise",
                     "UT transform, tiled solve, cross-chunk state passing"))};
  Option<int64_t> kdaChunkSize{*this, "kda-chunk-size",
                               llvm::cl::desc("chunk of kda=chunkwise"),
                               llvm::cl::init(64)};
  Option<std::string> kdaSolver{
      *this, "kda-solver",
      llvm::cl::desc("tri solve of kda=chunkwise: forward | block-inverse"),
      llvm::cl::init("forward")};
  Option<int64_t> kdaSegments{
      *this, "kda-segments",
      llvm::cl::desc("kda=chunkwise state passing over S segments (0: off)"),
      llvm::cl::init(0)};
  Option<int64_t> cudaKdaMMAWarps{
      *this, "cuda-kda-mma-warps",
      llvm::cl::desc("target=cuda: warps per tensor-core KDA chain block "
                     "(0: from the shape)"),
      llvm::cl::init(0)};
  Option<int64_t> cudaSMCount{
      *this, "cuda-sm-count",
      llvm::cl::desc("target=cuda: SMs of the target GPU (shape-dependent "
                     "defaults)"),
      llvm::cl::init(132)};
  Option<int64_t> cudaKdaMMAStages{
      *this, "cuda-kda-mma-stages",
      llvm::cl::desc("target=cuda: cp.async stages of the KDA chain"),
      llvm::cl::init(3)};
  Option<int64_t> cudaKdaOperandsBlocksPerSM{
      *this, "cuda-kda-operands-blocks-per-sm",
      llvm::cl::desc("target=cuda: register cap of the KDA operand kernel"),
      llvm::cl::init(5)};
  Option<std::string> cudaKdaRecurrentTile{
      *this, "cuda-kda-recurrent-tile",
      llvm::cl::desc("target=cuda: recurrent KDA tile BV,P[,S[,C]]"),
      llvm::cl::init("")};
  Option<std::string> cudaLinear{
      *this, "cuda-linear",
      llvm::cl::desc("target=cuda: k3.linear kernel, generic or mma-3xtf32"),
      llvm::cl::init("generic")};
  Option<std::string> ptxOutput{
      *this, "ptx-output",
      llvm::cl::desc("target=cuda: also write the PTX here"),
      llvm::cl::init("")};
  Option<bool> exposeRouting{
      *this, "expose-routing",
      llvm::cl::desc("Also return each MoE router's expert ids (for checks)"),
      llvm::cl::init(false)};
  Option<bool> decodeEntry{
      *this, "decode-entry",
      llvm::cl::desc("Also compile <entry>_decode (one token per sequence, "
                     "token-by-token KDA) when the model has KDA"),
      llvm::cl::init(true)};
  Option<bool> report{*this, "report", llvm::cl::desc("Report the memory plan"),
                      llvm::cl::init(false)};
};

void buildCompilePipeline(OpPassManager &pm, const CompileOptions &o) {
  pm.addPass(k3::createK3InlineLayers());
  pm.addPass(createCSEPass());
  // The decay gate is computed inside the KDA kernels, as the anchors do.
  pm.addPass(k3::createK3FuseKDAGate());
  if (o.exposeRouting)
    pm.addPass(k3::createK3ExposeRouting({o.entry}));
  // Before the KDA rewrites, which leave the decode entry alone.
  if (o.decodeEntry)
    pm.addPass(k3::createK3DecodeEntry({o.entry}));
  bool chunkwise =
      o.kda == CompileOptions::KDALowering::Chunkwise ||
      (o.kda == CompileOptions::KDALowering::Auto && o.target == "cpu");
  if (chunkwise) {
    k3::K3KDAChunkwiseOptions chunk;
    chunk.chunkSize = o.kdaChunkSize;
    chunk.numSegments = o.kdaSegments;
    pm.addPass(k3::createK3KDAChunkwise(chunk));
    k3::K3TileTriSolveOptions tile;
    tile.mode = o.kdaSolver;
    pm.addPass(k3::createK3TileTriSolve(tile));
  }
  if (o.kda == CompileOptions::KDALowering::Auto && o.target == "cuda")
    pm.addPass(k3::createK3KDAMMASplit());
  k3::K3OutlineKernelsOptions outline;
  outline.entry = o.entry;
  outline.target = o.target;
  outline.cudaKdaMMAWarps = o.cudaKdaMMAWarps;
  outline.cudaSMCount = o.cudaSMCount;
  outline.cudaKdaMMAStages = o.cudaKdaMMAStages;
  outline.cudaKdaOperandsBlocksPerSM = o.cudaKdaOperandsBlocksPerSM;
  outline.cudaKdaRecurrentTile = o.cudaKdaRecurrentTile;
  outline.cudaLinear = o.cudaLinear;
  pm.addPass(k3::createK3OutlineKernels(outline));
  pm.addPass(
      k3::createK3PlanMemory({o.entry, o.maxTokens, o.maxSeqs, o.report}));
  k3::K3EmitArtifactOptions emit;
  emit.entry = o.entry;
  emit.output = o.output;
  emit.ptxOutput = o.ptxOutput;
  pm.addPass(k3::createK3EmitArtifact(emit));
}

} // namespace

void mlir::k3::registerK3Pipelines() {
  PassPipelineRegistration<CompileOptions>(
      "k3-compile",
      "Compile a K3 model description to a .k3bin artifact (CPU target)",
      buildCompilePipeline);
}
