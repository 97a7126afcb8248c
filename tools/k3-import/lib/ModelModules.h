//===- ModelModules.h - the decoder's quantizable modules -------*- C++ -*-===//
//
// compressed-tensors decides per module of the PyTorch model (by name and
// class) whether it is quantized. The importer never sees that model, so this
// lists the decoder's modules that hold a weight matrix compressed-tensors
// can quantize (nn.Linear and nn.Embedding; the router gate too, since a
// name target can reach it) from the Config, under the names the IR uses
// (modeling_kimi_linear.py's, as in the checkpoint): e.g.
// `model.layers.1.block_sparse_moe.experts.0.w1`.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_MODELMODULES_H
#define K3_IMPORT_MODELMODULES_H

#include "tools/k3-import/lib/ImportConfig.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace k3import {

struct ModelModule {
  std::string name;
  /// The module's class, for class targets: Linear, Embedding or
  /// KimiMoEGate (the router: a plain nn.Module holding a weight).
  llvm::StringRef cls;
  int64_t layer = -1;  // routed experts only: their layer
  int64_t expert = -1; // routed experts only
  int proj = -1;       // routed experts: 0 w1, 1 w2, 2 w3
  int64_t inDim = 0;   // routed experts: the weight's last dimension
  bool routedExpert() const { return expert >= 0; }
};

/// Calls `fn` for each such module of `c` (embedding; per layer its mixer,
/// AttnRes and MLP / MoE modules; head), stopping at the first error.
llvm::Error
forEachModule(const Config &c,
              llvm::function_ref<llvm::Error(const ModelModule &)> fn);

/// The names a config may give module `name`: as is and with K3's VLM
/// prefix `language_model.` (the names of K3's checkpoint and of
/// KimiK3ForConditionalGeneration's modules); MoE modules also with
/// `mlp.` for `block_sparse_moe.` (the spelling of transformers' KimiLinear
/// and of docs/mxfp4.md).
/// (`out` is overwritten: its strings' storage is reused.)
void nameSpellings(const std::string &name, std::vector<std::string> &out);

/// The routed-expert projections, in `proj` order.
extern const char *const kExpertProjections[3];

} // namespace k3import

#endif
