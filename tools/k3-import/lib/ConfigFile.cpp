//===- ConfigFile.cpp - reading config.json -------------------------------===//
#include "tools/k3-import/lib/ConfigFile.h"

#include "tools/k3-import/lib/ImportError.h"

#include <fstream>
#include <sstream>

namespace k3import {

llvm::Error readConfigJson(const std::string &path, ::k3::json::Value &out) {
  std::ifstream fs(path, std::ios::binary);
  if (!fs)
    return fieldError("", "cannot open");
  std::stringstream ss;
  ss << fs.rdbuf();
  std::string err;
  if (!::k3::json::parse(ss.str(), out, err))
    return fieldError("", "invalid JSON: " + err);
  if (!out.isObject())
    return fieldError("", "expected a JSON object at the top level");
  return llvm::Error::success();
}

} // namespace k3import
