// Checks of entry inputs' values before any launch (see input_checks.h).
#include "input_checks.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "session.h"

namespace k3 {
namespace rt {

using namespace artifact;

namespace {
bool isTokenIds(const TensorSpec &t) {
  return t.name == "token_ids" && t.dtype == DType::I32;
}
// Element i of an integer input (the caller's data need not be aligned).
int64_t element(const void *values, size_t elementSize, uint64_t i) {
  const uint8_t *p = static_cast<const uint8_t *>(values) + i * elementSize;
  if (elementSize == 4) {
    int32_t x;
    memcpy(&x, p, 4);
    return x;
  }
  int64_t x;
  memcpy(&x, p, 8);
  return x;
}
} // namespace

bool inputHasValueChecks(const Artifact &a, const TensorSpec &t) {
  return (isTokenIds(t) && a.meta(kMetaVocabSize)) || t.maxValue.has_value();
}

void checkTokenIds(const Artifact &a, const TensorSpec &t, const void *ids,
                   uint64_t count) {
  const std::string *vs = a.meta(kMetaVocabSize);
  int64_t vocab = vs ? std::strtoll(vs->c_str(), nullptr, 10) : 0;
  for (uint64_t i = 0; vocab > 0 && i < count; ++i) {
    int64_t id = element(ids, 4, i);
    if (id < 0 || id >= vocab)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "input '" + t.name + "': token " + std::to_string(i) + " = " +
               std::to_string(id) + " is out of range for vocab_size " +
               std::to_string(vocab));
  }
}

void checkMaxValue(const Entry &e, const TensorSpec &t, const void *values,
                   uint64_t bytes) {
  if (!t.maxValue)
    return;
  int64_t bound = *t.maxValue;
  size_t es = dtypeSize(t.dtype);
  // The reader refuses a bound on any other input.
  if (!dtypeIsInteger(t.dtype) || (es != 4 && es != 8))
    fail(K3_ERROR_INVALID_ARGUMENT,
         "entry '" + e.name + "' input '" + t.name +
             "': value bound on a non-integer input");
  for (uint64_t i = 0; i < bytes / es; ++i) {
    int64_t v = element(values, es, i);
    if (v > bound)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "entry '" + e.name + "' input '" + t.name + "': element " +
               std::to_string(i) + " = " + std::to_string(v) + " exceeds " +
               std::to_string(bound) +
               (t.maxValueReason.empty() ? "" : ": " + t.maxValueReason));
  }
}

void checkInputValues(Backend &be, const Artifact &a, const Entry &e,
                      const TensorSpec &t, const void *host, uint64_t device,
                      uint64_t bytes) {
  if (!inputHasValueChecks(a, t))
    return;
  // Inputs given on the device are read back: 4 bytes an element of the
  // (small, integer) inputs that have checks.
  std::vector<uint8_t> copy;
  if (!host) {
    copy.resize(bytes);
    std::string err;
    if (bytes && !be.download(copy.data(), device, bytes, err))
      fail(K3_ERROR_DEVICE, "reading input '" + t.name + "': " + err);
    host = copy.data();
  }
  if (isTokenIds(t))
    checkTokenIds(a, t, host, bytes / 4);
  checkMaxValue(e, t, host, bytes);
}

void checkSequences(const Artifact &a, const Entry &e, const int32_t *cu,
                    const int32_t *ctx, int64_t numSeqs, int64_t numTokens) {
  auto bad = [&](const std::string &what) {
    fail(K3_ERROR_INVALID_ARGUMENT, "entry '" + e.name + "': " + what);
  };
  if (cu[0] != 0)
    bad("cu_seqlens[0] = " + std::to_string(cu[0]) + ", expected 0");
  if (cu[numSeqs] != numTokens)
    bad("cu_seqlens[" + std::to_string(numSeqs) +
        "] = " + std::to_string(cu[numSeqs]) + ", expected the token count " +
        std::to_string(numTokens));
  const std::string *ms = a.meta("max_seq_len");
  int64_t maxLen = ms ? std::strtoll(ms->c_str(), nullptr, 10) : 0;
  const bool oneToken = isOneTokenEntry(a, e.name);
  for (int64_t i = 0; i < numSeqs; ++i) {
    std::string seq = "sequence " + std::to_string(i);
    int64_t len = int64_t(cu[i + 1]) - cu[i];
    if (len < 0)
      bad("cu_seqlens decreases at " + std::to_string(i + 1) + " (" +
          std::to_string(cu[i]) + " then " + std::to_string(cu[i + 1]) + ")");
    if (oneToken && len > 1)
      bad(seq + " has " + std::to_string(len) +
          " tokens; this entry takes at most one per sequence (a decode "
          "step: run the prompt through the prefill entry)");
    int64_t before = ctx ? ctx[i] : 0;
    if (before < 0)
      bad(seq + ": context_lens = " + std::to_string(before) + " < 0");
    if (maxLen > 0 && before + len > maxLen)
      bad(seq + ": " + std::to_string(before) + " tokens of context + " +
          std::to_string(len) + " new exceed max_seq_len " +
          std::to_string(maxLen) + " (the model's longest sequence; " +
          "recompile with a larger --max-context)");
  }
}

} // namespace rt
} // namespace k3
