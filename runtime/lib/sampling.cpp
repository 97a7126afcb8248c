// Next-token sampling: repetition penalty, greedy, temperature, top-k,
// top-p, min-p, with a counter-based RNG (Philox4x32-10) so a sequence's
// tokens depend only on its logits, its seed, its stream and the step.
#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "session.h"

namespace k3 {
namespace rt {

void philox4x32(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

double samplingUniform(uint64_t seed, uint64_t stream, uint64_t step) {
  uint32_t ctr[4] = {uint32_t(step), uint32_t(step >> 32), uint32_t(stream),
                     uint32_t(stream >> 32)};
  uint32_t key[2] = {uint32_t(seed), uint32_t(seed >> 32)};
  uint32_t r[4];
  philox4x32(ctr, key, r);
  uint64_t bits = (uint64_t(r[0]) << 32 | r[1]) >> 11;
  return double(bits) * 0x1.0p-53;
}

k3_sampling_params defaultSamplingParams() {
  k3_sampling_params p;
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  p.seed = 0;
  p.stream = 0;
  return p;
}

void validateSamplingParams(const k3_sampling_params &p,
                            const std::string &what) {
  auto bad = [&](const std::string &field, double v, const char *want) {
    fail(K3_ERROR_INVALID_ARGUMENT, what + ": " + field + " = " +
                                        std::to_string(v) + " (expected " +
                                        want + ")");
  };
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    bad("temperature", p.temperature, ">= 0; 0 is greedy");
  if (p.top_k < 0)
    bad("top_k", p.top_k, ">= 0; 0 is off");
  if (!(p.top_p > 0 && p.top_p <= 1))
    bad("top_p", p.top_p, "in (0, 1]; 1 is off");
  if (!(p.min_p >= 0 && p.min_p <= 1))
    bad("min_p", p.min_p, "in [0, 1]; 0 is off");
  if (!std::isfinite(p.repetition_penalty) || !(p.repetition_penalty > 0))
    bad("repetition_penalty", p.repetition_penalty, "> 0; 1 is off");
}

namespace {
struct Cand {
  float v;
  int32_t id;
};
// Strict total order: larger logit first, then the lower id.
inline bool better(const Cand &a, const Cand &b) {
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}
} // namespace

int32_t sampleToken(const float *logits, int64_t vocab,
                    const k3_sampling_params &p, const int32_t *history,
                    size_t numHistory, uint64_t step) {
  if (vocab <= 0 || vocab > INT32_MAX)
    fail(K3_ERROR_INVALID_ARGUMENT,
         "sampling: vocabulary size " + std::to_string(vocab));
  if (!logits)
    fail(K3_ERROR_INVALID_ARGUMENT, "sampling: logits is NULL");
  for (int64_t j = 0; j < vocab; ++j)
    if (std::isnan(logits[j]))
      fail(K3_ERROR_INVALID_ARGUMENT,
           "logits contain NaN at column " + std::to_string(j));
  const float *l = logits;
  std::vector<float> penalised;
  if (p.repetition_penalty != 1.0f && numHistory) {
    penalised.assign(logits, logits + vocab);
    std::vector<bool> seen(size_t(vocab), false);
    for (size_t i = 0; i < numHistory; ++i) {
      int32_t t = history[i];
      if (t < 0 || t >= vocab || seen[size_t(t)])
        continue;
      seen[size_t(t)] = true;
      float &x = penalised[size_t(t)];
      x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    }
    l = penalised.data();
  }
  // Greedy: the first (lowest-id) maximum, as k3-run's argmax always did.
  int32_t best = 0;
  for (int64_t j = 1; j < vocab; ++j)
    if (l[j] > l[best])
      best = int32_t(j);
  if (p.temperature == 0.0f || p.top_k == 1 || l[best] == -INFINITY)
    return best;

  const double lmax = l[best], invT = 1.0 / double(p.temperature);
  auto weight = [&](float v) { return std::exp((double(v) - lmax) * invT); };
  std::vector<Cand> c(static_cast<size_t>(vocab));
  for (int64_t j = 0; j < vocab; ++j)
    c[size_t(j)] = {l[j], int32_t(j)};
  // top-k: the k best candidates (ties to the lower id), in id order.
  if (p.top_k > 0 && p.top_k < vocab) {
    std::nth_element(c.begin(), c.begin() + p.top_k, c.end(), better);
    c.resize(size_t(p.top_k));
    std::sort(c.begin(), c.end(),
              [](const Cand &a, const Cand &b) { return a.id < b.id; });
  }
  double total = 0;
  for (const Cand &x : c)
    total += weight(x.v);
  // top-p: the shortest prefix of the candidates by descending probability
  // whose mass reaches top_p; sorted in growing blocks (the nucleus is
  // usually far smaller than the vocabulary).
  if (p.top_p < 1.0f) {
    double want = double(p.top_p) * total, cum = 0;
    size_t sorted = 0, keep = c.size();
    for (size_t m = std::min<size_t>(c.size(), 64);;
         m = std::min(c.size(), m * 4)) {
      std::partial_sort(c.begin() + long(sorted), c.begin() + long(m), c.end(),
                        better);
      for (; sorted < m; ++sorted) {
        cum += weight(c[sorted].v);
        if (cum >= want) {
          keep = sorted + 1;
          break;
        }
      }
      if (keep != c.size() || m == c.size())
        break;
    }
    c.resize(keep);
  }
  // min-p: relative to the most probable token (weight 1).
  if (p.min_p > 0.0f) {
    size_t o = 0;
    for (size_t i = 0; i < c.size(); ++i)
      if (weight(c[i].v) >= double(p.min_p))
        c[o++] = c[i];
    c.resize(o);
  }
  total = 0;
  for (const Cand &x : c)
    total += weight(x.v);
  double target = samplingUniform(p.seed, p.stream, step) * total, cum = 0;
  for (const Cand &x : c) {
    cum += weight(x.v);
    if (cum > target)
      return x.id;
  }
  // Rounding left the target past the last positive weight.
  for (size_t i = c.size(); i-- > 0;)
    if (weight(c[i].v) > 0)
      return c[i].id;
  return best;
}

} // namespace rt
} // namespace k3
