//===- ConfigFile.h - reading config.json -----------------------*- C++ -*-===//
//
// Reads a config.json from disk as JSON, apart from interpreting it
// (ParseDecoder.h), so that file and syntax problems are reported the same
// way for every consumer: a FieldError without a field.
//
//===----------------------------------------------------------------------===//
#ifndef K3_IMPORT_CONFIGFILE_H
#define K3_IMPORT_CONFIGFILE_H

#include "k3/json.h"

#include "llvm/Support/Error.h"

#include <string>

namespace k3import {

/// The JSON object in file `path` ("cannot open", "invalid JSON: ...",
/// "expected a JSON object at the top level" otherwise).
llvm::Error readConfigJson(const std::string &path, ::k3::json::Value &out);

} // namespace k3import

#endif
