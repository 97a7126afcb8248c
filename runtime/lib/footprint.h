// Private: what an artifact needs on its device, from its plan alone, and
// the check that it fits before anything is allocated.
#ifndef K3_RT_FOOTPRINT_H
#define K3_RT_FOOTPRINT_H

#include <cstdint>
#include <string>

#include "k3/artifact.h"

namespace k3 {
namespace rt {

struct Footprint {
  uint64_t weights = 0;     // every weight at its dtype
  uint64_t activations = 0; // the activation arena (max-tokens per call)
  uint64_t io = 0;          // entry inputs and outputs
  uint64_t state = 0;       // decode state for max-seqs sequences
  uint64_t statePerSeq = 0; // fixed per sequence (KDA, convolution states)
  // Per token of one sequence: states named "...latent_cache" (MLA), each
  // holding max_seq_len tokens of every sequence (docs/runtime.md).
  uint64_t cachePerToken = 0;
  uint64_t total() const { return weights + activations + io + state; }
};

Footprint footprint(const artifact::Artifact &a);

/// A readable breakdown: "weights 98.10 GB, activations 2.00 GB, ...".
std::string describeFootprint(const Footprint &f);

/// Empty when `f` fits in `freeBytes`; else an error naming the parts.
std::string checkFits(const Footprint &f, uint64_t freeBytes,
                      const std::string &device);

} // namespace rt
} // namespace k3

#endif
