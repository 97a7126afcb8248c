// Session::initRandomWeights: seeded random weights (k3/dtype.h), made by
// the artifact's weight-init kernels where the weights live, or on host
// threads and uploaded.
#include "session.h"

#include <cstdlib>
#include <cstring>

#include "k3/dtype.h"

namespace k3 {
namespace rt {

using namespace artifact;

namespace {

/// Threads per block and blocks per SM of a weight-init launch: a
/// grid-stride loop over the elements, enough blocks to keep every SM's
/// memory pipe busy.
constexpr int64_t kFillThreads = 256;
constexpr int64_t kFillBlocksPerSM = 8;

std::string fillKernelName(DType t) {
  return std::string("k3_weight_init_") + dtypeName(t);
}

/// Where K3_RANDOM_WEIGHTS asks the weights to be made; empty: the default.
std::string requestedPlace() {
  const char *v = std::getenv("K3_RANDOM_WEIGHTS");
  std::string p = v ? v : "";
  if (!p.empty() && p != "host" && p != "device")
    fail(K3_ERROR_INVALID_ARGUMENT,
         "K3_RANDOM_WEIGHTS must be 'host' or 'device', got '" + p + "'");
  return p;
}

} // namespace

bool Session::fillWeightOnDevice(size_t i, uint64_t seed) {
  const Artifact &a = *art_;
  const Weight &w = a.weights[i];
  std::string name = fillKernelName(w.dtype), err;
  void *fn = nullptr;
  for (size_t o = 0; o < a.objects.size() && !fn; ++o) {
    const auto &syms = a.objects[o].symbols;
    bool listed = false;
    for (const std::string &s : syms)
      listed |= s == name;
    if (listed && modules_[o] && !be_->getKernel(modules_[o], name, fn, err))
      fail(K3_ERROR_DEVICE, err);
  }
  if (!fn)
    return false;
  allocWeight(i);
  RandomInitRecipe r = randomInitRecipe(w, seed);
  uint64_t slots[5] = {weightPtr_[i], weightNumel(w), r.base, uint64_t(r.kind),
                       0};
  std::memcpy(&slots[4], &r.param, sizeof(double));
  // One more slot: the CPU backend passes its launch context there.
  void *params[6] = {&slots[0], &slots[1], &slots[2],
                     &slots[3], &slots[4], nullptr};
  int64_t blocks = int64_t((weightNumel(w) + kFillThreads - 1) / kFillThreads);
  bool cpu = ordinal_ < 0;
  int64_t grid[3] = {
      cpu ? 1
          : std::max<int64_t>(
                1, std::min(blocks, kFillBlocksPerSM * be_->smCount())),
      1, 1};
  int64_t block[3] = {cpu ? 1 : kFillThreads, 1, 1};
  if (!be_->launch(fn, name, grid, block, 0, params, 5, err))
    fail(K3_ERROR_DEVICE, "filling weight '" + w.name + "': " + err);
  weightLoaded_[i] = true;
  return true;
}

std::string Session::initRandomWeights(uint64_t seed) {
  if (leadsRanks()) {
    std::string place;
    forEachRank([&](Session &s) {
      std::string p = s.initRandomWeights(seed);
      if (&s == this)
        place = p;
    });
    return place;
  }
  std::string place = requestedPlace();
  if (place.empty())
    place = ordinal_ < 0 ? "host" : "device";
  bool anyOnDevice = false, anyOnHost = false;
  std::vector<uint8_t> host;
  for (size_t i = 0; i < art_->weights.size(); ++i) {
    // A shard is this rank's slice of the whole weight's values.
    if (place == "device" && !shardOf(i) && fillWeightOnDevice(i, seed)) {
      anyOnDevice = true;
      continue;
    }
    const Weight w = fullWeight(i);
    host.assign(weightBytes(w), 0);
    randomInit(w, seed, host.data(), weightNumel(w));
    if (shardOf(i)) {
      std::vector<uint8_t> local(weightBytes(art_->weights[i]));
      sliceWeight(i, host.data(), local.data());
      host.swap(local);
    }
    uploadWeight(i, host.data());
    anyOnHost = true;
  }
  std::string err;
  if (anyOnDevice && !be_->synchronize(err))
    fail(K3_ERROR_DEVICE, "filling weights: " + err);
  if (anyOnDevice && anyOnHost)
    return "device kernels and host threads";
  return anyOnDevice ? "device kernels" : "host threads";
}

} // namespace rt
} // namespace k3
