// libFuzzer target: the .k3bin reader must reject or accept any input
// without crashing; accepted input must re-serialize and read back equal.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "k3/artifact.h"

static int check(const uint8_t *data, size_t size) {
  k3::artifact::Artifact a;
  std::string err;
  if (!k3::artifact::deserialize(data, size, a, err)) {
    if (err.empty())
      abort();
    return 0;
  }
  std::vector<uint8_t> out;
  if (!k3::artifact::serialize(a, out, err))
    abort();
  k3::artifact::Artifact b;
  a.versionMinor =
      k3::artifact::kVersionMinor; // the writer emits its own minor version
  if (!k3::artifact::deserialize(out.data(), out.size(), b, err) || !(a == b))
    abort();
  return 0;
}

// Runs the raw input, then the same bytes with file_size and checksum fixed
// up, so that mutations reach the section decoders and the validator.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check(data, size);
  if (size < k3::artifact::kHeaderSize)
    return 0;
  std::vector<uint8_t> b(data, data + size);
  uint64_t n = size, sum = k3::artifact::fnv1a64(b.data() + 64, size - 64);
  for (int k = 0; k < 8; ++k)
    b[16 + k] = uint8_t(n >> (8 * k));
  for (int k = 0; k < 8; ++k)
    b[24 + k] = uint8_t(sum >> (8 * k));
  return check(b.data(), b.size());
}
