// Private: next-token sampling on a host row of logits (docs/runtime.md,
// "Sampling"). Pure functions, no session state: the generation loop
// (generation.cpp) and the C API (k3_sample) call them.
#ifndef K3_RT_SAMPLING_H
#define K3_RT_SAMPLING_H

#include <cstddef>
#include <cstdint>
#include <string>

#include "k3/k3_runtime.h"

namespace k3 {
namespace rt {

/// Philox4x32-10 (Salmon et al., SC'11): four 32-bit outputs for a 128-bit
/// counter under a 64-bit key.
void philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/// The uniform in [0, 1) used at (seed, stream, step): Philox keyed by the
/// seed, counter (step lo, step hi, stream lo, stream hi), the first two
/// outputs as a 53-bit fraction. Independent of everything else in a batch.
double samplingUniform(uint64_t seed, uint64_t stream, uint64_t step);

/// Defaults: greedy (temperature 0), every filter off.
k3_sampling_params defaultSamplingParams();

/// Throws Error (INVALID_ARGUMENT) naming the field when a value is out of
/// range (negative temperature, top_p outside (0, 1], ...).
void validateSamplingParams(const k3_sampling_params &p,
                            const std::string &what);

/// Picks the next token from `logits[0, vocab)`.
///   1. repetition penalty over the distinct ids of `history` (prompt and
///      generated tokens): l > 0 ? l / r : l * r (as transformers);
///   2. temperature 0 (or top_k 1): argmax, the lowest id among equal maxima;
///   3. otherwise logits / temperature, keep the top_k largest (ties: lower
///      id first), softmax (double), keep the smallest prefix (descending
///      probability, ties by id) whose mass reaches top_p, drop tokens whose
///      probability is below min_p * the largest, renormalise and invert the
///      CDF at samplingUniform(seed, stream, step).
/// NaN logits are an error (INVALID_ARGUMENT naming the column).
int32_t sampleToken(const float *logits, int64_t vocab,
                    const k3_sampling_params &p, const int32_t *history,
                    size_t numHistory, uint64_t step);

} // namespace rt
} // namespace k3

#endif
