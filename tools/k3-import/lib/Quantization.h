//===- Quantization.h - quantization_config, read for MXFP4 -----*- C++ -*-===//
//
// K3 checkpoints store their routed experts as compressed-tensors
// `mxfp4-pack-quantized` (K3-SPEC §5, docs/mxfp4.md). This reads a
// config.json `quantization_config` (compressed-tensors' QuantizationConfig:
// src/compressed_tensors/quantization/quant_config.py, quant_scheme.py,
// quant_args.py) into a QuantizationScheme: which modules each config group
// targets, which are ignored, and whether the group is MXFP4 weight
// quantization (MXFP4PackedCompressor.can_compress in
// compressors/mxfp4/base.py: 4-bit float weights, group size 32).
//
// A group that is valid compressed-tensors but not MXFP4 (another format,
// group size, bit width, activation quantization, ...) is kept with the
// reason, and is an error only if it quantizes a module of the decoder
// (ExpertPrecision.h): a group for the vision tower does not matter here.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_QUANTIZATION_H
#define K3_IMPORT_QUANTIZATION_H

#include "tools/k3-import/lib/ImportError.h"
#include "tools/k3-import/lib/QuantTargets.h"

#include "k3/json.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace k3import {

/// One entry of config_groups.
struct QuantGroup {
  std::string path; // quantization_config.config_groups.NAME
  std::vector<Target> targets;
  /// No config_groups at all: the group of the routed experts (below).
  bool routedExperts = false;
  /// Why the group is not MXFP4 weight quantization, as the error to report
  /// (field path, message) if it quantizes a decoder module.
  std::optional<FieldMessage> unsupported;
};

struct QuantizationScheme {
  std::string path; // quantization_config or text_config.quantization_config
  std::vector<QuantGroup> groups;
  std::vector<Target> ignore;

  /// The group that quantizes module `m` (compressed-tensors'
  /// match_named_modules: no ignore entry matches and a target does), or
  /// null. `routedExpert`: m is a routed expert projection.
  const QuantGroup *groupFor(const ModuleView &m, bool routedExpert) const;
};

/// Reads `q` (the quantization_config object found at `path`). Without
/// config_groups (the K3 config of K3-SPEC §1 gives only quant_method and
/// format), the routed experts are the quantized modules (K3-SPEC §5), in
/// the top-level format, as MXFP4 (4-bit float, group size 32).
llvm::Expected<QuantizationScheme> parseQuantization(const ::k3::json::Value &q,
                                                     const std::string &path);

} // namespace k3import

#endif
