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
  ListOption<std::string> kernelConfig{
      *this, "kernel-config",
      llvm::cl::desc("Kernel config overrides for tuning, <op>.<param>=<value> "
                     "or target.<param>=<value> (k3-select-kernel-config's "
                     "override option)")};
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
  enum class Logits { Last, All };
  Option<Logits> logits{
      *this, "logits", llvm::cl::desc("Which tokens of a prefill get logits"),
      llvm::cl::init(Logits::Last),
      llvm::cl::values(
          clEnumValN(Logits::Last, "last",
                     "the last token of each sequence: logits [N, V], "
                     "next_tokens [N] (k3-last-token-logits)"),
          clEnumValN(Logits::All, "all",
                     "every token: logits [T, V], next_tokens [T] (checks)"))};
  Option<bool> fuseAddRMSNorm{
      *this, "fuse-add-rms-norm",
      llvm::cl::desc("Fuse residual adds with the RMSNorm of their sum "
                     "(k3-fuse-add-rms-norm)"),
      llvm::cl::init(true)};
  Option<bool> fusePartialRMSNorm{
      *this, "fuse-partial-rms-norm",
      llvm::cl::desc("MLA's norm of c_kv and the slices and concat around "
                     "it as one k3.partial_rms_norm "
                     "(k3-fuse-partial-rms-norm)"),
      llvm::cl::init(true)};
  Option<std::string> activationDType{
      *this, "activation-dtype",
      llvm::cl::desc("Precision policy: f32 | bf16 activations between "
                     "kernels (default: the model's k3.activation_dtype, "
                     "else f32; k3-activation-precision)"),
      llvm::cl::init("")};
  Option<std::string> kdaStateDType{
      *this, "kda-state-dtype",
      llvm::cl::desc("The KDA state kept between calls: f32 | bf16 (half a "
                     "decode step's state bytes; k3-kda-state-precision)"),
      llvm::cl::init("f32")};
  Option<bool> moeGrouped{
      *this, "moe-grouped",
      llvm::cl::desc("Prefill MoE as dispatch, grouped GEMMs and combine "
                     "(k3-moe-grouped); off: one fused op per layer"),
      llvm::cl::init(true)};
  Option<int64_t> moeTileRows{
      *this, "moe-tile-rows",
      llvm::cl::desc("Rows per tile of the prefill's grouped MoE GEMMs "
                     "(k3-moe-grouped tile-rows): 128, or 384 for the tall "
                     "[384, 128, 64] tiles that read an expert's weights "
                     "once for up to 384 rows (docs/moe.md)"),
      llvm::cl::init(128)};
  Option<bool> splitRouter{
      *this, "split-router",
      llvm::cl::desc("The MoE router as a linear (its logits on the GEMM "
                     "kernels) and a top-k (k3-split-router); off: one "
                     "fused router op"),
      llvm::cl::init(true)};
  Option<bool> mlaExpand{
      *this, "mla-expand",
      llvm::cl::desc("Prefill MLA as a kv_b expansion GEMM and flash "
                     "attention (k3-mla-expand); off: the latent form"),
      llvm::cl::init(true)};
  Option<bool> splitGLUMLP{
      *this, "split-glu-mlp",
      llvm::cl::desc("GLU MLPs as a gate/up GEMM and a down linear "
                     "(k3-split-glu-mlp); off: one fused op each"),
      llvm::cl::init(true)};
  Option<bool> fuseSharedExpert{
      *this, "fuse-shared-expert",
      llvm::cl::desc("In the decode entry, the shared expert in the grouped "
                     "MoE launches (k3-fuse-shared-expert; with the "
                     "tensor-core GEMVs 4-7% faster at B = 1, 3% at B = 8 "
                     "on Kimi-Linear-48B, docs/moe.md)"),
      llvm::cl::init(true)};
  Option<bool> fuseCombineAdd{
      *this, "fuse-combine-add",
      llvm::cl::desc("An MoE layer's add of the shared expert as its "
                     "combine's addend (k3-fuse-combine-add)"),
      llvm::cl::init(true)};
  Option<bool> fuseCombineRMSNorm{
      *this, "fuse-combine-rms-norm",
      llvm::cl::desc("An MoE layer's combine and the next layer's residual "
                     "add + RMSNorm as one op (k3-fuse-combine-rms-norm)"),
      llvm::cl::init(true)};
  Option<bool> groupLinears{
      *this, "group-linears",
      llvm::cl::desc("In the decode entry, the linears of one input as one "
                     "k3.linear_group (k3-group-linears)"),
      llvm::cl::init(true)};
  Option<bool> groupPrefillLinears{
      *this, "group-prefill-linears",
      llvm::cl::desc("On CUDA, a prefill's linears of one input as one "
                     "k3.linear_group on the wgmma GEMM (k3-group-linears "
                     "prefill=1; 1.5 ms less kernel time in the 27-layer "
                     "prefill, docs/gemm.md)"),
      llvm::cl::init(true)};
  Option<bool> groupShortConvs{
      *this, "group-short-convs",
      llvm::cl::desc("In the decode entry, a layer's short convs as one "
                     "k3.short_conv_group (k3-group-short-convs)"),
      llvm::cl::init(true)};
  Option<int64_t> tp{
      *this, "tp",
      llvm::cl::desc("Tensor-parallel ranks: one SPMD program whose MLP "
                     "blocks each rank holds 1/tp of (k3-partition)"),
      llvm::cl::init(1)};
  Option<int64_t> ep{
      *this, "ep",
      llvm::cl::desc("Expert-parallel ranks: each holds 1/ep of the routed "
                     "experts (k3-partition; the CPU target runs it)"),
      llvm::cl::init(1)};
  Option<int64_t> cp{
      *this, "cp",
      llvm::cl::desc("Context-parallel ranks: each runs its segment of every "
                     "sequence of the prefill entry, the token mixers' states "
                     "folded across them (k3-partition-context; the CPU "
                     "target runs it)"),
      llvm::cl::init(1)};
  Option<bool> cpExperts{
      *this, "cp-experts",
      llvm::cl::desc("With cp > 1: the routed experts split over the cp "
                     "ranks too, the prefill's rows sent to their experts' "
                     "ranks and back by all-to-all (k3-partition-context "
                     "experts=1; the CPU target runs it)"),
      llvm::cl::init(false)};
  Option<bool> spmd{
      *this, "spmd",
      llvm::cl::desc("With tp=1: still the SPMD program (shards of one part, "
                     "collectives of one rank), to check the communicator on "
                     "one device"),
      llvm::cl::init(false)};
  Option<bool> vocabSplit{
      *this, "vocab-split",
      llvm::cl::desc("With tp > 1: the LM head by vocabulary rows and one "
                     "all-gather of the logits (k3-partition)"),
      llvm::cl::init(false)};
  Option<bool> report{*this, "report", llvm::cl::desc("Report the memory plan"),
                      llvm::cl::init(false)};
};

/// Whether the target option names a GPU (k3-select-kernel-config checks
/// the name).
bool isGPU(StringRef target) { return target != "cpu"; }

void buildCompilePipeline(OpPassManager &pm, const CompileOptions &o) {
  pm.addPass(k3::createK3InlineLayers());
  pm.addPass(createCSEPass());
  // The SPMD program first: every later rewrite sees the split weights.
  if (o.tp > 1 || o.ep > 1 || o.spmd) {
    k3::K3PartitionOptions partition;
    partition.tp = o.tp;
    partition.spmd = o.spmd;
    partition.vocabSplit = o.vocabSplit;
    partition.ep = o.ep;
    pm.addPass(k3::createK3Partition(partition));
  }
  // The decay gate is computed inside the KDA kernels, as the anchors do.
  pm.addPass(k3::createK3FuseKDAGate());
  if (o.exposeRouting)
    pm.addPass(k3::createK3ExposeRouting({o.entry}));
  // Before the KDA rewrites, which leave the decode entry alone.
  if (o.decodeEntry)
    pm.addPass(k3::createK3DecodeEntry({o.entry}));
  // After the decode entry is cloned: that one stays whole and runs
  // replicated on the context-parallel ranks.
  if (o.cp > 1)
    pm.addPass(k3::createK3PartitionContext(
        {o.cp, o.entry, o.cpExperts, o.maxTokens, o.maxSeqs}));
  // After the decode entry is cloned: a decode step has one token per
  // sequence already.
  if (o.logits == CompileOptions::Logits::Last)
    pm.addPass(k3::createK3LastTokenLogits({o.entry}));
  // The decode entry's logits are its sequences' rows whatever `logits`
  // says (one token each); as [num_seqs, V] the output buffer is sized by
  // max-seqs, not max-tokens (21.5 GB at 32768 tokens of a 163840 vocab).
  if (o.decodeEntry)
    pm.addPass(k3::createK3LastTokenLogits({o.entry + "_decode", false}));
  // After the head moved: the final norm then reads k3.last_tokens.
  if (o.fuseAddRMSNorm)
    pm.addPass(k3::createK3FuseAddRMSNorm());
  // After the fusions (their ops are retyped too), before the KDA rewrites
  // (whose chunk ops keep f32 intermediates).
  pm.addPass(k3::createK3ActivationPrecision({o.activationDType}));
  // Before the KDA rewrites, which take the state's type from k3.kda.
  pm.addPass(k3::createK3KDAStatePrecision({o.kdaStateDType}));
  // After the precision policy: the norm's result and the slice it joins
  // have one type then.
  if (o.fusePartialRMSNorm)
    pm.addPass(k3::createK3FusePartialRMSNorm());
  // After the precision policy, which keeps the router's scores f32: the
  // logits it writes are f32.
  if (o.splitRouter)
    pm.addPass(k3::createK3SplitRouter());
  // After the precision policy: the sorted rows take the activations' type.
  if (o.moeGrouped) {
    k3::K3MoEGroupedOptions grouped;
    grouped.tileRows = o.moeTileRows;
    pm.addPass(k3::createK3MoEGrouped(grouped));
  }
  if (o.splitGLUMLP)
    pm.addPass(k3::createK3SplitGLUMLP());
  // Needs both forms above: the grouped routed experts, the split shared
  // expert.
  if (o.moeGrouped && o.splitGLUMLP && o.fuseSharedExpert)
    pm.addPass(k3::createK3FuseSharedExpert());
  // After it: the adds it leaves (the prefill entry's, or every one with
  // the fusion off) join their combines.
  if (o.moeGrouped && o.fuseCombineAdd)
    pm.addPass(k3::createK3FuseCombineAdd());
  // After it (the combine's addend) and k3-fuse-add-rms-norm (the norm).
  if (o.moeGrouped && o.fuseCombineRMSNorm)
    pm.addPass(k3::createK3FuseCombineRMSNorm());
  // After the precision policy: the expanded keys and values are
  // activations.
  if (o.mlaExpand)
    pm.addPass(k3::createK3MLAExpand());
  bool chunkwise =
      o.kda == CompileOptions::KDALowering::Chunkwise ||
      (o.kda == CompileOptions::KDALowering::Auto && !isGPU(o.target));
  if (chunkwise) {
    k3::K3KDAChunkwiseOptions chunk;
    chunk.chunkSize = o.kdaChunkSize;
    chunk.numSegments = o.kdaSegments;
    pm.addPass(k3::createK3KDAChunkwise(chunk));
    k3::K3TileTriSolveOptions tile;
    tile.mode = o.kdaSolver;
    pm.addPass(k3::createK3TileTriSolve(tile));
  }
  if (o.kda == CompileOptions::KDALowering::Auto && isGPU(o.target))
    pm.addPass(k3::createK3KDAMMASplit());
  // After every rewrite that creates or retypes linears (precision, router
  // split, MLA expansion).
  // On CUDA, optionally the prefill's too, for the wgmma GEMM.
  bool groupPrefill = o.groupPrefillLinears && isGPU(o.target);
  if (o.groupLinears && (o.decodeEntry || groupPrefill))
    pm.addPass(k3::createK3GroupLinears({/*prefill=*/groupPrefill}));
  // After the linears are grouped: a layer's q, k and v then come from one
  // op, which is what marks its convolutions as one group.
  if (o.decodeEntry && o.groupShortConvs)
    pm.addPass(k3::createK3GroupShortConvs());
  k3::K3SelectKernelConfigOptions select;
  select.target = o.target;
  select.overrides.assign(o.kernelConfig.begin(), o.kernelConfig.end());
  select.report = o.report;
  select.maxTokens = o.maxTokens;
  select.maxSeqs = o.maxSeqs;
  pm.addPass(k3::createK3SelectKernelConfig(select));
  pm.addPass(k3::createK3OutlineKernels({o.entry}));
  pm.addPass(k3::createK3WeightInitKernels());
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
      "k3-compile", "Compile a K3 model description to a .k3bin artifact",
      buildCompilePipeline);
}
