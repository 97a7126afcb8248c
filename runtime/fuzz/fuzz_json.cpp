// libFuzzer target: the strict JSON parser; accepted documents must survive
// a dump/parse round trip.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "k3/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  k3::json::Value v;
  std::string err;
  if (!k3::json::parse(reinterpret_cast<const char *>(data), size, v, err)) {
    if (err.empty())
      abort();
    return 0;
  }
  std::string s = k3::json::dump(v);
  k3::json::Value w;
  if (!k3::json::parse(s, w, err))
    abort();
  if (k3::json::dump(w) != s)
    abort();
  return 0;
}
