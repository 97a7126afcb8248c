//===- EmitModule.h - Config to K3 IR ---------------------------*- C++ -*-===//
//
// Emits the imported decoder as K3 IR in the style of examples/tiny_k3.mlir:
// `@forward`, one private template per layer kind, one `k3.layer` per layer,
// relative weight names inside templates, routed experts as one stacked
// `experts.{expert}.*` weight (docs/import.md), f4E2M1FN where they are
// MXFP4. The Config is trusted: ParseDecoder has validated it.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_EMITMODULE_H
#define K3_IMPORT_EMITMODULE_H

#include "tools/k3-import/lib/ImportConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <string>

namespace k3import {

/// What the command line decides about the emitted module.
struct EmitOptions {
  std::string name;       // k3.model
  int64_t maxContext = 0; // k3.max_context: the latent cache's length
  /// The weights the checkpoint keeps in bf16 are f32 instead (an f32
  /// checkpoint, e.g. a model saved by transformers in float32).
  bool f32Weights = false;
  /// The short convolutions store q, k, v in bf16 (as the reference
  /// implementations hand them to their KDA kernels), which lets the CUDA
  /// pipeline run KDA on the tensor cores (k3-kda-mma-split).
  bool bf16KdaOperands = false;
  /// "bf16" or "f32": the precision policy recorded on the module for
  /// k3-compile (k3-activation-precision); empty: none recorded.
  std::string activationDType;
};

/// The module for `c`, its routed experts in the precision `experts` says
/// (the K3, func, tensor and arith dialects are loaded into `ctx`). Not
/// verified: the caller does, as a check of the emitter.
mlir::OwningOpRef<mlir::ModuleOp> emitModule(mlir::MLIRContext &ctx,
                                             const Config &c,
                                             const ExpertPrecision &experts,
                                             const EmitOptions &opts);

} // namespace k3import

#endif
