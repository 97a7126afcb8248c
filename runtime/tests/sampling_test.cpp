// Sampler (k3_sample, runtime/lib/sampling.cpp) statistics on fixed logits
// with fixed seeds, and the generation loop (k3_generation_*) on the toy
// artifact.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "../lib/sampling.h"
#include "fixtures/toy_model.h"
#include "k3/k3_runtime.h"
#include "k3/safetensors.h"

namespace {

k3_sampling_params params(float temperature = 1.0f) {
  k3_sampling_params p;
  k3_sampling_params_init(&p);
  p.temperature = temperature;
  p.seed = 1234;
  return p;
}

int32_t sample(const std::vector<float> &l, const k3_sampling_params &p,
               uint64_t step, const std::vector<int32_t> &hist = {}) {
  int32_t t = -1;
  EXPECT_EQ(k3_sample(l.data(), int64_t(l.size()), &p, hist.data(), hist.size(),
                      step, &t),
            K3_OK)
      << k3_last_error();
  return t;
}

// Frequencies of n draws (steps 0..n-1).
std::vector<double> freqs(const std::vector<float> &l,
                          const k3_sampling_params &p, int n) {
  std::vector<double> f(l.size(), 0);
  for (int i = 0; i < n; ++i)
    f[size_t(sample(l, p, uint64_t(i)))] += 1.0 / n;
  return f;
}

// Logits whose softmax is `probs`.
std::vector<float> logitsOf(const std::vector<double> &probs) {
  std::vector<float> l;
  for (double q : probs)
    l.push_back(q > 0 ? float(std::log(q)) : -INFINITY);
  return l;
}

// |f - p| within 5 standard deviations of a binomial frequency.
void expectClose(const std::vector<double> &f, const std::vector<double> &p,
                 int n) {
  ASSERT_EQ(f.size(), p.size());
  for (size_t i = 0; i < f.size(); ++i) {
    double sd = std::sqrt(std::max(p[i] * (1 - p[i]), 1e-12) / n);
    EXPECT_NEAR(f[i], p[i], 5 * sd + 1e-9) << "token " << i;
  }
}

TEST(Philox, KnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  uint32_t zero[4] = {0, 0, 0, 0}, key0[2] = {0, 0}, out[4];
  k3::rt::philox4x32(zero, key0, out);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
  uint32_t pi[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
  uint32_t keyPi[2] = {0xa4093822u, 0x299f31d0u};
  k3::rt::philox4x32(pi, keyPi, out);
  EXPECT_EQ(out[0], 0xd16cfe09u);
  EXPECT_EQ(out[1], 0x94fdccebu);
  EXPECT_EQ(out[2], 0x5001e420u);
  EXPECT_EQ(out[3], 0x24126ea1u);
}

TEST(Sampling, GreedyIsArgmaxLowestIdOnTies) {
  k3_sampling_params p = params(0.0f);
  EXPECT_EQ(sample({1, 3, 3, 2}, p, 0), 1);
  EXPECT_EQ(sample({5, 1, 5}, p, 7), 0);
  EXPECT_EQ(sample({-INFINITY, -INFINITY}, p, 0), 0); // k3-run's argmax did so
  EXPECT_EQ(sample({-1, INFINITY, INFINITY}, p, 0), 1);
  // top_k = 1 is greedy too, whatever the temperature.
  k3_sampling_params k1 = params(5.0f);
  k1.top_k = 1;
  for (uint64_t s = 0; s < 50; ++s)
    EXPECT_EQ(sample({0, 2, 2, 1}, k1, s), 1);
}

TEST(Sampling, MatchesSoftmaxWithTemperature) {
  std::vector<double> probs = {0.4, 0.3, 0.2, 0.1};
  const int n = 20000;
  expectClose(freqs(logitsOf(probs), params(1.0f), n), probs, n);
  // T = 0.5 squares the probabilities (renormalised).
  std::vector<double> sq;
  double z = 0;
  for (double q : probs)
    z += q * q;
  for (double q : probs)
    sq.push_back(q * q / z);
  expectClose(freqs(logitsOf(probs), params(0.5f), n), sq, n);
}

TEST(Sampling, TopKNeverOutsideK) {
  std::vector<float> l;
  for (int j = 0; j < 100; ++j)
    l.push_back(float(std::sin(j * 1.7) * 3));
  std::vector<int> order(100);
  for (int j = 0; j < 100; ++j)
    order[size_t(j)] = j;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return l[size_t(a)] > l[size_t(b)] ||
           (l[size_t(a)] == l[size_t(b)] && a < b);
  });
  std::set<int> topk(order.begin(), order.begin() + 5), seen;
  k3_sampling_params p = params(2.0f);
  p.top_k = 5;
  for (uint64_t s = 0; s < 5000; ++s) {
    int t = sample(l, p, s);
    EXPECT_TRUE(topk.count(t)) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen, topk);
  // Ties at the boundary go to the lower id.
  p.top_k = 2;
  std::set<int> got;
  for (uint64_t s = 0; s < 500; ++s)
    got.insert(sample({1, 2, 1, 1}, p, s));
  EXPECT_EQ(got, (std::set<int>{0, 1}));
}

TEST(Sampling, TopPKeepsTheSmallestNucleus) {
  std::vector<double> probs = {0.05, 0.5, 0.15, 0.3};
  k3_sampling_params p = params(1.0f);
  p.top_p = 0.7f; // 0.5 < 0.7 <= 0.5 + 0.3: tokens 1 and 3
  const int n = 20000;
  expectClose(freqs(logitsOf(probs), p, n), {0, 0.5 / 0.8, 0, 0.3 / 0.8}, n);
  p.top_p = 0.4f; // the top token alone
  expectClose(freqs(logitsOf(probs), p, 2000), {0, 1, 0, 0}, 2000);
  // A large vocabulary (the nucleus grows past the first sorted block).
  std::vector<double> flat(1000, 1.0 / 1000);
  p.top_p = 0.5f;
  std::vector<double> f = freqs(logitsOf(flat), p, 3000);
  int used = 0;
  for (double x : f)
    used += x > 0;
  EXPECT_LE(used, 500);
  EXPECT_GT(used, 450);
  for (size_t j = 500; j < 1000; ++j) // equal logits: the lower ids first
    EXPECT_EQ(f[j], 0) << j;
}

TEST(Sampling, MinPDropsTheUnlikely) {
  std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  k3_sampling_params p = params(1.0f);
  p.min_p = 0.2f; // threshold 0.1: token 3 goes
  const int n = 20000;
  expectClose(freqs(logitsOf(probs), p, n),
              {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
}

TEST(Sampling, SeededDeterminism) {
  std::vector<float> l = logitsOf({0.25, 0.25, 0.25, 0.25});
  k3_sampling_params a = params(1.0f), b = params(1.0f);
  std::vector<int32_t> x, y, z, w;
  for (uint64_t s = 0; s < 64; ++s) {
    x.push_back(sample(l, a, s));
    y.push_back(sample(l, b, s));
  }
  EXPECT_EQ(x, y);
  b.seed = 4321;
  a.stream = 1;
  for (uint64_t s = 0; s < 64; ++s) {
    z.push_back(sample(l, b, s));
    w.push_back(sample(l, a, s));
  }
  EXPECT_NE(x, z); // another seed
  EXPECT_NE(x, w); // another stream
  EXPECT_EQ(k3::rt::samplingUniform(1, 2, 3), k3::rt::samplingUniform(1, 2, 3));
}

TEST(Sampling, RepetitionPenalty) {
  k3_sampling_params p = params(0.0f);
  p.repetition_penalty = 1.5f;
  // Positive logits are divided: 2 / 1.5 < 1.9.
  EXPECT_EQ(sample({2.0f, 1.9f, -1}, p, 0, {0}), 1);
  EXPECT_EQ(sample({2.0f, 1.9f, -1}, p, 0, {2, 2}), 0);
  // Negative logits are multiplied: -1 * 1.5 < -1.2.
  EXPECT_EQ(sample({-1.0f, -1.2f}, p, 0, {0}), 1);
  // Sampled: a penalised token becomes rarer.
  k3_sampling_params s = params(1.0f);
  std::vector<float> l = logitsOf({0.5, 0.5});
  double before = freqs(l, s, 4000)[0];
  s.repetition_penalty = 3.0f;
  double after = 0;
  for (int i = 0; i < 4000; ++i)
    after += sample(l, s, uint64_t(i), {0}) == 0 ? 1.0 / 4000 : 0;
  EXPECT_NEAR(before, 0.5, 0.05);
  // log(0.5) * 3 vs log(0.5): p0 = 0.25 / (0.25 + ... ) = 1/(1 + 4) = 0.2
  EXPECT_NEAR(after, 0.2, 0.05);
}

TEST(Sampling, Errors) {
  k3_sampling_params p = params(1.0f);
  int32_t t;
  std::vector<float> nan = {0, NAN};
  EXPECT_EQ(k3_sample(nan.data(), 2, &p, nullptr, 0, 0, &t),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error()).find("NaN at column 1"),
            std::string::npos);
  std::vector<float> ok = {0, 1};
  p.top_p = 0;
  EXPECT_EQ(k3_sample(ok.data(), 2, &p, nullptr, 0, 0, &t),
            K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error()).find("top_p"), std::string::npos);
  p = params(-1.0f);
  EXPECT_EQ(k3_sample(ok.data(), 2, &p, nullptr, 0, 0, &t),
            K3_ERROR_INVALID_ARGUMENT);
}

// --- the generation loop on the toy artifact (shift weights: after token i
// comes i + 1) ------------------------------------------------------------
struct Toy {
  k3_artifact *art = nullptr;
  k3_session *s = nullptr;
  Toy() {
    std::vector<uint8_t> bytes;
    std::string err;
    EXPECT_TRUE(
        k3::artifact::serialize(k3test::toyModel().artifact(), bytes, err))
        << err;
    EXPECT_EQ(k3_artifact_open_memory(bytes.data(), bytes.size(), &art), K3_OK);
    EXPECT_EQ(k3_session_create(art, "cpu", &s), K3_OK) << k3_last_error();
    const int V = k3test::kToyVocab;
    std::vector<float> w(V * V, 0.f);
    for (int i = 0; i < V; ++i)
      w[size_t(i * V + (i + 1) % V)] = 4.f;
    writeAndLoad(w);
  }
  void writeAndLoad(const std::vector<float> &w);
  ~Toy() {
    k3_session_destroy(s);
    k3_artifact_close(art);
  }
  // Runs a generation to the end; the tokens of each sequence.
  std::vector<std::vector<int32_t>>
  generate(const std::vector<k3_sequence_request> &reqs,
           k3_status *status = nullptr) {
    k3_generation *g = nullptr;
    std::vector<std::vector<int32_t>> out(reqs.size());
    k3_status st =
        k3_generation_start(s, nullptr, reqs.data(), reqs.size(), &g);
    if (status)
      *status = st;
    if (st != K3_OK)
      return out;
    size_t active = 1;
    std::vector<int32_t> t(reqs.size());
    while (active) {
      k3_status step = k3_generation_step(g, t.data(), &active);
      EXPECT_EQ(step, K3_OK) << k3_last_error();
      if (step != K3_OK) // a failed step does not end the generation
        break;
      for (size_t i = 0; i < t.size(); ++i)
        if (t[i] >= 0)
          out[i].push_back(t[i]);
    }
    reasons.clear();
    for (size_t i = 0; i < reqs.size(); ++i)
      reasons.push_back(k3_generation_finish_reason(g, i));
    k3_generation_destroy(g);
    return out;
  }
  std::vector<k3_finish_reason> reasons;
};

void Toy::writeAndLoad(const std::vector<float> &w) {
  // One file per test process: ctest runs the tests in parallel.
  std::string path = std::string(K3_TEST_TMPDIR) + "/sampling-toy-" +
                     std::to_string(::getpid()) + ".safetensors";
  std::string err;
  std::vector<k3::st::WriteTensor> ts = {
      {"embed.W", "F32", {16, 16}, w.data(), w.size() * 4}};
  ASSERT_TRUE(k3::st::write(path, ts, {}, err)) << err;
  const char *p = path.c_str();
  ASSERT_EQ(k3_session_load_weights(s, &p, 1), K3_OK) << k3_last_error();
}

k3_sequence_request request(const std::vector<int32_t> &prompt, int64_t n,
                            float temperature = 0.0f, uint64_t seed = 0) {
  k3_sequence_request r{};
  r.prompt = prompt.data();
  r.prompt_len = prompt.size();
  r.max_new_tokens = n;
  k3_sampling_params_init(&r.sampling);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

TEST(Generation, GreedyBatchOfDifferentLengths) {
  Toy toy;
  std::vector<int32_t> a = {1, 2, 3}, b = {9};
  auto out = toy.generate({request(a, 4), request(b, 2)});
  EXPECT_EQ(out[0], (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(out[1], (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(toy.reasons[0], K3_FINISH_LENGTH);
}

TEST(Generation, StopTokens) {
  Toy toy;
  std::vector<int32_t> a = {1}, stop = {3};
  k3_sequence_request r = request(a, 10);
  r.stop_tokens = stop.data();
  r.num_stop_tokens = 1;
  auto out = toy.generate({r});
  EXPECT_EQ(out[0], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(toy.reasons[0], K3_FINISH_STOP_TOKEN);
}

TEST(Generation, SeededAndIndependentOfTheBatch) {
  Toy toy;
  std::vector<int32_t> a = {1, 2}, b = {5, 6, 7};
  auto alone = toy.generate({request(a, 6, 1.0f, 42)});
  auto again = toy.generate({request(a, 6, 1.0f, 42)});
  EXPECT_EQ(alone, again);
  auto batch = toy.generate({request(a, 6, 1.0f, 42), request(b, 6, 1.0f, 7)});
  EXPECT_EQ(batch[0], alone[0]);
  auto other = toy.generate({request(a, 6, 1.0f, 43)});
  auto greedy = toy.generate({request(a, 6)});
  EXPECT_TRUE(other[0] != alone[0] || alone[0] != greedy[0]);
}

TEST(Generation, Errors) {
  Toy toy;
  std::vector<int32_t> big = {1, 99}, longp(9, 1), a = {1};
  k3_status st;
  toy.generate({request(big, 2)}, &st);
  EXPECT_EQ(st, K3_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(k3_last_error())
                .find("prompt token 1 = 99 is out of range for vocab_size 16"),
            std::string::npos);
  toy.generate({request(longp, 2)}, &st);
  EXPECT_NE(std::string(k3_last_error())
                .find("prompt has 9 tokens but the artifact was compiled for "
                      "max_tokens 8"),
            std::string::npos);
  toy.generate({request(a, 1), request(a, 1), request(a, 1)}, &st);
  EXPECT_NE(std::string(k3_last_error())
                .find("3 sequences but the artifact "
                      "was compiled for max_seqs 2"),
            std::string::npos);
  k3_sequence_request r = request(a, 2, 1.0f);
  r.sampling.top_p = 2.0f;
  toy.generate({r}, &st);
  EXPECT_NE(std::string(k3_last_error()).find("top_p"), std::string::npos);
}

} // namespace
