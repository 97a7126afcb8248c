//===- ParseDecoder.h - config.json to Config -------------------*- C++ -*-===//
//
// Reads a Hugging Face config.json (already parsed as JSON) into a validated
// Config: Kimi K3 (`kimi_k3`, the decoder under `text_config`) or Kimi Linear
// (`kimi_linear`, remote-code or transformers-native field names). All of the
// config's validation lives here, so that the emitter may assume a consistent
// decoder. The quantization_config is only located, not read: Quantization.h
// reads it.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_PARSEDECODER_H
#define K3_IMPORT_PARSEDECODER_H

#include "tools/k3-import/lib/ImportConfig.h"
#include "tools/k3-import/lib/ImportError.h"

#include "k3/json.h"

#include "llvm/Support/Error.h"

#include <string>

namespace k3import {

/// What a config.json holds for the importer.
struct ParsedConfig {
  Config decoder;
  /// The quantization_config object (top level, else under text_config), or
  /// null when there is none (absent or JSON null).
  const ::k3::json::Value *quantization = nullptr;
  /// Its field path: "quantization_config" or
  /// "text_config.quantization_config".
  std::string quantizationPath;
};

/// Reads the top-level object of a config.json. Warnings (fields that are
/// accepted but not imported) are appended to `warnings`, in the order found.
llvm::Expected<ParsedConfig> parseConfig(const ::k3::json::Value &root,
                                         Warnings &warnings);

} // namespace k3import

#endif
