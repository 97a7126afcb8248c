// The NCCL communicator (communicator.h): the ranks are this process's GPUs,
// one thread each, their communicators made together by ncclCommInitAll.
// libnccl is loaded at run time, like libcuda, so the runtime links neither;
// K3_NCCL_LIB names another library file. NVLink multicast (NVLS) is off
// unless NCCL_NVLS_ENABLE is set: the machines here do not have it.
#include "communicator.h"

#include <cstdlib>
#include <dlfcn.h>
#include <vector>

namespace k3 {
namespace rt {
namespace {

using namespace artifact;

typedef struct ncclComm *ncclComm_t;
typedef int ncclResult_t; // 0: ncclSuccess
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
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*allReduce)(const void *, void *, size_t, int, int, ncclComm_t,
                            void *) = nullptr;
  ncclResult_t (*allGather)(const void *, void *, size_t, int, ncclComm_t,
                            void *) = nullptr;
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, int, int,
                                ncclComm_t, void *) = nullptr;
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
        err = std::string(name) + " has no " + s;
      return fn != nullptr;
    };
    return sym(commInitAll, "ncclCommInitAll") &&
           sym(commDestroy, "ncclCommDestroy") &&
           sym(allReduce, "ncclAllReduce") && sym(allGather, "ncclAllGather") &&
           sym(reduceScatter, "ncclReduceScatter") &&
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

class NcclCommunicator : public Communicator {
public:
  explicit NcclCommunicator(Nccl nccl) : nccl_(nccl) {}
  ~NcclCommunicator() override {
    for (ncclComm_t c : comms_)
      if (c)
        nccl_.commDestroy(c);
  }
  bool init(const std::vector<int> &devices, std::string &err) {
    comms_.assign(devices.size(), nullptr);
    ncclResult_t r =
        nccl_.commInitAll(comms_.data(), int(devices.size()), devices.data());
    if (r != 0) {
      comms_.assign(devices.size(), nullptr);
      err = "ncclCommInitAll over " + std::to_string(devices.size()) +
            " GPUs: " + nccl_.why(r);
      return false;
    }
    return true;
  }
  uint32_t worldSize() const override { return uint32_t(comms_.size()); }

  /// Enqueues the collective on the rank's stream, after its kernels.
  bool run(const CollectiveCall &call, std::string &err) override {
    const Collective &c = *call.collective;
    // The world is the group (one axis split): with several groups of more
    // than one rank, each needs its own communicator (ncclCommSplit).
    if (call.partition.size(c.group) != worldSize()) {
      err = "the NCCL communicator runs one group spanning the world (" +
            std::to_string(worldSize()) + " ranks); group '" + c.group +
            "' has " + std::to_string(call.partition.size(c.group));
      return false;
    }
    if (c.kind == CollectiveKind::AllToAll) {
      err = "all_to_all is not run on NCCL yet (the CPU target runs it)";
      return false;
    }
    // NCCL lays a gather's output out rank by rank: the artifact's [outer,
    // group, chunk] is that only for one outer row.
    if (c.kind != CollectiveKind::AllReduce && call.outer != 1) {
      err = std::string(collectiveName(c.kind)) + " of " +
            std::to_string(call.outer) +
            " rows: NCCL runs a gather or scatter of one row only (yet)";
      return false;
    }
    ncclComm_t comm = comms_[call.rank];
    void *stream = reinterpret_cast<void *>(call.stream);
    const void *in = reinterpret_cast<const void *>(call.in);
    void *out = reinterpret_cast<void *>(call.out);
    int type = ncclType(c.dtype),
        op = c.reduce == ReduceOp::Sum ? int(ncclSum) : int(ncclMax);
    size_t n = size_t(call.outer * call.chunk);
    ncclResult_t r = 0;
    switch (c.kind) {
    case CollectiveKind::AllReduce:
      r = nccl_.allReduce(in, out, n, type, op, comm, stream);
      break;
    case CollectiveKind::AllGather:
      r = nccl_.allGather(in, out, n, type, comm, stream);
      break;
    case CollectiveKind::ReduceScatter:
      r = nccl_.reduceScatter(in, out, n, type, op, comm, stream);
      break;
    case CollectiveKind::AllToAll:
      break; // refused above
    }
    if (r != 0) {
      err = std::string("nccl ") + collectiveName(c.kind) + ": " + nccl_.why(r);
      return false;
    }
    return true;
  }
  // A failed rank's peers are not left waiting on the host: NCCL's calls
  // only enqueue. (A peer's kernels may wait on the device; the session
  // reports the failure and is not run again.)
  void abort(const std::string &) override {}
  void reset() override {}
  bool waitsOnHost() const override { return false; }

private:
  Nccl nccl_;
  std::vector<ncclComm_t> comms_;
};

} // namespace

std::shared_ptr<Communicator>
makeNcclCommunicator(const std::vector<int> &devices, std::string &err) {
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  Nccl nccl;
  if (!nccl.load(err))
    return nullptr;
  auto comm = std::make_shared<NcclCommunicator>(nccl);
  if (!comm->init(devices, err))
    return nullptr;
  return comm;
}

} // namespace rt
} // namespace k3
