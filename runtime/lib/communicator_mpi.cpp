// The MPI communicator (communicator.h): one rank of a partitioned artifact
// per process, the processes started by an MPI launcher (`mpirun -np N
// k3-run ... --mpi`), as TensorRT-LLM runs across nodes. libmpi is loaded
// at run time, like libcuda and NCCL, so nothing links it.
//
// Every collective is an MPI_Allgather of the members' inputs followed by
// the host communicator's computation on the gathered copies
// (computeCollective): reductions add in rank order, so an MPI run gives the
// bits that the threads of one process give. That moves n inputs instead of
// a reduction's one, which is what the CPU target's checks can afford.
//
// Open MPI only: its handles (MPI_COMM_WORLD, MPI_BYTE) are addresses of
// exported objects (ompi_mpi_comm_world, ompi_mpi_byte); MPICH's are
// integers, a different ABI.
#include "communicator.h"

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "k3/dtype.h"

namespace k3 {
namespace rt {
namespace {

using namespace artifact;

using Handle = void *; // MPI_Comm, MPI_Datatype (Open MPI: pointers)

/// The few MPI entry points used, resolved from libmpi.
struct MpiApi {
  void *lib = nullptr;
  Handle commWorld = nullptr, byte = nullptr;
  int (*initialized)(int *) = nullptr;
  int (*init)(int *, char ***) = nullptr;
  int (*finalized)(int *) = nullptr;
  int (*finalize)() = nullptr;
  int (*commRank)(Handle, int *) = nullptr;
  int (*commSize)(Handle, int *) = nullptr;
  int (*commSplit)(Handle, int, int, Handle *) = nullptr;
  int (*allgather)(const void *, int, Handle, void *, int, Handle,
                   Handle) = nullptr;
  int (*abortJob)(Handle, int) = nullptr;

  bool load(std::string &err) {
    // K3_MPI_LIB, when set, is the only library tried.
    const char *env = std::getenv("K3_MPI_LIB");
    std::vector<const char *> names{"libmpi.so.40", "libmpi.so"};
    if (env && *env)
      names = {env};
    for (const char *name : names)
      if ((lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL)))
        break;
    if (!lib) {
      const char *why = dlerror();
      err = "cannot load libmpi (Open MPI's libmpi.so.40; K3_MPI_LIB names "
            "another): " +
            std::string(why ? why : "not found");
      return false;
    }
    commWorld = dlsym(lib, "ompi_mpi_comm_world");
    byte = dlsym(lib, "ompi_mpi_byte");
    if (!commWorld || !byte) {
      err = "the libmpi found is not Open MPI's (no ompi_mpi_comm_world): "
            "other MPI libraries have another ABI";
      return false;
    }
    return sym(initialized, "MPI_Initialized", err) &&
           sym(init, "MPI_Init", err) && sym(finalized, "MPI_Finalized", err) &&
           sym(finalize, "MPI_Finalize", err) &&
           sym(commRank, "MPI_Comm_rank", err) &&
           sym(commSize, "MPI_Comm_size", err) &&
           sym(commSplit, "MPI_Comm_split", err) &&
           sym(allgather, "MPI_Allgather", err) &&
           sym(abortJob, "MPI_Abort", err);
  }

  template <typename F> bool sym(F &f, const char *name, std::string &err) {
    f = reinterpret_cast<F>(dlsym(lib, name));
    if (!f)
      err = std::string("libmpi has no ") + name;
    return f != nullptr;
  }
};

/// The process's live MPI communicators, and whether this library called
/// MPI_Init: MPI is finalized when the last one closes (after which it
/// cannot start again in this process), never on an error path, where a
/// peer may still wait in a collective.
std::mutex liveMu;
int live = 0;
bool weInitialised = false;

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator(MpiApi api, uint32_t world) : api_(api), world_(world) {}

  ~MpiCommunicator() override {
    std::lock_guard<std::mutex> lock(liveMu);
    int done = 0;
    if (--live == 0 && weInitialised && api_.finalized(&done) == 0 && !done)
      api_.finalize();
  }

  uint32_t worldSize() const override { return world_; }

  bool run(const CollectiveCall &call, std::string &err) override {
    const Collective &c = *call.collective;
    const Partition &p = call.partition;
    uint32_t n = p.size(c.group), me = p.rankIn(c.group, call.rank);
    uint64_t elems = call.outer * call.chunk;
    if (c.kind == CollectiveKind::ReduceScatter)
      elems *= n;
    uint64_t bytes = elems * dtypeSize(c.dtype);
    if (bytes > uint64_t(INT_MAX)) {
      err = "a collective of " + std::to_string(bytes) +
            " bytes per rank: MPI counts stop at 2 GiB";
      return false;
    }
    Handle comm = nullptr;
    if (!groupComm(c.group, p, call.rank, comm, err))
      return false;
    gathered_.resize(size_t(bytes) * n);
    if (api_.allgather(reinterpret_cast<const void *>(call.in), int(bytes),
                       api_.byte, gathered_.data(), int(bytes), api_.byte,
                       comm) != 0) {
      err = "MPI_Allgather failed";
      return false;
    }
    std::vector<const uint8_t *> inputs(n);
    for (uint32_t j = 0; j < n; ++j)
      inputs[j] = gathered_.data() + size_t(bytes) * j;
    computeCollective(call, inputs, me, n);
    return true;
  }

  /// Every process gets rank 0's `n` bytes (an all-gather of them).
  bool shareFromRankZero(void *bytes, size_t n) {
    std::vector<uint8_t> all(n * world_);
    if (n > size_t(INT_MAX) ||
        api_.allgather(bytes, int(n), api_.byte, all.data(), int(n), api_.byte,
                       api_.commWorld) != 0)
      return false;
    std::memcpy(bytes, all.data(), n);
    return true;
  }

  /// A failed rank ends the job: its peers would wait in MPI forever.
  void abort(const std::string &) override { api_.abortJob(api_.commWorld, 1); }
  void reset() override {}

private:
  /// The communicator of the instance of `group` that holds `rank`, split
  /// from the world at the group's first collective. Every process runs the
  /// same program, so each reaches that collective, and the split, in the
  /// same order.
  bool groupComm(const std::string &group, const Partition &p, uint32_t rank,
                 Handle &out, std::string &err) {
    auto it = groups_.find(group);
    if (it != groups_.end()) {
      out = it->second;
      return true;
    }
    int color = int(p.memberRank(group, rank, 0));
    int key = int(p.rankIn(group, rank));
    if (api_.commSplit(api_.commWorld, color, key, &out) != 0) {
      err = "MPI_Comm_split for group '" + group + "' failed";
      return false;
    }
    groups_[group] = out;
    return true;
  }

  MpiApi api_;
  uint32_t world_;
  std::map<std::string, Handle> groups_;
  std::vector<uint8_t> gathered_;
};

} // namespace

bool mpiShareFromRankZero(Communicator &mpi, void *bytes, size_t n) {
  auto *m = dynamic_cast<MpiCommunicator *>(&mpi);
  return m && m->shareFromRankZero(bytes, n);
}

std::shared_ptr<Communicator> makeMpiCommunicator(uint32_t &rank,
                                                  std::string &err) {
  MpiApi api;
  if (!api.load(err))
    return nullptr;
  std::lock_guard<std::mutex> lock(liveMu);
  int inited = 0, done = 0;
  if (api.finalized(&done) == 0 && done) {
    err = "MPI was finalized in this process (when its last MPI session "
          "closed); it cannot start again: keep one session open";
    return nullptr;
  }
  if (api.initialized(&inited) != 0)
    inited = 0;
  if (!inited) {
    if (api.init(nullptr, nullptr) != 0) {
      err = "MPI_Init failed";
      return nullptr;
    }
    weInitialised = true;
  }
  int r = 0, size = 0;
  if (api.commRank(api.commWorld, &r) != 0 ||
      api.commSize(api.commWorld, &size) != 0 || size < 1) {
    err = "MPI_Comm_rank/MPI_Comm_size failed";
    return nullptr;
  }
  rank = uint32_t(r);
  ++live;
  return std::make_shared<MpiCommunicator>(api, uint32_t(size));
}

} // namespace rt
} // namespace k3
