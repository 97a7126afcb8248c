// Private: the generation loop behind k3_generation_* (docs/runtime.md,
// "Generation"): packed prefill of a batch of prompts, then decode steps of
// every sequence, sampling each sequence's next token on the host.
#ifndef K3_RT_GENERATION_H
#define K3_RT_GENERATION_H

#include <string>
#include <vector>

#include "session.h"

namespace k3 {
namespace rt {

class Generation {
public:
  Generation(Session &s, const std::string &entry,
             const k3_sequence_request *reqs, size_t n);
  /// Prefill on the first call, then one decode step; tokens[i] = new token
  /// of sequence i or -1.
  void step(int32_t *tokens, size_t *active);
  void stop(size_t i);
  k3_finish_reason finishReason(size_t i) const;
  double prefillMs = 0, decodeMs = 0;
  size_t decodeSteps = 0;

private:
  struct Seq {
    std::vector<int32_t> prompt, generated, history, stops;
    k3_sampling_params params;
    int64_t maxNew;
    k3_finish_reason reason = K3_FINISH_NONE;
  };
  void runStep(bool prefill);
  int32_t sampleRow(Seq &q, uint64_t row);
  Session &s_;
  std::string entry_, decode_;
  int entryIdx_, decodeIdx_;
  bool hasNumSeqs_;
  // Per entry (prefill, decode): logits has one row per sequence, its last
  // token (k3-compile logits=last), instead of one per token.
  bool lastRowsOnly_[2] = {false, false};
  int64_t vocab_;
  std::vector<Seq> seqs_;
  bool started_ = false;
  std::vector<float> row_;
  std::vector<uint8_t> raw_;
};

} // namespace rt
} // namespace k3

#endif
