//===- K3KernelAttrs.cpp - targets, kernel configs, launches ----*- C++ -*-===//
#include "dialects/K3/K3Dialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;
using namespace mlir::k3;

GPUTargetAttr GPUTargetAttr::getDefault(MLIRContext *ctx, StringRef chip) {
  // sm_90a: an H200 (H100 SXM has the same SM count and limits).
  if (chip == "sm_90a" || chip == "sm_90")
    return GPUTargetAttr::get(ctx, chip, "+ptx80", 132, 232448, 233472, 65536,
                              255, 1024);
  return {};
}

LogicalResult
GPUTargetAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      StringRef chip, StringRef features, int64_t smCount,
                      int64_t smemPerBlock, int64_t smemPerSM,
                      int64_t registersPerSM, int64_t registersPerThread,
                      int64_t threadsPerBlock) {
  if (!chip.starts_with("sm_"))
    return emitError() << "chip must be an sm_XY name, got '" << chip << "'";
  auto positive = [&](StringRef what, int64_t v,
                      int64_t most) -> LogicalResult {
    if (v < 1 || v > most)
      return emitError() << what << " must be in [1, " << most << "], got "
                         << v;
    return success();
  };
  if (failed(positive("sm_count", smCount, 1024)) ||
      failed(positive("smem_per_block", smemPerBlock, 1 << 24)) ||
      failed(positive("smem_per_sm", smemPerSM, 1 << 24)) ||
      failed(positive("registers_per_sm", registersPerSM, 1 << 20)) ||
      failed(positive("registers_per_thread", registersPerThread, 255)) ||
      failed(positive("threads_per_block", threadsPerBlock, 1024)))
    return failure();
  if (smemPerBlock > smemPerSM)
    return emitError() << "smem_per_block (" << smemPerBlock
                       << ") exceeds smem_per_sm (" << smemPerSM << ")";
  return success();
}

LogicalResult
LaunchShapeAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        GridSymbol symbol, int64_t scale, int64_t offset,
                        int64_t divisor, ArrayRef<int64_t> block,
                        int64_t dynamicSmem, int64_t clusterY) {
  if (divisor < 1)
    return emitError() << "grid_divisor must be positive, got " << divisor;
  if (symbol == GridSymbol::none ? scale != 0 : scale < 1)
    return emitError() << "grid_scale must be 0 without a symbol and "
                          "positive with one, got "
                       << scale;
  if (block.size() != 3 ||
      llvm::any_of(block, [](int64_t b) { return b < 1 || b > 1024; }))
    return emitError() << "block must be three sizes in [1, 1024]";
  if (block[0] * block[1] * block[2] > 1024)
    return emitError() << "block has more than 1024 threads";
  if (dynamicSmem < 0)
    return emitError() << "dynamic_smem must not be negative";
  // Hopper's portable cluster size is 8 blocks.
  if (clusterY < 1 || clusterY > 8)
    return emitError() << "cluster_y must be in [1, 8], got " << clusterY;
  return success();
}

LogicalResult
WeightShardAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                        StringRef group, int64_t parts, int64_t dim,
                        int64_t extent) {
  if (group != "tp" && group != "ep" && group != "cp")
    return emitError() << "group must be tp, ep or cp, got '" << group << "'";
  if (parts < 1 || parts > 64)
    return emitError() << "parts must be in [1, 64], got " << parts;
  if (dim < 0)
    return emitError() << "dim must not be negative, got " << dim;
  if (extent < 0)
    return emitError() << "extent must not be negative, got " << extent;
  return success();
}

LogicalResult K3Dialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  // The typed helpers declare each attribute's type; only `target` holds
  // one of several.
  if (attr.getName() == TargetAttrHelper(op->getContext()).getName() &&
      !isa<CPUTargetAttr, GPUTargetAttr>(attr.getValue()))
    return op->emitError() << attr.getName()
                           << " must be #k3.cpu_target or #k3.gpu_target";
  if (attr.getName() == ActivationDtypeAttrHelper(op->getContext()).getName()) {
    if (!isa<ActivationDTypeAttr>(attr.getValue()))
      return op->emitError() << attr.getName()
                             << " must be #k3<activation_dtype f32> or "
                                "#k3<activation_dtype bf16>, got "
                             << attr.getValue();
    if (!isa<ModuleOp>(op))
      return op->emitError()
             << attr.getName() << " belongs on the model's module";
  }
  if (attr.getName() == ShardAttrHelper(op->getContext()).getName()) {
    auto shard = dyn_cast<WeightShardAttr>(attr.getValue());
    auto weight = dyn_cast<WeightOp>(op);
    if (!shard || !weight)
      return op->emitError()
             << attr.getName() << " is a #k3.weight_shard on a k3.weight";
    auto type = cast<RankedTensorType>(weight.getType());
    if (shard.getDim() >= type.getRank())
      return op->emitError() << attr.getName() << " dim " << shard.getDim()
                             << " is not a dimension of " << weight.getType();
    int64_t covered = shard.getParts() * type.getDimSize(shard.getDim());
    if (shard.getExtent() && shard.getExtent() < covered)
      return op->emitError()
             << attr.getName() << " extent " << shard.getExtent()
             << " is shorter than the ranks' slices (" << covered << ")";
  }
  return success();
}

void mlir::k3::stripK3Attributes(FunctionOpInterface fn) {
  auto isK3 = [](NamedAttribute a) {
    return a.getName().strref().starts_with(
        (K3Dialect::getDialectNamespace() + ".").str());
  };
  SmallVector<StringAttr> names;
  for (NamedAttribute a : fn->getDiscardableAttrs())
    if (isK3(a))
      names.push_back(a.getName());
  for (StringAttr n : names)
    fn->removeAttr(n);
  for (unsigned i = 0, e = fn.getNumArguments(); i < e; ++i) {
    names.clear();
    for (NamedAttribute a : fn.getArgAttrs(i))
      if (isK3(a))
        names.push_back(a.getName());
    for (StringAttr n : names)
      fn.removeArgAttr(i, n);
  }
}

bool mlir::k3::inDecodeEntry(Operation *op) {
  auto fn = op->getParentOfType<FunctionOpInterface>();
  return fn && K3Dialect::DecodeAttrHelper(op->getContext()).isAttrPresent(fn);
}
