// Private: checks of entry inputs' values that run before any launch (the
// artifact states what kernels rely on; a run that breaks it is refused
// with K3_ERROR_INVALID_ARGUMENT instead of reading out of bounds or
// computing a wrong result).
#ifndef K3_RT_INPUT_CHECKS_H
#define K3_RT_INPUT_CHECKS_H

#include <cstdint>

#include "backend.h"
#include "k3/artifact.h"

namespace k3 {
namespace rt {

/// Whether input `t` of an entry has values to check: `token_ids` (i32,
/// against the artifact's vocab_size) or a bound (TensorSpec::maxValue).
bool inputHasValueChecks(const artifact::Artifact &a,
                         const artifact::TensorSpec &t);

/// Checks the values of input `t` of entry `e` (`bytes` of them): read at
/// `host`, or, when `host` is null, read back from `device` on `be` (an
/// input given on the device and already copied into its buffer). Throws
/// rt::Error: K3_ERROR_INVALID_ARGUMENT naming the entry, input, element
/// and value (and the bound's reason), K3_ERROR_DEVICE if the read fails.
void checkInputValues(Backend &be, const artifact::Artifact &a,
                      const artifact::Entry &e, const artifact::TensorSpec &t,
                      const void *host, uint64_t device, uint64_t bytes);

/// token_ids: every id in [0, vocab_size) (an id outside the vocabulary
/// would make the embedding read past its table); no check without the
/// vocab_size metadata.
void checkTokenIds(const artifact::Artifact &a, const artifact::TensorSpec &t,
                   const void *ids, uint64_t count);

/// Every element of an input with a bound is <= TensorSpec::maxValue:
/// "entry 'forward' input 'context_lens': element 2 = 5 exceeds 0: <reason>".
void checkMaxValue(const artifact::Entry &e, const artifact::TensorSpec &t,
                   const void *values, uint64_t bytes);

/// The packed sequences of a call: `cu_seqlens` [N + 1] starts at 0, never
/// decreases and ends at `numTokens`; with `context_lens` [N] (tokens a
/// sequence already has) every context is >= 0 and context + new tokens
/// fits the artifact's max_seq_len (the latent cache's length: a longer
/// sequence would write past its slot). `cu` and `ctx` are host copies
/// (ctx may be null). Throws K3_ERROR_INVALID_ARGUMENT naming the sequence.
void checkSequences(const artifact::Artifact &a, const artifact::Entry &e,
                    const int32_t *cu, const int32_t *ctx, int64_t numSeqs,
                    int64_t numTokens);

} // namespace rt
} // namespace k3

#endif
