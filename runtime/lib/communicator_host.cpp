// The host communicator (communicator.h): the ranks are threads of this
// process on the CPU target, each collective a rendezvous of its group
// instance's members in shared memory.
#include "communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "k3/dtype.h"

namespace k3 {
namespace rt {
namespace {

using namespace artifact;

/// The members of one group instance: where each put its input, and a
/// barrier that counts generations (so that one rank's next collective
/// cannot pass a barrier that others are still leaving).
struct Rendezvous {
  std::vector<const uint8_t *> inputs;
  uint32_t arrived = 0;
  uint64_t generation = 0;
};

class HostCommunicator : public Communicator {
public:
  explicit HostCommunicator(uint32_t world) : world_(world) {}
  uint32_t worldSize() const override { return world_; }

  bool run(const CollectiveCall &call, std::string &err) override {
    const Collective &c = *call.collective;
    const Partition &p = call.partition;
    uint32_t n = p.size(c.group), me = p.rankIn(c.group, call.rank);
    uint32_t first = p.memberRank(c.group, call.rank, 0);
    std::string key = c.group + "/" + std::to_string(first);
    std::unique_lock<std::mutex> lock(mu_);
    Rendezvous &r = groups_[key];
    r.inputs.resize(n);
    r.inputs[me] = reinterpret_cast<const uint8_t *>(call.in);
    if (!barrier(r, n, lock, err))
      return false;
    // Every input is in place and none changes until the second barrier:
    // each rank computes its own output from all of them.
    lock.unlock();
    computeCollective(call, r.inputs, me, n);
    lock.lock();
    return barrier(r, n, lock, err);
  }

  void abort(const std::string &why) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_.empty())
      aborted_ = why.empty() ? "a rank failed" : why;
    cv_.notify_all();
  }

  void reset() override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.clear();
    groups_.clear();
  }

private:
  bool barrier(Rendezvous &r, uint32_t n, std::unique_lock<std::mutex> &lock,
               std::string &err) {
    uint64_t gen = r.generation;
    if (++r.arrived == n) {
      r.arrived = 0;
      ++r.generation;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return r.generation != gen || !aborted_.empty(); });
    }
    if (!aborted_.empty()) {
      err = "another rank failed: " + aborted_;
      return false;
    }
    return true;
  }

  const uint32_t world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Rendezvous> groups_;
  std::string aborted_;
};

} // namespace

void computeCollective(const CollectiveCall &call,
                       const std::vector<const uint8_t *> &in, uint32_t me,
                       uint32_t n) {
  const Collective &c = *call.collective;
  uint8_t *out = reinterpret_cast<uint8_t *>(call.out);
  const uint64_t outer = call.outer, chunk = call.chunk;
  // Element `i` of every member's input, reduced in rank order and
  // stored as element `o` of the output (i32: exactly, in 64 bits).
  auto reduceInto = [&](uint64_t i, uint64_t o) {
    bool sum = c.reduce == ReduceOp::Sum;
    if (c.dtype == DType::I32) {
      int64_t acc = reinterpret_cast<const int32_t *>(in[0])[i];
      for (uint32_t j = 1; j < n; ++j) {
        int64_t v = reinterpret_cast<const int32_t *>(in[j])[i];
        acc = sum ? acc + v : std::max(acc, v);
      }
      reinterpret_cast<int32_t *>(out)[o] = int32_t(acc);
      return;
    }
    float acc = loadFloat(c.dtype, in[0], i);
    for (uint32_t j = 1; j < n; ++j) {
      float v = loadFloat(c.dtype, in[j], i);
      acc = sum ? acc + v : std::max(acc, v);
    }
    storeFloat(c.dtype, out, o, acc);
  };
  size_t bytes = dtypeSize(c.dtype);
  switch (c.kind) {
  case CollectiveKind::AllReduce:
    for (uint64_t i = 0; i < outer * chunk; ++i)
      reduceInto(i, i);
    break;
  case CollectiveKind::AllGather:
    for (uint64_t o = 0; o < outer; ++o)
      for (uint32_t j = 0; j < n; ++j)
        std::memcpy(out + ((o * n + j) * chunk) * bytes,
                    in[j] + (o * chunk) * bytes, chunk * bytes);
    break;
  case CollectiveKind::ReduceScatter:
    for (uint64_t o = 0; o < outer; ++o)
      for (uint64_t k = 0; k < chunk; ++k)
        reduceInto((o * n + me) * chunk + k, o * chunk + k);
    break;
  case CollectiveKind::AllToAll: {
    // Member j's shard `me` of every row, at slot j (the session checked
    // that n divides chunk).
    uint64_t shard = chunk / n;
    for (uint64_t o = 0; o < outer; ++o)
      for (uint32_t j = 0; j < n; ++j)
        std::memcpy(out + (o * chunk + j * shard) * bytes,
                    in[j] + (o * chunk + me * shard) * bytes, shard * bytes);
    break;
  }
  }
}

std::shared_ptr<Communicator> makeHostCommunicator(uint32_t worldSize) {
  return std::make_shared<HostCommunicator>(worldSize);
}

} // namespace rt
} // namespace k3
