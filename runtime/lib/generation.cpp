// The generation loop: a batch of prompts of different lengths prefilled in
// one packed call (sequence i in state slot i), then decode steps of every
// sequence (one token each) through <entry>_decode when the artifact has it.
// The last row of each sequence's logits is copied to the host and sampled
// there (sampling.cpp); the rest of the logits output stays on the device.
// An artifact compiled with logits=last (the default) has only those rows:
// its entry declares logits as [num_seqs, vocab_size].
#include "generation.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "k3/dtype.h"
#include "sampling.h"

namespace k3 {
namespace rt {

using namespace artifact;

namespace {
const char *const kKnownInputs[] = {"token_ids", "cu_seqlens", "positions",
                                    "seq_slots", "context_lens"};

int64_t metaInt(const Artifact &a, const char *key) {
  const std::string *v = a.meta(key);
  if (!v || v->empty())
    return -1;
  char *end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  return *end ? -1 : int64_t(x);
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}
} // namespace

Generation::Generation(Session &s, const std::string &entry,
                       const k3_sequence_request *reqs, size_t n)
    : s_(s), entry_(entry), decode_(entry) {
  const Artifact &a = s.artifact();
  entryIdx_ = a.findEntry(entry);
  if (entryIdx_ < 0)
    fail(K3_ERROR_INVALID_ARGUMENT,
         "artifact has no entry point '" + entry + "'");
  decodeIdx_ = a.findEntry(entry + "_decode");
  if (decodeIdx_ >= 0)
    decode_ = entry + "_decode";
  else
    decodeIdx_ = entryIdx_;
  for (int ei : {entryIdx_, decodeIdx_}) {
    const Entry &e = a.entries[size_t(ei)];
    for (const TensorSpec &t : e.inputs) {
      // A rank input is the session's to fill (isRankInput).
      bool ok = isRankInput(t.name);
      for (const char *k : kKnownInputs)
        ok |= t.name == k;
      if (!ok)
        fail(K3_ERROR_INVALID_ARGUMENT,
             "entry '" + e.name + "' input '" + t.name +
                 "' is not one generation can provide (token_ids, "
                 "cu_seqlens, positions, seq_slots, context_lens)");
      if (t.dtype != DType::I32)
        fail(K3_ERROR_INVALID_ARGUMENT,
             "entry '" + e.name + "' input '" + t.name + "' has dtype " +
                 dtypeName(t.dtype) + ", generation provides i32");
    }
    bool logits = false;
    for (const TensorSpec &t : e.outputs)
      logits |= t.name == "logits";
    if (!logits)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "entry '" + e.name + "' has no output 'logits'");
  }
  int nsSym = a.findSymbol("num_seqs");
  for (int k = 0; k < 2; ++k) {
    const Entry &e = a.entries[size_t(k == 0 ? entryIdx_ : decodeIdx_)];
    for (const TensorSpec &t : e.outputs)
      if (t.name == "logits" && !t.shape.empty() && nsSym >= 0)
        lastRowsOnly_[k] = t.shape[0] == DimExpr::symbol(uint32_t(nsSym));
  }
  vocab_ = metaInt(a, kMetaVocabSize);
  if (vocab_ <= 0)
    fail(K3_ERROR_FORMAT, "artifact metadata has no valid 'vocab_size'");
  int ns = a.findSymbol("num_seqs"), nt = a.findSymbol("num_tokens");
  hasNumSeqs_ = ns >= 0;
  int64_t maxSeqs = ns >= 0 ? a.symbols[size_t(ns)].maxValue : 1;
  int64_t maxTokens =
      nt >= 0 ? a.symbols[size_t(nt)].maxValue : metaInt(a, kMetaMaxTokens);
  int64_t maxLen = metaInt(a, "max_seq_len");
  if (n == 0)
    fail(K3_ERROR_INVALID_ARGUMENT, "generation: no sequences given");
  if (!reqs)
    fail(K3_ERROR_INVALID_ARGUMENT, "generation: requests is NULL");
  if (int64_t(n) > maxSeqs)
    fail(K3_ERROR_INVALID_ARGUMENT,
         std::to_string(n) +
             " sequences but the artifact was compiled for max_seqs " +
             std::to_string(maxSeqs));
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    const k3_sequence_request &r = reqs[i];
    std::string what = "sequence " + std::to_string(i);
    if (r.prompt_len == 0 || !r.prompt)
      fail(K3_ERROR_INVALID_ARGUMENT, what + ": the prompt is empty");
    if (r.max_new_tokens < 0)
      fail(K3_ERROR_INVALID_ARGUMENT,
           what + ": max_new_tokens = " + std::to_string(r.max_new_tokens));
    if (r.num_stop_tokens && !r.stop_tokens)
      fail(K3_ERROR_INVALID_ARGUMENT, what + ": stop_tokens is NULL");
    validateSamplingParams(r.sampling, what);
    for (size_t j = 0; j < r.prompt_len; ++j)
      if (r.prompt[j] < 0 || r.prompt[j] >= vocab_)
        fail(K3_ERROR_INVALID_ARGUMENT,
             (n > 1 ? what + ": " : std::string()) + "prompt token " +
                 std::to_string(j) + " = " + std::to_string(r.prompt[j]) +
                 " is out of range for vocab_size " + std::to_string(vocab_));
    if (maxTokens >= 0 && int64_t(r.prompt_len) > maxTokens)
      fail(K3_ERROR_INVALID_ARGUMENT,
           (n > 1 ? what + ": prompt has " : std::string("prompt has ")) +
               std::to_string(r.prompt_len) +
               " tokens but the artifact was compiled for max_tokens " +
               std::to_string(maxTokens));
    if (maxLen >= 0 && int64_t(r.prompt_len) + r.max_new_tokens > maxLen)
      fail(K3_ERROR_INVALID_ARGUMENT,
           (n > 1 ? what + ": " : std::string()) + "prompt (" +
               std::to_string(r.prompt_len) + ") + max_new_tokens (" +
               std::to_string(r.max_new_tokens) + ") exceeds max_seq_len " +
               std::to_string(maxLen));
    total += int64_t(r.prompt_len);
    Seq q;
    q.prompt.assign(r.prompt, r.prompt + r.prompt_len);
    q.history = q.prompt;
    q.stops.assign(r.stop_tokens, r.stop_tokens + r.num_stop_tokens);
    q.params = r.sampling;
    q.maxNew = r.max_new_tokens;
    if (q.maxNew == 0)
      q.reason = K3_FINISH_LENGTH;
    seqs_.push_back(std::move(q));
  }
  if (maxTokens >= 0 && total > maxTokens)
    fail(K3_ERROR_INVALID_ARGUMENT,
         (n > 1 ? "the prompts have " : "prompt has ") + std::to_string(total) +
             " tokens" + (n > 1 ? " in all" : "") +
             " but the artifact was compiled for max_tokens " +
             std::to_string(maxTokens));
  if (!hasNumSeqs_ && n > 1)
    fail(K3_ERROR_INVALID_ARGUMENT,
         "the artifact has no num_seqs symbol: one sequence at a time");
  s_.resetState(-1);
}

int32_t Generation::sampleRow(Seq &q, uint64_t row) {
  DType dt;
  std::vector<int64_t> shape;
  // The row's dtype and the output's shape first (a zero-byte read).
  s_.readOutput("logits", 0, nullptr, 0, &dt, &shape);
  if (shape.size() != 2 || shape[1] != vocab_)
    fail(K3_ERROR_FORMAT,
         "output 'logits' is not [num_tokens or num_seqs, vocab_size " +
             std::to_string(vocab_) + "]");
  if (int64_t(row) >= shape[0])
    fail(K3_ERROR_INTERNAL,
         "logits row " + std::to_string(row) + " out of range");
  size_t es = dtypeSize(dt);
  raw_.resize(size_t(vocab_) * es);
  s_.readOutput("logits", row * uint64_t(vocab_) * es, raw_.data(),
                raw_.size());
  row_.resize(size_t(vocab_));
  if (dt != DType::F32 && dt != DType::BF16 && dt != DType::F16)
    fail(K3_ERROR_FORMAT, "output 'logits' has dtype " +
                              std::string(dtypeName(dt)) +
                              ", expected a float dtype");
  for (int64_t j = 0; j < vocab_; ++j)
    row_[size_t(j)] = loadFloat(dt, raw_.data(), size_t(j));
  int32_t t = sampleToken(row_.data(), vocab_, q.params, q.history.data(),
                          q.history.size(), q.generated.size());
  q.generated.push_back(t);
  q.history.push_back(t);
  for (int32_t st : q.stops)
    if (st == t)
      q.reason = K3_FINISH_STOP_TOKEN;
  if (q.reason == K3_FINISH_NONE && int64_t(q.generated.size()) >= q.maxNew)
    q.reason = K3_FINISH_LENGTH;
  return t;
}

void Generation::runStep(bool prefill) {
  const Artifact &a = s_.artifact();
  size_t n = seqs_.size();
  std::vector<int32_t> ids, pos, cu{0}, slots, ctx;
  for (size_t i = 0; i < n; ++i) {
    const Seq &q = seqs_[i];
    slots.push_back(int32_t(i));
    if (prefill) {
      for (size_t j = 0; j < q.prompt.size(); ++j) {
        ids.push_back(q.prompt[j]);
        pos.push_back(int32_t(j));
      }
      ctx.push_back(0);
    } else {
      // The last token, at the next position. A finished sequence stays in
      // the batch (same shapes: the launch graph keeps replaying) and
      // rewrites its last position; its logits are not read.
      int32_t last = q.generated.empty() ? q.prompt.back() : q.generated.back();
      int32_t p = int32_t(q.prompt.size() + q.generated.size()) - 1;
      if (q.generated.empty())
        p = int32_t(q.prompt.size()) - 1;
      ids.push_back(last);
      pos.push_back(p);
      ctx.push_back(p);
    }
    cu.push_back(int32_t(ids.size()));
  }
  int64_t nt = int64_t(ids.size()), ns = int64_t(n), ncu = ns + 1;
  const Entry &e = a.entries[size_t(prefill ? entryIdx_ : decodeIdx_)];
  std::vector<k3_host_tensor> in;
  for (const TensorSpec &t : e.inputs) {
    const std::string &nm = t.name;
    if (nm == "token_ids")
      in.push_back(
          {nm.c_str(), K3_DTYPE_I32, 1, &nt, ids.data(), ids.size() * 4});
    else if (nm == "positions")
      in.push_back(
          {nm.c_str(), K3_DTYPE_I32, 1, &nt, pos.data(), pos.size() * 4});
    else if (nm == "cu_seqlens")
      in.push_back(
          {nm.c_str(), K3_DTYPE_I32, 1, &ncu, cu.data(), cu.size() * 4});
    else if (nm == "seq_slots")
      in.push_back(
          {nm.c_str(), K3_DTYPE_I32, 1, &ns, slots.data(), slots.size() * 4});
    else if (nm == "context_lens")
      in.push_back(
          {nm.c_str(), K3_DTYPE_I32, 1, &ns, ctx.data(), ctx.size() * 4});
  }
  std::vector<k3_symbol_value> sv = {{"num_tokens", nt}};
  if (hasNumSeqs_)
    sv.push_back({"num_seqs", ns});
  s_.run(e.name, sv.data(), sv.size(), in.data(), in.size(),
         /*download=*/false);
}

void Generation::step(int32_t *tokens, size_t *active) {
  size_t n = seqs_.size();
  auto countActive = [&]() {
    size_t c = 0;
    for (const Seq &q : seqs_)
      c += q.reason == K3_FINISH_NONE;
    return c;
  };
  for (size_t i = 0; tokens && i < n; ++i)
    tokens[i] = -1;
  if (countActive() == 0) {
    if (active)
      *active = 0;
    return;
  }
  bool prefill = !started_;
  auto t0 = std::chrono::steady_clock::now();
  runStep(prefill);
  started_ = true;
  uint64_t row = 0;
  bool perSeq = lastRowsOnly_[prefill ? 0 : 1];
  for (size_t i = 0; i < n; ++i) {
    Seq &q = seqs_[i];
    row += prefill && !perSeq ? q.prompt.size() : 1;
    if (q.reason != K3_FINISH_NONE)
      continue;
    int32_t t = sampleRow(q, row - 1);
    if (tokens)
      tokens[i] = t;
  }
  if (prefill) {
    prefillMs += msSince(t0);
  } else {
    decodeMs += msSince(t0);
    ++decodeSteps;
  }
  if (active)
    *active = countActive();
}

void Generation::stop(size_t i) {
  if (i >= seqs_.size())
    fail(K3_ERROR_INVALID_ARGUMENT,
         "sequence " + std::to_string(i) + " out of range");
  if (seqs_[i].reason == K3_FINISH_NONE)
    seqs_[i].reason = K3_FINISH_CALLER;
}

k3_finish_reason Generation::finishReason(size_t i) const {
  return i < seqs_.size() ? seqs_[i].reason : K3_FINISH_NONE;
}

} // namespace rt
} // namespace k3
