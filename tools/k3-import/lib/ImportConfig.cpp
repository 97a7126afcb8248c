//===- ImportConfig.cpp - the decoder k3-import imports -------------------===//
#include "tools/k3-import/lib/ImportConfig.h"

#include <algorithm>

namespace k3import {

bool Config::anyKda() const {
  return std::any_of(isKda.begin(), isKda.end(), [](bool k) { return k; });
}

bool Config::anyMla() const {
  return std::any_of(isKda.begin(), isKda.end(), [](bool k) { return !k; });
}

bool Config::anyMoe() const {
  return std::any_of(isMoe.begin(), isMoe.end(), [](bool m) { return m; });
}

bool Config::anyDense() const {
  return std::any_of(isMoe.begin(), isMoe.end(), [](bool m) { return !m; });
}

} // namespace k3import
