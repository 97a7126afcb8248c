// The NCCL communicator (communicator.h): the ranks are this process's GPUs,
// one thread each, their communicators made together by ncclCommInitAll, or
// one rank per process (an MPI job), its communicator made by
// ncclCommInitRank from rank 0's unique id. A group narrower than the world
// (TP inside EP or CP) gets a communicator split from the world's.
// libnccl is loaded at run time, like libcuda, so the runtime links neither;
// K3_NCCL_LIB names another library file. NVLink multicast (NVLS) is off
// unless NCCL_NVLS_ENABLE is set: the machines here do not have it.
#include "communicator.h"

#include <algorithm>
#include <cstdlib>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "k3/dtype.h"

namespace k3 {
namespace rt {
namespace {

using namespace artifact;

typedef struct ncclComm *ncclComm_t;
typedef int ncclResult_t; // 0: ncclSuccess
struct NcclUniqueId {
  char internal[128]; // NCCL_UNIQUE_ID_BYTES
};
// nccl.h's enumerations (stable across NCCL 2.x).
enum : int {
  ncclInt32 = 2,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclBfloat16 = 9
};
enum : int { ncclSum = 0, ncclMax = 2 };

struct Nccl {
  void *lib = nullptr;
  ncclResult_t (*commInitAll)(ncclComm_t *, int, const int *) = nullptr;
  ncclResult_t (*getUniqueId)(NcclUniqueId *) = nullptr;
  ncclResult_t (*commInitRank)(ncclComm_t *, int, NcclUniqueId, int) = nullptr;
  ncclResult_t (*commSplit)(ncclComm_t, int, int, ncclComm_t *,
                            void *) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*allReduce)(const void *, void *, size_t, int, int, ncclComm_t,
                            void *) = nullptr;
  ncclResult_t (*allGather)(const void *, void *, size_t, int, ncclComm_t,
                            void *) = nullptr;
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, int, int,
                                ncclComm_t, void *) = nullptr;
  ncclResult_t (*send)(const void *, size_t, int, int, ncclComm_t,
                       void *) = nullptr;
  ncclResult_t (*recv)(void *, size_t, int, int, ncclComm_t, void *) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
  const char *(*errorString)(ncclResult_t) = nullptr;

  bool load(std::string &err) {
    const char *path = std::getenv("K3_NCCL_LIB");
    const char *name = path && *path ? path : "libnccl.so.2";
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *why = dlerror();
      err = std::string("cannot load NCCL (") + name +
            "): " + (why ? why : "unknown error") +
            "; set K3_NCCL_LIB to libnccl.so.2's path";
      return false;
    }
    auto sym = [&](auto &fn, const char *s) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(lib, s));
      if (!fn)
        err = std::string(name) + " has no " + s +
              " (NCCL 2.18 or later is needed)";
      return fn != nullptr;
    };
    return sym(commInitAll, "ncclCommInitAll") &&
           sym(getUniqueId, "ncclGetUniqueId") &&
           sym(commInitRank, "ncclCommInitRank") &&
           sym(commSplit, "ncclCommSplit") &&
           sym(commDestroy, "ncclCommDestroy") &&
           sym(allReduce, "ncclAllReduce") && sym(allGather, "ncclAllGather") &&
           sym(reduceScatter, "ncclReduceScatter") && sym(send, "ncclSend") &&
           sym(recv, "ncclRecv") && sym(groupStart, "ncclGroupStart") &&
           sym(groupEnd, "ncclGroupEnd") &&
           sym(errorString, "ncclGetErrorString");
  }
  std::string why(ncclResult_t r) const {
    return errorString ? errorString(r) : "NCCL error " + std::to_string(r);
  }
};

int ncclType(DType t) {
  switch (t) {
  case DType::BF16:
    return ncclBfloat16;
  case DType::F16:
    return ncclFloat16;
  case DType::I32:
    return ncclInt32;
  default:
    return ncclFloat32;
  }
}

int ncclOp(const Collective &c) {
  return c.reduce == ReduceOp::Sum ? int(ncclSum) : int(ncclMax);
}

/// Operations NCCL fuses per group call: a gather of many rows is issued in
/// batches of this many.
constexpr uint64_t kOpsPerGroup = 256;

class NcclCommunicator : public Communicator {
public:
  explicit NcclCommunicator(Nccl nccl, uint32_t world)
      : nccl_(nccl), world_(world) {}
  ~NcclCommunicator() override {
    for (auto &[key, c] : groups_)
      if (c)
        nccl_.commDestroy(c);
    for (auto &[rank, c] : comms_)
      if (c)
        nccl_.commDestroy(c);
  }
  /// Every rank of the world in this process, rank r on devices[r].
  bool initAll(const std::vector<int> &devices, std::string &err) {
    std::vector<ncclComm_t> comms(devices.size(), nullptr);
    ncclResult_t r =
        nccl_.commInitAll(comms.data(), int(devices.size()), devices.data());
    if (r != 0) {
      err = "ncclCommInitAll over " + std::to_string(devices.size()) +
            " GPUs: " + nccl_.why(r);
      return false;
    }
    for (size_t i = 0; i < comms.size(); ++i)
      comms_[uint32_t(i)] = comms[i];
    return true;
  }
  /// This process's one rank of the world, from rank 0's unique id (the
  /// caller's `id`, exchanged by the launcher); the caller has made the
  /// rank's device current.
  bool initRank(uint32_t rank, const NcclUniqueId &id, std::string &err) {
    ncclComm_t c = nullptr;
    ncclResult_t r = nccl_.commInitRank(&c, int(world_), id, int(rank));
    if (r != 0) {
      err = "ncclCommInitRank (rank " + std::to_string(rank) + " of " +
            std::to_string(world_) + "): " + nccl_.why(r);
      return false;
    }
    comms_[rank] = c;
    return true;
  }
  uint32_t worldSize() const override { return world_; }

  /// Enqueues the collective on the rank's stream, after its kernels.
  bool run(const CollectiveCall &call, std::string &err) override {
    const Collective &c = *call.collective;
    ncclComm_t comm = nullptr;
    if (!groupComm(call, comm, err))
      return false;
    if (c.kind == CollectiveKind::AllReduce)
      return check(nccl_.allReduce(reinterpret_cast<const void *>(call.in),
                                   reinterpret_cast<void *>(call.out),
                                   size_t(call.outer * call.chunk),
                                   ncclType(c.dtype), ncclOp(c), comm,
                                   reinterpret_cast<void *>(call.stream)),
                   c, err);
    // The rows of a call go in fused groups (one launch each on the GPU).
    for (uint64_t first = 0; first < call.outer; first += kOpsPerGroup) {
      uint64_t last = std::min<uint64_t>(call.outer, first + kOpsPerGroup);
      if (!check(nccl_.groupStart(), c, err))
        return false;
      ncclResult_t r = 0;
      for (uint64_t o = first; o < last && r == 0; ++o)
        r = issueRow(call, comm, o);
      ncclResult_t end = nccl_.groupEnd();
      if (!check(r != 0 ? r : end, c, err))
        return false;
    }
    return true;
  }

  /// Row `o` of a gather, scatter or all-to-all. The artifact's layout is
  /// [outer, group, chunk] row by row, NCCL's rank by rank: a row of a
  /// gather is one NCCL gather of its members' chunks (a scatter's the
  /// reverse); an all-to-all row of `chunk` elements is a send and a
  /// receive of a shard per member.
  ncclResult_t issueRow(const CollectiveCall &call, ncclComm_t comm,
                        uint64_t o) {
    const Collective &c = *call.collective;
    const uint8_t *in = reinterpret_cast<const uint8_t *>(call.in);
    uint8_t *out = reinterpret_cast<uint8_t *>(call.out);
    void *stream = reinterpret_cast<void *>(call.stream);
    int type = ncclType(c.dtype);
    const uint64_t n = call.partition.size(c.group), chunk = call.chunk,
                   bytes = chunk * dtypeSize(c.dtype);
    switch (c.kind) {
    case CollectiveKind::AllGather:
      return nccl_.allGather(in + o * bytes, out + o * n * bytes, chunk, type,
                             comm, stream);
    case CollectiveKind::ReduceScatter:
      return nccl_.reduceScatter(in + o * n * bytes, out + o * bytes, chunk,
                                 type, ncclOp(c), comm, stream);
    case CollectiveKind::AllToAll: {
      // Shard j goes to member j, which keeps it at slot `me` (the session
      // checked that n divides chunk).
      const uint64_t shard = chunk / n, shardBytes = bytes / n;
      ncclResult_t r = 0;
      for (uint64_t j = 0; j < n && r == 0; ++j) {
        r = nccl_.send(in + o * bytes + j * shardBytes, shard, type, int(j),
                       comm, stream);
        if (r == 0)
          r = nccl_.recv(out + o * bytes + j * shardBytes, shard, type, int(j),
                         comm, stream);
      }
      return r;
    }
    case CollectiveKind::AllReduce:
      break; // one call for all rows (run)
    }
    return 0;
  }

  // A failed rank's peers are not left waiting on the host: NCCL's calls
  // only enqueue. (A peer's kernels may wait on the device; the session
  // reports the failure and is not run again.)
  void abort(const std::string &) override {}
  void reset() override {}
  bool waitsOnHost() const override { return false; }

private:
  bool check(ncclResult_t r, const Collective &c, std::string &err) const {
    if (r == 0)
      return true;
    err = std::string("nccl ") + collectiveName(c.kind) + " over " + c.group +
          ": " + nccl_.why(r);
    return false;
  }

  /// The rank's communicator of the call's group instance: the world's
  /// where the group spans it, else split from it at the group's first
  /// collective (ncclCommSplit: colour the instance's first member, key the
  /// rank's place in it). Every rank reaches that collective, the program
  /// being SPMD, so the split's rendezvous completes.
  bool groupComm(const CollectiveCall &call, ncclComm_t &out,
                 std::string &err) {
    const Partition &p = call.partition;
    const std::string &group = call.collective->group;
    ncclComm_t world = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto w = comms_.find(call.rank);
      if (w == comms_.end()) {
        err = "rank " + std::to_string(call.rank) +
              " has no NCCL communicator in this process";
        return false;
      }
      world = w->second;
      if (p.size(group) == world_) {
        out = world;
        return true;
      }
      auto g = groups_.find({group, call.rank});
      if (g != groups_.end()) {
        out = g->second;
        return true;
      }
    }
    int color = int(p.memberRank(group, call.rank, 0));
    int key = int(p.rankIn(group, call.rank));
    ncclComm_t split = nullptr;
    ncclResult_t r = nccl_.commSplit(world, color, key, &split, nullptr);
    if (r != 0) {
      err = "ncclCommSplit for group '" + group + "': " + nccl_.why(r);
      return false;
    }
    std::lock_guard<std::mutex> lock(mu_);
    groups_[{group, call.rank}] = split;
    out = split;
    return true;
  }

  Nccl nccl_;
  uint32_t world_;
  std::mutex mu_;
  std::map<uint32_t, ncclComm_t> comms_; // by global rank
  std::map<std::pair<std::string, uint32_t>, ncclComm_t> groups_;
};

} // namespace

std::shared_ptr<Communicator>
makeNcclCommunicator(const std::vector<int> &devices, std::string &err) {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  Nccl nccl;
  if (!nccl.load(err))
    return nullptr;
  auto comm = std::make_shared<NcclCommunicator>(nccl, devices.size());
  if (!comm->initAll(devices, err))
    return nullptr;
  return comm;
}

std::shared_ptr<Communicator>
makeNcclRankCommunicator(uint32_t rank, uint32_t world,
                         const std::function<bool(void *, size_t)> &shareId,
                         std::string &err) {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  Nccl nccl;
  if (!nccl.load(err))
    return nullptr;
  NcclUniqueId id{};
  if (rank == 0) {
    ncclResult_t r = nccl.getUniqueId(&id);
    if (r != 0) {
      err = "ncclGetUniqueId: " + nccl.why(r);
      return nullptr;
    }
  }
  if (!shareId(&id, sizeof(id))) {
    err = "the NCCL unique id could not be shared from rank 0";
    return nullptr;
  }
  auto comm = std::make_shared<NcclCommunicator>(nccl, world);
  if (!comm->initRank(rank, id, err))
    return nullptr;
  return comm;
}

} // namespace rt
} // namespace k3
