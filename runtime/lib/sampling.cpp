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
  bool anyNan = false; // one vectorisable pass; the column only if needed
  for (int64_t j = 0; j < vocab; ++j)
    anyNan |= logits[j] != logits[j];
  if (anyNan)
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
  // The maximum (a vectorisable reduction: no NaN here), then its first
  // column.
  float mx = l[0];
  for (int64_t j = 1; j < vocab; ++j)
    mx = l[j] > mx ? l[j] : mx;
  int32_t best = 0;
  while (l[best] != mx)
    ++best;
  if (p.temperature == 0.0f || p.top_k == 1 || l[best] == -INFINITY)
    return best;

  const double lmax = l[best], invT = 1.0 / double(p.temperature);
  // Candidates (ids) and their weights exp((l - lmax) / T) (the best: 1).
  std::vector<int32_t> ids;
  if (p.top_k > 0 && p.top_k < vocab) {
    // top-k: the k best (ties to the lower id), in id order.
    std::vector<Cand> c(static_cast<size_t>(vocab));
    for (int64_t j = 0; j < vocab; ++j)
      c[size_t(j)] = {l[j], int32_t(j)};
    std::nth_element(c.begin(), c.begin() + p.top_k, c.end(), better);
    for (int32_t i = 0; i < p.top_k; ++i)
      ids.push_back(c[size_t(i)].id);
    std::sort(ids.begin(), ids.end());
  } else {
    ids.resize(size_t(vocab));
    for (int64_t j = 0; j < vocab; ++j)
      ids[size_t(j)] = int32_t(j);
  }
  std::vector<double> w(ids.size());
  double total = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    total += w[i] = std::exp((double(l[ids[i]]) - lmax) * invT);
  auto keepWhere = [&](auto &&pred) {
    size_t o = 0;
    for (size_t i = 0; i < ids.size(); ++i)
      if (pred(i)) {
        ids[o] = ids[i];
        w[o++] = w[i];
      }
    ids.resize(o);
    w.resize(o);
  };
  // top-p: the shortest prefix of the candidates by descending probability
  // (ties: lower id first) whose mass reaches top_p. Only candidates of
  // weight >= eps are sorted, for an eps whose candidates already hold that
  // mass (then the prefix ends among them); eps = (1 - top_p) * total / n
  // always qualifies (all below it hold less than 1 - top_p).
  if (p.top_p < 1.0f) {
    const double want = double(p.top_p) * total;
    const double floorEps =
        (1.0 - double(p.top_p)) * total / double(ids.size());
    double eps = 0.1;
    for (;; eps *= 0.01) {
      if (eps <= floorEps) {
        eps = floorEps;
        break;
      }
      double mass = 0;
      for (double x : w)
        mass += x >= eps ? x : 0.0;
      if (mass >= want)
        break;
    }
    std::vector<size_t> order;
    for (size_t i = 0; i < ids.size(); ++i)
      if (w[i] >= eps)
        order.push_back(i);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return better({l[ids[a]], ids[a]}, {l[ids[b]], ids[b]});
    });
    std::vector<bool> keep(ids.size(), false);
    double cum = 0;
    for (size_t i : order) {
      keep[i] = true;
      cum += w[i];
      if (cum >= want)
        break;
    }
    keepWhere([&](size_t i) { return keep[i]; });
  }
  // min-p: relative to the most probable token (weight 1).
  if (p.min_p > 0.0f)
    keepWhere([&](size_t i) { return w[i] >= double(p.min_p); });
  total = 0;
  for (double x : w)
    total += x;
  double target = samplingUniform(p.seed, p.stream, step) * total, cum = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    cum += w[i];
    if (cum > target)
      return ids[i];
  }
  // Rounding left the target past the last positive weight.
  for (size_t i = ids.size(); i-- > 0;)
    if (w[i] > 0)
      return ids[i];
  return best;
}

} // namespace rt
} // namespace k3
