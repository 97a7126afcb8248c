//===- ImportConfig.h - the decoder k3-import imports -----------*- C++ -*-===//
//
// Config is the typed, validated description of a Kimi K3 / Kimi Linear text
// decoder that ParseDecoder reads from config.json and EmitModule turns into
// K3 IR: the two halves of the importer meet only here, so the emitter never
// sees JSON and the parser never sees MLIR. Field meanings: K3-SPEC.md §1 and
// docs/import.md.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_IMPORTCONFIG_H
#define K3_IMPORT_IMPORTCONFIG_H

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace k3import {

struct Config {
  std::string family; // "kimi_k3" or "kimi_linear" (informational)
  int64_t hidden = 0, layers = 0, vocab = 0;
  double eps = 1e-5;
  bool tie = false;
  bool situ = false; // else SiLU
  std::optional<double> situBeta, situLinearBeta;
  int64_t attnResBlock = 0; // 0: plain residual
  int64_t intermediate = 0;
  // MoE
  int64_t experts = 0, topK = 0, sharedExperts = 0, moeInter = 0;
  std::optional<int64_t> latent; // routed_expert_hidden_size
  bool latentNorm = false;
  double scaling = 1.0;
  bool softmaxRouter = false;
  bool renormalize = true;
  // Group-limited routing (num_expert_group / topk_group): the experts form
  // nGroup contiguous groups and only the topkGroup best are eligible.
  int64_t nGroup = 1, topkGroup = 1;
  std::vector<bool> isMoe, isKda;
  // MLA
  int64_t heads = 0, kvLoraRank = 0, nope = 0, rope = 0, vDim = 0;
  std::optional<int64_t> qLoraRank;
  bool mlaGate = false;
  // KDA
  int64_t kdaHeads = 0, kdaDim = 0, convKernel = 4;
  std::optional<double> lowerBound;
  bool fullRankGate = false;
  int64_t maxPosition = 0;

  /// Some layer has a KDA (resp. MLA) mixer, an MoE (resp. dense) MLP.
  bool anyKda() const;
  bool anyMla() const;
  bool anyMoe() const;
  bool anyDense() const;
  /// The width the routed experts work on: the latent width of K3's latent
  /// MoE, else the hidden size.
  int64_t expertWidth() const { return latent.value_or(hidden); }
};

/// The most routed experts a config may declare (ParseDecoder.cpp).
constexpr int64_t kMaxExperts = 65536;
/// The most (MoE layer, expert) pairs a quantization_config is matched
/// against, one checkpoint module each (ExpertPrecision.cpp): about a
/// second of regular-expression matching.
constexpr int64_t kMaxQuantizedExpertModules = int64_t(1) << 20;

/// Which routed-expert projections (w1, w2, w3) of each layer are stored
/// as MXFP4 in the checkpoint, and so typed f4E2M1FN in the IR
/// (ExpertPrecision.h decides it from the quantization_config).
struct ExpertPrecision {
  using Layer = std::array<bool, 3>;
  std::vector<Layer> mxfp4; // per decoder layer; empty: none

  Layer layer(int64_t i) const {
    return i < int64_t(mxfp4.size()) ? mxfp4[i] : Layer{false, false, false};
  }
};

} // namespace k3import

#endif
