// libFuzzer target: safetensors header/offset validation and conversion.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "k3/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<k3::st::TensorInfo> ts;
  std::vector<std::pair<std::string, std::string>> md;
  std::string err;
  if (!k3::st::parse(data, size, "fuzz", ts, md, err)) {
    if (err.empty())
      abort();
    return 0;
  }
  for (auto &t : ts) {
    if (t.end > size || t.data < data ||
        t.data + (t.end - t.begin) > data + size)
      abort();
    if (t.numel() > (1u << 20))
      continue;
    for (uint8_t d = 0; d < k3::artifact::kNumDTypes; ++d) {
      // mxfp4 takes U8 tensors (its codes or scales) byte for byte.
      size_t unit =
          std::max<size_t>(k3::artifact::dtypeSize(k3::artifact::DType(d)), 1);
      std::vector<uint8_t> out(size_t(t.numel()) * unit + 1);
      k3::st::convert(t, k3::artifact::DType(d), out.data(), err);
    }
  }
  return 0;
}
