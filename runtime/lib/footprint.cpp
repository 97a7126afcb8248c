// An artifact's device memory, from its plan (footprint.h).
#include "footprint.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "session.h"

namespace k3 {
namespace rt {

using namespace artifact;

namespace {

bool isTokenCache(const std::string &name) {
  static const std::string kSuffix = "latent_cache";
  return name.size() >= kSuffix.size() &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) ==
             0;
}

std::string gb(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GB", double(bytes) / 1e9);
  return buf;
}

} // namespace

Footprint footprint(const Artifact &a) {
  Footprint f;
  for (const Weight &w : a.weights)
    f.weights += weightBytes(w);
  int64_t maxContext = 0;
  if (const std::string *v = a.meta("max_seq_len"))
    maxContext = std::atoll(v->c_str());
  for (const Buffer &b : a.buffers) {
    switch (b.kind) {
    case BufferKind::Arena:
      f.activations = std::max(f.activations, b.arenaOffset + b.size);
      break;
    case BufferKind::Input:
    case BufferKind::Output:
      f.io += b.size;
      break;
    case BufferKind::State:
      f.state += b.size;
      if (isTokenCache(b.name) && maxContext > 0)
        f.cachePerToken += b.perSeqStride / uint64_t(maxContext);
      else
        f.statePerSeq += b.perSeqStride;
      break;
    }
  }
  return f;
}

std::string describeFootprint(const Footprint &f) {
  std::string s = "weights " + gb(f.weights) + ", activations " +
                  gb(f.activations) + ", inputs and outputs " + gb(f.io) +
                  ", decode state " + gb(f.state) + " (" +
                  std::to_string(f.statePerSeq) + " bytes per sequence";
  if (f.cachePerToken)
    s += " + " + std::to_string(f.cachePerToken) + " bytes per cached token";
  return s + "); total " + gb(f.total());
}

std::string checkFits(const Footprint &f, uint64_t freeBytes,
                      const std::string &device) {
  if (f.total() <= freeBytes)
    return "";
  std::string what;
  if (f.weights > freeBytes)
    what = "the weights alone (" + gb(f.weights) + ") do not fit";
  else
    what = "the weights (" + gb(f.weights) + ") leave " +
           gb(freeBytes - f.weights) + " for activations and state, which " +
           "need " + gb(f.total() - f.weights) +
           " (compile with a smaller max-tokens or max-seqs)";
  return "the model needs " + gb(f.total()) + " on " + device + " but " +
         gb(freeBytes) + " is free: " + what + "; " + describeFootprint(f);
}

} // namespace rt
} // namespace k3
