// Session: the ranks of a partitioned artifact (format 1.3,
// docs/scaling.md). Rank 0 makes the communicator and one session per other
// rank, and runs each public call on every rank at once; collectives meet in
// the communicator; a sharded weight is the rank's slice of the checkpoint
// tensor.
#include "session.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <system_error>
#include <thread>

namespace k3 {
namespace rt {

using namespace artifact;

namespace {
/// "tp=2 ep=1 cp=1": how the device name states a partition.
std::string splitName(const Partition &p) {
  return "tp=" + std::to_string(p.tp) + " ep=" + std::to_string(p.ep) +
         " cp=" + std::to_string(p.cp);
}
} // namespace

std::unique_ptr<Session> Session::mpiRank(std::shared_ptr<const Artifact> art,
                                          const std::string &device) {
  if (device != "cpu" && device.rfind("cuda", 0) != 0)
    fail(K3_ERROR_INVALID_ARGUMENT,
         "invalid device '" + device + "' (expected cpu, cuda or cuda:N)");
  uint32_t rank = 0;
  std::string err;
  std::shared_ptr<Communicator> comm = makeMpiCommunicator(rank, err);
  if (!comm)
    fail(K3_ERROR_INVALID_ARGUMENT, "MPI: " + err);
  uint32_t world = partitionOf(*art).world();
  if (comm->worldSize() != world) {
    // Every process fails alike; the launcher ends the job.
    fail(K3_ERROR_INVALID_ARGUMENT,
         "the artifact is partitioned over " + std::to_string(world) +
             " ranks, the MPI job has " + std::to_string(comm->worldSize()) +
             " processes (mpirun -np " + std::to_string(world) + ")");
  }
  if (device != "cpu")
    return ncclProcessRank(std::move(art), device, rank, world,
                           std::move(comm));
  std::unique_ptr<Session> s(
      new Session(std::move(art), device, rank, std::move(comm)));
  s->ownProcess_ = true;
  s->deviceName_ += " (rank " + std::to_string(rank) + " of " +
                    std::to_string(world) + ", " + splitName(s->partition_) +
                    ", MPI, a process each)";
  return s;
}

std::unique_ptr<Session>
Session::ncclProcessRank(std::shared_ptr<const Artifact> art,
                         const std::string &device, uint32_t rank,
                         uint32_t world, std::shared_ptr<Communicator> mpi) {
  // The process's GPU: cuda:N plus its rank on this node (Open MPI's
  // OMPI_COMM_WORLD_LOCAL_RANK; the world rank where the launcher sets
  // none), as one process a GPU of a node.
  int base = cudaOrdinal(device);
  const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  int ordinal = base + (local && *local ? std::atoi(local) : int(rank));
  std::string err, name = "cuda:" + std::to_string(ordinal);
  // NCCL makes the rank's communicator on the current device.
  std::unique_ptr<Backend> gpu = createCudaBackend(ordinal, err);
  if (!gpu || !gpu->makeCurrent(err))
    fail(K3_ERROR_NO_DEVICE,
         "MPI rank " + std::to_string(rank) + " needs " + name + ": " + err);
  auto share = [&](void *bytes, size_t n) {
    return mpiShareFromRankZero(*mpi, bytes, n);
  };
  std::shared_ptr<Communicator> nccl =
      makeNcclRankCommunicator(rank, world, share, err);
  if (!nccl)
    fail(K3_ERROR_NO_DEVICE, "MPI rank " + std::to_string(rank) + ": " + err);
  std::unique_ptr<Session> s(
      new Session(std::move(art), name, rank, std::move(nccl)));
  s->ownProcess_ = true;
  s->launcher_ = std::move(mpi); // MPI stays initialised while it runs
  s->deviceName_ += " (rank " + std::to_string(rank) + " of " +
                    std::to_string(world) + ", " + splitName(s->partition_) +
                    ", NCCL, a process each under MPI)";
  return s;
}

void Session::createRanks(const std::string &device) {
  partition_ = partitionOf(*art_);
  uint32_t world = partition_.world();
  // A rank given its communicator (an MPI process, or a peer of rank 0)
  // makes no peers.
  if (comm_)
    return;
  // An SPMD program of one rank (its collectives copies) still needs a
  // communicator: k3-compile spmd=1 checks that path on one device.
  if ((world == 1 && art_->collectives.empty()) || rank_ != 0)
    return;
  std::string split = splitName(partition_);
  // Rank r runs on the device r after this one's (cuda:N, cuda:N+1, ...).
  // What `k3-run` prints as the device names the ranks.
  std::string err;
  if (ordinal_ >= 0) {
    std::vector<int> devices;
    for (uint32_t r = 0; r < world; ++r)
      devices.push_back(ordinal_ + int(r));
    // Every rank's GPU must exist before NCCL is asked to span them.
    for (uint32_t r = 1; r < world; ++r)
      if (!createCudaBackend(devices[r], err))
        fail(K3_ERROR_NO_DEVICE,
             "the artifact is partitioned over " + std::to_string(world) +
                 " ranks (" + split + "): rank " + std::to_string(r) +
                 " needs cuda:" + std::to_string(devices[r]) + ": " + err);
    comm_ = makeNcclCommunicator(devices, err);
    if (!comm_)
      fail(K3_ERROR_NO_DEVICE, "the artifact is partitioned over " +
                                   std::to_string(world) + " ranks (" + split +
                                   "): " + err);
    deviceName_ += " (" + std::to_string(world) + " ranks, " + split +
                   ", NCCL, a thread each)";
  } else {
    comm_ = makeHostCommunicator(world);
    deviceName_ +=
        " (" + std::to_string(world) + " ranks, " + split + ", a thread each)";
  }
  for (uint32_t r = 1; r < world; ++r) {
    std::string peer =
        ordinal_ >= 0 ? "cuda:" + std::to_string(ordinal_ + int(r)) : device;
    peers_.push_back(
        std::unique_ptr<Session>(new Session(art_, peer, r, comm_)));
  }
}

namespace {

/// What each rank of a fan-out ended with.
struct RankOutcomes {
  explicit RankOutcomes(size_t n) : errors(n), aborted(n, false) {}
  std::vector<std::optional<Error>> errors;
  std::vector<bool> aborted;
  /// The first rank's own failure, else the first woken by another's.
  void rethrow() const {
    for (int pass = 0; pass < 2; ++pass)
      for (size_t r = 0; r < errors.size(); ++r)
        if (errors[r] && (pass == 1 || !aborted[r]))
          throw *errors[r];
  }
};

/// Runs `fn` for a rank, its exceptions kept as the rank's error (one
/// escaping a thread, or rank 0's while the other threads still run, would
/// end the process); `failed` records one.
void runRank(Session &rank, Backend &be,
             const std::function<void(Session &)> &fn,
             const std::function<void(const Error &)> &failed) {
  try {
    std::string err;
    if (!be.makeCurrent(err))
      fail(K3_ERROR_DEVICE, err);
    fn(rank);
  } catch (const Error &e) {
    failed(e);
  } catch (const std::bad_alloc &) {
    failed({K3_ERROR_INTERNAL, "out of host memory"});
  } catch (const std::exception &e) {
    failed({K3_ERROR_INTERNAL, std::string("internal error: ") + e.what()});
  }
}

} // namespace

void Session::forEachRank(const std::function<void(Session &)> &fn) {
  std::vector<Session *> ranks{this};
  for (auto &p : peers_)
    ranks.push_back(p.get());
  RankOutcomes out(ranks.size());
  auto failed = [&](size_t r, const Error &e) {
    // A rank woken by another's failure reports that, not a cause.
    out.aborted[r] = e.message.find("another rank failed") != std::string::npos;
    out.errors[r] = e;
    comm_->abort("rank " + std::to_string(r) + ": " + e.message);
  };
  auto body = [&](size_t r) {
    runRank(*ranks[r], *ranks[r]->be_, fn,
            [&](const Error &e) { failed(r, e); });
  };
  // Every thread started is joined before this returns or throws; a thread
  // that cannot start is its rank's error (the others stop at their next
  // collective).
  fanningOut_ = true;
  std::vector<std::thread> threads;
  for (size_t r = 1; r < ranks.size(); ++r) {
    try {
      threads.emplace_back(body, r);
    } catch (const std::system_error &e) {
      failed(r, {K3_ERROR_INTERNAL, "cannot start the thread of rank " +
                                        std::to_string(r) + ": " + e.what()});
      break;
    }
  }
  if (threads.size() + 1 == ranks.size())
    body(0);
  for (auto &t : threads)
    t.join();
  fanningOut_ = false;
  comm_->reset();
  out.rethrow();
}

void Session::runCollective(const Entry &e, size_t li,
                            const std::vector<int64_t> &sv) {
  const Launch &l = e.launches[li];
  const Collective &c = art_->collectives[size_t(l.args[2].imm)];
  std::string where = "entry '" + e.name + "' launch " + std::to_string(li) +
                      " (" + collectiveName(c.kind) + " over " + c.group + ")";
  int64_t outer = 0, chunk = 0;
  std::string err;
  if (!evalDim(c.outer, sv.data(), sv.size(), outer, err) ||
      !evalDim(c.chunk, sv.data(), sv.size(), chunk, err))
    fail(K3_ERROR_INVALID_ARGUMENT, where + ": " + err);
  if (!comm_)
    fail(K3_ERROR_INVALID_ARGUMENT, where + ": no communicator");
  uint32_t members = partition_.size(c.group);
  if (c.kind == CollectiveKind::AllToAll && members > 0 &&
      chunk % int64_t(members) != 0)
    fail(K3_ERROR_INVALID_ARGUMENT,
         where + ": rows of " + std::to_string(chunk) +
             " elements do not split into " + std::to_string(members) +
             " equal shards");
  // A host communicator reads what the kernels before it wrote.
  if (comm_->waitsOnHost() && !be_->synchronize(err))
    fail(K3_ERROR_DEVICE, where + ": " + err);
  CollectiveCall call;
  call.collective = &c;
  call.partition = partition_;
  call.rank = rank_;
  call.in = bufPtr_[l.args[0].index] + l.args[0].offset;
  call.out = bufPtr_[l.args[1].index] + l.args[1].offset;
  call.outer = uint64_t(std::max<int64_t>(outer, 0));
  call.chunk = uint64_t(std::max<int64_t>(chunk, 0));
  if (!comm_->run(call, err))
    fail(K3_ERROR_DEVICE, where + ": " + err);
}

const WeightShard *Session::shardOf(size_t i) const {
  for (const WeightShard &s : art_->weightShards)
    if (s.weight == i)
      return &s;
  return nullptr;
}

Weight Session::fullWeight(size_t i) const {
  Weight w = art_->weights[i];
  if (const WeightShard *s = shardOf(i))
    w.shape[s->dim] = int64_t(s->extent);
  return w;
}

void Session::sliceWeight(size_t i, const uint8_t *full, uint8_t *local) const {
  const Weight &w = art_->weights[i];
  const WeightShard *s = shardOf(i);
  uint32_t index = partition_.rankIn(s->group, rank_);
  auto copy = [](const ShardSlice &slice, size_t bytes, const uint8_t *from,
                 uint8_t *to) {
    for (uint64_t o = 0; o < slice.outer; ++o)
      std::memcpy(to + o * slice.localInner * bytes,
                  from + (o * slice.fullInner + slice.offset) * bytes,
                  slice.localInner * bytes);
  };
  if (w.dtype != DType::MXFP4) {
    copy(shardSlice(w, *s, index), dtypeSize(w.dtype), full, local);
    return;
  }
  // MXFP4: the codes of every element, then the scales, in both the whole
  // weight and the rank's; each region sliced on its own.
  uint64_t localCodes = weightNumel(w) / 2,
           fullCodes = localCodes / uint64_t(w.shape[s->dim]) * s->extent;
  copy(mxfp4RegionSlice(w, *s, index, 2), 1, full, local);
  copy(mxfp4RegionSlice(w, *s, index, kMXFP4Block), 1, full + fullCodes,
       local + localCodes);
}

ShardSlice mxfp4RegionSlice(const Weight &local, const WeightShard &s,
                            uint32_t index, uint64_t per) {
  Weight region = local;
  region.shape.back() /= int64_t(per);
  WeightShard bytes = s;
  if (s.dim + 1 == local.shape.size())
    bytes.extent = s.extent / per;
  return shardSlice(region, bytes, index);
}

ShardSlice shardSlice(const Weight &local, const WeightShard &s,
                      uint32_t index) {
  ShardSlice r;
  r.outer = 1;
  for (uint32_t d = 0; d < s.dim; ++d)
    r.outer *= uint64_t(local.shape[d]);
  uint64_t after = 1;
  for (size_t d = s.dim + 1; d < local.shape.size(); ++d)
    after *= uint64_t(local.shape[d]);
  r.localInner = uint64_t(local.shape[s.dim]) * after;
  r.fullInner = s.extent * after;
  r.offset = r.localInner * index;
  return r;
}

} // namespace rt
} // namespace k3
