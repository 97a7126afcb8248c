//===- ActivationPrecision.cpp - the precision policy -----------*- C++ -*-===//
//
// bf16 activations halve the bytes every kernel reads and writes between
// launches; kernels widen on load and compute in f32 (KernelBuilder), so
// only the storage between kernels changes. What must stay f32 (decode
// state, router scores and weights, the log-decay, the logits) keeps its
// type; the MLA latent cache, which stores bf16 latents, becomes bf16.
// docs/precision.md.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3ACTIVATIONPRECISION
#include "passes/Passes.h.inc"

namespace {

bool isF32Tensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

void setElementType(Value v, Type elt) {
  v.setType(cast<RankedTensorType>(v.getType()).clone(elt));
}

/// The results of `op` that are activations passed to the next kernel.
SmallVector<Value> activationResults(Operation *op) {
  return llvm::TypeSwitch<Operation *, SmallVector<Value>>(op)
      .Case<EmbeddingOp, RMSNormOp, GatedRMSNormOp, LinearOp, AddOp,
            SigmoidGateOp, CausalAttentionOp, GLUMLPOp, GLUGateUpOp,
            MoEExpertsOp, AttnResMixOp, AttnResPushOp, LastTokensOp,
            tensor::EmptyOp>(
          [](Operation *o) { return SmallVector<Value>{o->getResult(0)}; })
      .Case([](AddRMSNormOp o) {
        return SmallVector<Value>{o.getSum(), o.getResult()};
      })
      // The output, not the state each of them returns.
      .Case([](ShortConvOp o) { return SmallVector<Value>{o.getResult()}; })
      .Case([](KDAOp o) { return SmallVector<Value>{o.getOutput()}; })
      // Context parallelism: the KDA segment's widened values, the
      // corrected KDA output, the routed rows a rank sends and the rows it
      // gets back (not the states, which stay f32).
      .Case([](KDAContextInputsOp o) {
        return SmallVector<Value>{o.getValues()};
      })
      .Case(
          [](KDAContextFoldOp o) { return SmallVector<Value>{o.getOutput()}; })
      .Case([](MoEBucketOp o) { return SmallVector<Value>{o.getRows()}; })
      .Case([](MoEUnbucketOp o) { return SmallVector<Value>{o.getResult()}; })
      .Case(
          [](LatentAttentionOp o) { return SmallVector<Value>{o.getResult()}; })
      .Default([](Operation *) { return SmallVector<Value>{}; });
}

/// The MLA latent caches in bf16 where the latents they store are bf16
/// activations: an f32 cache held the same values in twice the bytes, and
/// a decode step reads the whole cache (docs/precision.md). A state is
/// narrowed when, in every function, each read of it feeds only
/// latent_attention ops as their cache (with bf16 latents), directly or
/// through the append of the last tokens' attention, and each write
/// stores such an op's updated cache: a state written from elsewhere (an
/// f32 input) keeps its type.
void narrowLatentCaches(ModuleOp module, Type bf16) {
  llvm::StringMap<SmallVector<StateReadOp>> reads;
  llvm::StringMap<bool> narrowable;
  auto isAttentionCache = [](OpOperand &use) {
    auto la = dyn_cast<LatentAttentionOp>(use.getOwner());
    return la && la.getLatentCache() == use.get() &&
           cast<RankedTensorType>(la.getLatent().getType())
               .getElementType()
               .isBF16();
  };
  // Or, context-parallel (k3-partition-context), a rank's share of the
  // cache, summed over the group into the attention's cache.
  // Or, the last tokens' attention (k3-last-token-logits), the cache with
  // the call's bf16 latents appended that the attention reads and the state
  // write takes.
  auto isAppendedCache = [&](OpOperand &use) {
    auto append = dyn_cast<LatentCacheAppendOp>(use.getOwner());
    return append && append.getCache() == use.get() &&
           cast<RankedTensorType>(append.getLatent().getType())
               .getElementType()
               .isBF16() &&
           !append.getResult().use_empty() &&
           llvm::all_of(append.getResult().getUses(), [&](OpOperand &u) {
             return isAttentionCache(u) || isa<StateWriteOp>(u.getOwner());
           });
  };
  auto isCacheUse = [&](OpOperand &use) {
    if (isAttentionCache(use) || isAppendedCache(use))
      return true;
    auto share = dyn_cast<LatentCacheSegmentOp>(use.getOwner());
    if (!share || share.getLatentCache() != use.get() ||
        !share.getResult().hasOneUse())
      return false;
    auto sum = dyn_cast<AllReduceOp>(*share.getResult().user_begin());
    return sum && llvm::all_of(sum.getResult().getUses(), isAttentionCache);
  };
  module.walk([&](Operation *op) {
    if (auto r = dyn_cast<StateReadOp>(op)) {
      bool ok = isF32Tensor(r.getResult()) &&
                llvm::all_of(r.getResult().getUses(), isCacheUse);
      narrowable.try_emplace(r.getName(), true).first->second &= ok;
      reads[r.getName()].push_back(r);
    } else if (auto w = dyn_cast<StateWriteOp>(op)) {
      auto res = dyn_cast<OpResult>(w.getValue());
      auto la = res ? dyn_cast<LatentAttentionOp>(res.getOwner()) : nullptr;
      // The last tokens' cache: the append's result itself.
      if (auto append =
              res ? dyn_cast<LatentCacheAppendOp>(res.getOwner()) : nullptr) {
        narrowable.try_emplace(w.getName(), true).first->second &=
            static_cast<bool>(append.getCache().getDefiningOp<StateReadOp>());
        return;
      }
      Value cache = la ? la.getLatentCache() : Value();
      if (auto sum = cache ? cache.getDefiningOp<AllReduceOp>() : nullptr)
        if (auto share = sum.getInput().getDefiningOp<LatentCacheSegmentOp>())
          cache = share.getLatentCache();
      if (auto append =
              cache ? cache.getDefiningOp<LatentCacheAppendOp>() : nullptr)
        cache = append.getCache();
      bool ok = la && la.getLatentCacheOut() == w.getValue() && cache &&
                cache.getDefiningOp<StateReadOp>();
      narrowable.try_emplace(w.getName(), true).first->second &= ok;
    }
  });
  for (auto &[name, rs] : reads) {
    if (!narrowable.lookup(name))
      continue;
    for (StateReadOp r : rs) {
      setElementType(r.getResult(), bf16);
      for (Operation *user : r.getResult().getUsers()) {
        if (auto share = dyn_cast<LatentCacheSegmentOp>(user)) {
          setElementType(share.getResult(), bf16);
          user = *share.getResult().user_begin();
          setElementType(user->getResult(0), bf16);
          for (Operation *attn : user->getResult(0).getUsers())
            setElementType(cast<LatentAttentionOp>(attn).getLatentCacheOut(),
                           bf16);
          continue;
        }
        if (auto append = dyn_cast<LatentCacheAppendOp>(user)) {
          setElementType(append.getResult(), bf16);
          for (Operation *attn : append.getResult().getUsers())
            if (auto la = dyn_cast<LatentAttentionOp>(attn))
              setElementType(la.getLatentCacheOut(), bf16);
          continue;
        }
        setElementType(cast<LatentAttentionOp>(user).getLatentCacheOut(), bf16);
      }
    }
  }
}

/// Whether `v` must stay f32: a model output (the logits), what argmax or
/// a state write reads, and a context-parallel KDA segment's output (its
/// zero-state outputs and the correction's factor meet in the fold, where
/// bf16 rounding of each would not cancel).
bool mustStayF32(Value v) {
  for (Operation *user : v.getUsers())
    if (isa<func::ReturnOp, ArgmaxOp, StateWriteOp, KDAContextFoldOp>(user))
      return true;
  return false;
}

struct K3ActivationPrecisionPass
    : impl::K3ActivationPrecisionBase<K3ActivationPrecisionPass> {
  using Base::Base;

  void runOnOperation() override {
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    K3Dialect::ActivationDtypeAttrHelper policy(ctx);
    if (!activationDType.empty()) {
      std::optional<ActivationDType> d =
          symbolizeActivationDType(activationDType);
      if (!d)
        return module.emitError()
               << "k3-activation-precision: activation-dtype must be f32 or "
                  "bf16, got '"
               << activationDType << "'";
      policy.setAttr(module, ActivationDTypeAttr::get(ctx, *d));
    }
    ActivationDTypeAttr attr = policy.getAttr(module);
    if (!attr || attr.getValue() == ActivationDType::f32)
      return success();
    Type bf16 = BFloat16Type::get(ctx);
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (fn.isExternal())
        continue;
      WalkResult r = fn.walk([&](Operation *op) -> WalkResult {
        if (isa<LayerOp>(op)) {
          op->emitOpError() << "k3-activation-precision runs after "
                               "k3-inline-layers";
          return WalkResult::interrupt();
        }
        // Reshapes, slices, concatenations and collectives keep their
        // source's type (a TP rank's partial sums travel in bf16, as
        // Megatron's do).
        if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp,
                tensor::ExtractSliceOp, tensor::ConcatOp>(op) ||
            isCollective(op)) {
          Value src = op->getOperand(0);
          auto srcType = cast<RankedTensorType>(src.getType());
          Value res = op->getResult(0);
          if (isF32Tensor(res) && srcType.getElementType().isBF16()) {
            if (mustStayF32(res))
              return op->emitOpError()
                     << "k3-activation-precision: a bf16 activation "
                        "reshaped into a value that must stay f32";
            setElementType(res, bf16);
          }
          if (auto cat = dyn_cast<tensor::ConcatOp>(op))
            for (Value in : cat.getInputs())
              if (cast<RankedTensorType>(in.getType()).getElementType() !=
                  cast<RankedTensorType>(res.getType()).getElementType())
                return op->emitOpError()
                       << "k3-activation-precision: concatenates values of "
                          "different precision";
          return WalkResult::advance();
        }
        for (Value v : activationResults(op))
          if (isF32Tensor(v) && !mustStayF32(v))
            setElementType(v, bf16);
        return WalkResult::advance();
      });
      if (r.wasInterrupted())
        return failure();
      auto ret = cast<func::ReturnOp>(fn.getBody().front().getTerminator());
      fn.setType(
          FunctionType::get(ctx, fn.getArgumentTypes(), ret.getOperandTypes()));
    }
    narrowLatentCaches(module, bf16);
    return success();
  }
};

} // namespace
} // namespace mlir::k3
