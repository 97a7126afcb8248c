//===- SelectKernelConfig.cpp - target and kernel configs ------*- C++ -*-===//
//
// Sets the module's target and attaches a #k3.kernel_config to every op that
// becomes a kernel (rules: KernelConfigRules.cpp), applies the tuning
// overrides, and checks every config against its op and the target.
//
//===----------------------------------------------------------------------===//
#include "lowering/KernelConfigRules.h"
#include "lowering/Passes.h"
#include "lowering/SymbolicShape.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringExtras.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3SELECTKERNELCONFIG
#include "lowering/Passes.h.inc"

namespace {

/// One `<scope>.<param>=<value>` entry of the override option; `scope` is
/// `target`, or an op or kernel name, optionally `@decode` or `@prefill`
/// (`entry`).
struct Override {
  std::string scope, entry, param, value;
  /// The scope as written (for diagnostics).
  std::string written() const {
    return entry.empty() ? scope : scope + "@" + entry;
  }
};

FailureOr<Override> parseOverride(Operation *where, StringRef text) {
  auto [lhs, value] = text.split('=');
  auto [scope, param] = lhs.split('.');
  if (scope.empty() || param.empty() || value.empty())
    return where->emitError()
           << "override '" << text
           << "' must be <op>.<param>=<value> (<op> an op or kernel name, "
              "optionally @decode or @prefill) or target.<param>=<value>";
  auto [name, entry] = scope.split('@');
  if (!entry.empty() && entry != "decode" && entry != "prefill")
    return where->emitError()
           << "override '" << text << "': the entry after '@' must be "
           << "decode or prefill, got '" << entry << "'";
  return Override{name.str(), entry.str(), param.str(), value.str()};
}

FailureOr<int64_t> parseInt(Operation *where, const Override &o) {
  int64_t v;
  if (StringRef(o.value).getAsInteger(10, v))
    return where->emitError() << "override " << o.written() << "." << o.param
                              << " needs an integer, got '" << o.value << "'";
  return v;
}

/// The target named by the option, or the module's, or the CPU.
FailureOr<Attribute> resolveTarget(ModuleOp module, StringRef option) {
  MLIRContext *ctx = module.getContext();
  Attribute existing = K3Dialect::TargetAttrHelper(ctx).getAttr(module);
  if (option.empty())
    return existing ? existing : Attribute(CPUTargetAttr::get(ctx));
  Attribute chosen;
  if (option == "cpu")
    chosen = CPUTargetAttr::get(ctx);
  else
    chosen =
        GPUTargetAttr::getDefault(ctx, option == "cuda" ? "sm_90a" : option);
  if (!chosen)
    return module.emitError() << "unknown target '" << option
                              << "' (expected cpu, cuda or sm_90a)";
  // A target written in the module (its limits) wins over the same kind
  // named by the option.
  if (existing && existing.getTypeID() == chosen.getTypeID())
    return existing;
  return chosen;
}

/// `target` with one parameter changed.
FailureOr<Attribute> overrideTarget(ModuleOp module, Attribute target,
                                    const Override &o) {
  auto gpu = dyn_cast<GPUTargetAttr>(target);
  if (!gpu)
    return module.emitError()
           << "override target." << o.param << " needs a GPU target";
  FailureOr<int64_t> v = parseInt(module, o);
  if (failed(v))
    return failure();
  int64_t sm = gpu.getSmCount(), smemBlock = gpu.getSmemPerBlock(),
          smemSM = gpu.getSmemPerSm(), regsSM = gpu.getRegistersPerSm(),
          regsThread = gpu.getRegistersPerThread(),
          threads = gpu.getThreadsPerBlock();
  llvm::StringMap<int64_t *> params = {{"sm_count", &sm},
                                       {"smem_per_block", &smemBlock},
                                       {"smem_per_sm", &smemSM},
                                       {"registers_per_sm", &regsSM},
                                       {"registers_per_thread", &regsThread},
                                       {"threads_per_block", &threads}};
  auto it = params.find(o.param);
  if (it == params.end())
    return module.emitError() << "unknown target parameter '" << o.param << "'";
  *it->second = *v;
  auto emit = [&]() { return module.emitError(); };
  if (failed(GPUTargetAttr::verify(emit, gpu.getChip(), gpu.getFeatures(), sm,
                                   smemBlock, smemSM, regsSM, regsThread,
                                   threads)))
    return failure();
  return Attribute(GPUTargetAttr::get(module.getContext(), gpu.getChip(),
                                      gpu.getFeatures(), sm, smemBlock, smemSM,
                                      regsSM, regsThread, threads));
}

/// Whether `op` is a row-wise op (or a lowered form of one) on one row per
/// sequence: some operand or result has N (num_seqs) leading rows and none
/// has the tokens T in any dimension. So is the latent attention of the
/// last tokens alone (k3-last-token-logits: one query a sequence over the
/// cache, a decode step's attention). Other attention, convolutions and KDA
/// keep their prefill kernels whatever their shapes.
bool onSequenceRows(Operation *op, const SymbolicShapes &shapes) {
  if (!isa<LinearOp, LinearGroupOp, RMSNormOp, AddRMSNormOp, GatedRMSNormOp,
           PartialRMSNormOp, AddOp, SigmoidGateOp, ArgmaxOp, MoERouterOp,
           MoETopKOp, MoEDispatchOp, MoEGroupedGLUOp, MoEGroupedDownOp,
           MoECombineOp, GLUGateUpOp, GLUMLPOp, MoEExpertsOp,
           LatentAttentionOp>(op))
    return false;
  bool seqRows = false;
  auto tokenFree = [&](Value v) {
    if (!isa<RankedTensorType>(v.getType()) || !shapes.contains(v))
      return true;
    const SymShape &s = shapes.lookup(v);
    seqRows |= !s.empty() && s[0] == kNumSeqs;
    return !llvm::is_contained(s, int64_t(kNumTokens));
  };
  return llvm::all_of(op->getOperands(), tokenFree) &&
         llvm::all_of(op->getResults(), tokenFree) && seqRows;
}

/// `c` with its kernel changed to `o.value`'s defaults, where that kernel
/// covers `op`; others keep `c` (an override names an op kind, some of
/// whose ops the kernel may not cover).
FailureOr<KernelConfigAttr> overrideKernel(Operation *op, KernelConfigAttr c,
                                           const Override &o, Attribute target,
                                           bool decode, int64_t maxRows,
                                           int64_t maxSeqs) {
  std::optional<KernelKind> k = symbolizeKernelKind(o.value);
  if (!k)
    return op->emitError() << "unknown kernel '" << o.value << "'";
  if (!kernelApplies(op, *k, target))
    return c;
  return kernelConfigOfKind(op, *k, target, decode, maxRows, maxSeqs);
}

/// `c` with one parameter other than the kernel changed.
FailureOr<KernelConfigAttr> overrideParam(Operation *op, KernelConfigAttr c,
                                          const Override &o) {
  SmallVector<int64_t> tile(c.getTile());
  int64_t warps = c.getWarps(), stages = c.getStages(),
          blocks = c.getBlocksPerSm(), raster = c.getRaster(),
          cluster = c.getCluster(), prefetch = c.getPrefetch();
  TileScheduler scheduler = c.getScheduler();
  if (o.param == "tile") {
    tile.clear();
    for (StringRef part : llvm::split(o.value, 'x')) {
      int64_t v;
      if (part.getAsInteger(10, v) || v <= 0)
        return op->emitError() << "override " << o.written()
                               << ".tile needs positive sizes joined by x, "
                                  "got '"
                               << o.value << "'";
      tile.push_back(v);
    }
    // The recurrent KDA kernel's tile sets its warps.
    if (c.getKernel() == KernelKind::kda_recurrent && tile.size() == 4) {
      KDARecurrentTile t{tile[0], tile[1], tile[2], tile[3]};
      warps = std::max<int64_t>(1, t.threads() / 32);
    }
  } else if (o.param == "scheduler") {
    std::optional<TileScheduler> s = symbolizeTileScheduler(o.value);
    if (!s)
      return op->emitError()
             << "override " << o.written()
             << ".scheduler needs strided or counter, got '" << o.value << "'";
    scheduler = *s;
  } else {
    llvm::StringMap<int64_t *> params = {
        {"warps", &warps},   {"stages", &stages},   {"blocks_per_sm", &blocks},
        {"raster", &raster}, {"cluster", &cluster}, {"prefetch", &prefetch}};
    auto it = params.find(o.param);
    if (it == params.end())
      return op->emitError() << "unknown kernel config parameter '" << o.param
                             << "' (kernel, tile, warps, stages, "
                                "blocks_per_sm, raster, cluster, "
                                "scheduler, prefetch)";
    FailureOr<int64_t> v = parseInt(op, o);
    if (failed(v))
      return failure();
    *it->second = *v;
  }
  return KernelConfigAttr::get(op->getContext(), c.getKernel(), tile, warps,
                               stages, blocks, raster, cluster, scheduler,
                               prefetch);
}

struct K3SelectKernelConfigPass
    : impl::K3SelectKernelConfigBase<K3SelectKernelConfigPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    FailureOr<Attribute> target = resolveTarget(module, this->target);
    if (failed(target))
      return failure();
    SmallVector<Override> opOverrides;
    for (const std::string &text : overrides) {
      FailureOr<Override> o = parseOverride(module, text);
      if (failed(o))
        return failure();
      if (o->scope == "target" && o->entry.empty()) {
        target = overrideTarget(module, *target, *o);
        if (failed(target))
          return failure();
        continue;
      }
      opOverrides.push_back(*o);
    }
    K3Dialect::TargetAttrHelper(ctx).setAttr(module, *target);

    K3Dialect::KernelConfigAttrHelper configs(ctx);
    K3Dialect::DecodeAttrHelper decodeAttr(ctx);
    for (auto fn : module.getOps<func::FuncOp>()) {
      bool decodeEntry = decodeAttr.isAttrPresent(fn);
      // Which ops see one row per sequence: where the function's dynamic
      // sizes cannot be told apart (a function without named inputs, as in
      // tests), none does.
      SymbolicShapes shapes;
      if (!decodeEntry) {
        ScopedDiagnosticHandler quiet(ctx,
                                      [](Diagnostic &) { return success(); });
        if (failed(shapes.analyze(fn)))
          shapes = SymbolicShapes();
      }
      WalkResult r = fn.walk([&](Operation *op) {
        if (!needsKernel(op))
          return WalkResult::advance();
        // A decode entry's rows are one token per sequence; so are a
        // prefill's ops on the sequences' last rows (k3-last-token-logits:
        // the last layer's MLP and the head), which take a decode step's
        // kernels.
        bool decode = decodeEntry || onSequenceRows(op, shapes);
        int64_t maxRows = decode ? maxSeqs : maxTokens;
        KernelConfigAttr c = configs.getAttr(op);
        if (!c)
          c = defaultKernelConfig(op, *target, decode, maxRows, maxSeqs);
        for (const Override &o : opOverrides) {
          // An op name, or the kind of kernel the op has so far (the same
          // op kind takes other kernels in prefill and in a decode step);
          // `@decode` or `@prefill` after it limits it to that entry's ops.
          if (o.scope != op->getName().stripDialect() &&
              o.scope != op->getName().getStringRef() &&
              o.scope != stringifyKernelKind(c.getKernel()))
            continue;
          if ((o.entry == "decode" && !decode) ||
              (o.entry == "prefill" && decode))
            continue;
          FailureOr<KernelConfigAttr> changed =
              o.param == "kernel"
                  ? overrideKernel(op, c, o, *target, decode, maxRows, maxSeqs)
                  : overrideParam(op, c, o);
          if (failed(changed))
            return WalkResult::interrupt();
          c = *changed;
        }
        if (failed(verifyKernelConfig(op, c, *target)))
          return WalkResult::interrupt();
        configs.setAttr(op, c);
        if (report)
          op->emitRemark() << "kernel config " << c;
        return WalkResult::advance();
      });
      if (r.wasInterrupted())
        return failure();
    }
    return success();
  }
};

} // namespace
} // namespace mlir::k3
