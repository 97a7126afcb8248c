// Session: creation (kernel objects loaded, every launch resolved, the plan
// checked against the device's memory and allocated), decode state, outputs
// and profiles. Weights: weights.cpp, random_weights.cpp; running an entry:
// session_run.cpp.
#include "session.h"
#include <chrono>
#include <cstdlib>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "footprint.h"
#include "k3/dtype.h"

namespace k3 {
namespace rt {

using namespace artifact;

void fail(k3_status s, const std::string &msg) { throw Error{s, msg}; }

std::string shapeString(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}
uint64_t weightNumel(const Weight &w) {
  uint64_t n = 1;
  for (int64_t d : w.shape)
    n *= uint64_t(d);
  return n;
}

namespace {

void noteDim(const DimExpr &d, std::vector<bool> &syms) {
  if (!d.isConstant() && d.sym < syms.size())
    syms[d.sym] = true;
}

} // namespace

Session::Session(std::shared_ptr<const Artifact> art, const std::string &device)
    : Session(std::move(art), device, 0, nullptr) {}

Session::Session(std::shared_ptr<const Artifact> art, const std::string &device,
                 uint32_t rank, std::shared_ptr<Communicator> comm)
    : art_(std::move(art)), rank_(rank), comm_(std::move(comm)) {
  try {
    init(device);
    createRanks(device);
  } catch (...) {
    peers_.clear();
    cleanup(); // the destructor does not run when a constructor throws
    throw;
  }
}

int cudaOrdinal(const std::string &device) {
  std::string rest = device.rfind("cuda", 0) == 0 ? device.substr(4) : "?";
  if (rest.empty())
    return 0;
  if (rest[0] != ':' || rest.size() < 2 || rest.size() > 4 ||
      rest.find_first_not_of("0123456789", 1) != std::string::npos)
    fail(K3_ERROR_INVALID_ARGUMENT,
         "invalid device '" + device + "' (expected cpu, cuda or cuda:N)");
  return atoi(rest.c_str() + 1);
}

void Session::init(const std::string &device) {
  const Artifact &a = *art_;
  std::string err;
  if (device == "cpu") {
    be_ = createCpuBackend(err);
  } else if (device.rfind("cuda", 0) == 0) {
    int ordinal = cudaOrdinal(device);
    be_ = createCudaBackend(ordinal, err);
    ordinal_ = ordinal;
    if (!be_)
      fail(K3_ERROR_NO_DEVICE, err);
  } else {
    fail(K3_ERROR_INVALID_ARGUMENT,
         "invalid device '" + device + "' (expected cpu, cuda or cuda:N)");
  }
  if (!be_)
    fail(K3_ERROR_NO_DEVICE, err);
  deviceName_ = be_->name();

  // This runtime executes single-device plans (device index 0).
  for (auto &b : a.buffers)
    if (b.device != 0)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "buffer '" + b.name + "' is placed on device " +
               std::to_string(b.device) +
               ": multi-device plans are not supported by this runtime yet");
  for (auto &w : a.weights)
    if (w.device != 0)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "weight '" + w.name + "' is placed on device " +
               std::to_string(w.device) +
               ": multi-device plans are not supported by this runtime yet");

  std::vector<std::string> why = loadKernelObjects();
  resolveLaunches(why);
  allocatePlan();
}

std::vector<std::string> Session::loadKernelObjects() {
  const Artifact &a = *art_;
  std::string err;
  // Load the kernel objects this device can run.
  std::vector<std::string> why(a.objects.size());
  modules_.assign(a.objects.size(), nullptr);
  for (size_t i = 0; i < a.objects.size(); ++i) {
    if (!be_->supportsTarget(a.objects[i].target, why[i]))
      continue;
    bool used = false;
    for (auto &e : a.entries)
      for (auto &l : e.launches)
        used |= (l.object == i);
    if (!used)
      continue;
    if (!be_->loadObject(a.objects[i], i, modules_[i], err))
      fail(K3_ERROR_DEVICE, err);
  }
  return why;
}

void Session::resolveLaunches(const std::vector<std::string> &why) {
  const Artifact &a = *art_;
  std::string err;
  // Resolve every launch's kernel; an entry is runnable when all its objects
  // loaded.
  kernels_.resize(a.entries.size());
  unrunnable_.resize(a.entries.size());
  entrySyms_.assign(a.entries.size(),
                    std::vector<bool>(a.symbols.size(), false));
  entryWeights_.assign(a.entries.size(),
                       std::vector<bool>(a.weights.size(), false));
  size_t runnable = 0;
  std::string tensorMapRefusal; // the first launch refused for its tensor maps
  auto noteTensorMaps = [&](const Artifact &art, size_t ei, size_t li,
                            std::vector<bool> &syms, std::vector<bool> &weights,
                            std::string &unrunnable, std::string &refusal) {
    const Launch &l = art.entries[ei].launches[li];
    for (size_t ai = 0; ai < l.args.size(); ++ai) {
      if (l.args[ai].kind != ArgKind::TensorMap)
        continue;
      const TensorMapSpec &t = art.tensorMaps[l.args[ai].index];
      for (auto &d : t.dims)
        noteDim(d, syms);
      for (auto &d : t.strides)
        noteDim(d, syms);
      if (t.source.kind == ArgKind::Weight)
        weights[t.source.index] = true;
      std::string why;
      if (unrunnable.empty() && !be_->supportsTensorMaps(why)) {
        unrunnable = "entry '" + art.entries[ei].name + "' launch " +
                     std::to_string(li) + " ('" + l.kernel + "') arg " +
                     std::to_string(ai) + " is a TMA tensor map: " + why;
        if (refusal.empty())
          refusal = unrunnable;
      }
    }
  };
  for (size_t ei = 0; ei < a.entries.size(); ++ei) {
    const Entry &e = a.entries[ei];
    for (auto &t : e.inputs)
      for (auto &d : t.shape)
        noteDim(d, entrySyms_[ei]);
    for (auto &t : e.outputs)
      for (auto &d : t.shape)
        noteDim(d, entrySyms_[ei]);
    for (size_t li = 0; li < e.launches.size(); ++li) {
      const Launch &l = e.launches[li];
      for (int k = 0; k < 3; ++k) {
        noteDim(l.grid[k], entrySyms_[ei]);
        noteDim(l.block[k], entrySyms_[ei]);
      }
      noteDim(l.sharedMemBytes, entrySyms_[ei]);
      for (auto &g : l.args) {
        if (g.kind == ArgKind::Symbol)
          entrySyms_[ei][g.index] = true;
        if (g.kind == ArgKind::Weight)
          entryWeights_[ei][g.index] = true;
      }
      noteTensorMaps(a, ei, li, entrySyms_[ei], entryWeights_[ei],
                     unrunnable_[ei], tensorMapRefusal);
      if (l.object == kCollectiveObject) {
        const Collective &c = a.collectives[size_t(l.args[2].imm)];
        noteDim(c.outer, entrySyms_[ei]);
        noteDim(c.chunk, entrySyms_[ei]);
        kernels_[ei].push_back(nullptr);
        continue;
      }
      void *fn = nullptr;
      if (!modules_[l.object]) {
        if (unrunnable_[ei].empty())
          unrunnable_[ei] = "entry '" + e.name + "' launch " +
                            std::to_string(li) + " ('" + l.kernel +
                            "') uses kernel object " +
                            std::to_string(l.object) + ": " + why[l.object];
      } else if (!be_->getKernel(modules_[l.object], l.kernel, fn, err)) {
        fail(K3_ERROR_FORMAT, "entry '" + e.name + "' launch " +
                                  std::to_string(li) + ": kernel object " +
                                  std::to_string(l.object) + ": " + err);
      }
      kernels_[ei].push_back(fn);
    }
    if (unrunnable_[ei].empty())
      ++runnable;
  }
  if (!a.entries.empty() && runnable == 0 && !tensorMapRefusal.empty())
    fail(K3_ERROR_NO_DEVICE, tensorMapRefusal);
  if (!a.entries.empty() && runnable == 0) {
    std::string targets;
    for (auto &o : a.objects)
      if (targets.find("'" + o.target + "'") == std::string::npos)
        targets += (targets.empty() ? "'" : ", '") + o.target + "'";
    fail(K3_ERROR_NO_DEVICE, "artifact has no kernels for device " +
                                 deviceName_ + " (its targets: " + targets +
                                 "); " + unrunnable_[0]);
  }
}

void Session::allocatePlan() {
  const Artifact &a = *art_;
  std::string err;
  // Nothing is allocated unless the whole plan, weights included, fits.
  uint64_t freeBytes = 0, totalBytes = 0;
  if (be_->memoryInfo(freeBytes, totalBytes)) {
    std::string why = checkFits(footprint(a), freeBytes, deviceName_);
    if (!why.empty())
      fail(K3_ERROR_OUT_OF_MEMORY, why);
  }
  // Allocate: one arena for all activation scratch, own allocations otherwise.
  uint64_t arenaSize = 0;
  for (auto &b : a.buffers)
    if (b.kind == BufferKind::Arena)
      arenaSize = std::max(arenaSize, b.arenaOffset + b.size);
  if (arenaSize && !be_->alloc(arenaSize, arena_, err))
    fail(K3_ERROR_DEVICE,
         "allocating the " + std::to_string(arenaSize) + "-byte arena: " + err);
  bufPtr_.resize(a.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    const Buffer &b = a.buffers[i];
    if (b.kind == BufferKind::Arena) {
      bufPtr_[i] = arena_ + b.arenaOffset;
      continue;
    }
    if (!be_->alloc(b.size, bufPtr_[i], err))
      fail(K3_ERROR_DEVICE, "allocating buffer '" + b.name + "' (" +
                                std::to_string(b.size) + " bytes): " + err);
    ownAllocs_.push_back(bufPtr_[i]);
  }
  weightPtr_.assign(a.weights.size(), 0);
  weightLoaded_.assign(a.weights.size(), false);
  tensorMaps_.plan(a);
  std::string noMaps;
  if (tensorMaps_.count() && be_->supportsTensorMaps(noMaps) &&
      !tensorMaps_.allocate(*be_, err))
    fail(K3_ERROR_DEVICE, "allocating " + std::to_string(tensorMaps_.count()) +
                              " tensor-map slots: " + err);
  const char *g = std::getenv("K3_LAUNCH_GRAPHS");
  graphsEnabled_ = be_->supportsGraphs() && !(g && std::string(g) == "0");
  // K3_LAUNCH_LANES=n: a captured graph runs independent launches on up
  // to n lanes (launch_lanes.h; the backend may offer fewer).
  if (const char *ln = std::getenv("K3_LAUNCH_LANES")) {
    char *end = nullptr;
    long v = std::strtol(ln, &end, 10);
    if (end == ln || *end || v < 1 || v > 64)
      fail(K3_ERROR_INVALID_ARGUMENT,
           std::string("K3_LAUNCH_LANES='") + ln +
               "': expected a number of lanes from 1 to 64");
    launchLanes_ = unsigned(v);
  }
  // A collective is not a kernel launch: no graph holds one yet.
  if (!a.collectives.empty() && graphsEnabled_) {
    graphsEnabled_ = false;
    graphsOff_ = "the artifact runs collectives between its kernels";
  }
  // Overlapping launches need kernels that wait for their predecessor;
  // K3_GRID_OVERLAP=0 turns it off (A/B measurements).
  const std::string *gdc = a.meta(artifact::kMetaGridDependencyControl);
  const char *o = std::getenv("K3_GRID_OVERLAP");
  gridOverlap_ = gdc && *gdc == "1" && !(o && std::string(o) == "0");
  gridOverlapPrefill_ = gridOverlap_ && o && std::string(o) == "all";
}

Session::~Session() { cleanup(); }

void Session::cleanup() {
  if (!be_)
    return;
  for (void *m : marks_)
    be_->destroyMark(m);
  marks_.clear();
  for (LaunchGraph &g : graphs_)
    be_->destroyGraph(g.exec);
  graphs_.clear();
  tensorMaps_.release(*be_);
  for (uint64_t &p : weightPtr_)
    if (p) {
      be_->release(p);
      p = 0;
    }
  for (uint64_t p : ownAllocs_)
    be_->release(p);
  ownAllocs_.clear();
  if (arena_)
    be_->release(arena_);
  arena_ = 0;
  for (void *&m : modules_)
    if (m) {
      be_->unloadObject(m);
      m = nullptr;
    }
}

void Session::allocWeight(size_t i) {
  const Weight &w = art_->weights[i];
  std::string err;
  if (!weightPtr_[i] && !be_->alloc(weightBytes(w), weightPtr_[i], err))
    fail(K3_ERROR_DEVICE, "allocating weight '" + w.name + "': " + err);
}

void Session::uploadWeight(size_t i, const void *host) {
  const Weight &w = art_->weights[i];
  uint64_t bytes = weightBytes(w);
  std::string err;
  allocWeight(i);
  if (!be_->upload(weightPtr_[i], host, bytes, err))
    fail(K3_ERROR_DEVICE, "uploading weight '" + w.name + "': " + err);
  weightLoaded_[i] = true;
}

void Session::setWeight(const std::string &name, const void *host,
                        uint64_t bytes) {
  if (leadsRanks())
    return forEachRank([&](Session &s) { s.setWeight(name, host, bytes); });
  for (size_t i = 0; i < art_->weights.size(); ++i) {
    // A sharded weight is given whole, as the checkpoint holds it.
    const Weight w = fullWeight(i);
    if (w.name != name)
      continue;
    if (bytes != weightBytes(w))
      fail(K3_ERROR_INVALID_ARGUMENT,
           "weight '" + name + "' (" + dtypeName(w.dtype) + " " +
               shapeString(w.shape) + ") is " + std::to_string(weightBytes(w)) +
               " bytes, got " + std::to_string(bytes));
    if (!shardOf(i)) {
      uploadWeight(i, host);
      return;
    }
    std::vector<uint8_t> local(weightBytes(art_->weights[i]));
    sliceWeight(i, static_cast<const uint8_t *>(host), local.data());
    uploadWeight(i, local.data());
    return;
  }
  fail(K3_ERROR_INVALID_ARGUMENT, "the artifact has no weight '" + name + "'");
}

void Session::resetState(int64_t slot) {
  if (leadsRanks())
    return forEachRank([&](Session &s) { s.resetState(slot); });
  std::string err;
  bool any = false;
  for (size_t i = 0; i < art_->buffers.size(); ++i) {
    const Buffer &b = art_->buffers[i];
    if (b.kind != BufferKind::State)
      continue;
    if (slot < 0) {
      if (!be_->zero(bufPtr_[i], b.size, err))
        fail(K3_ERROR_DEVICE, "resetting state '" + b.name + "': " + err);
      any = true;
    } else if (b.perSeqStride) {
      uint64_t slots = b.size / b.perSeqStride;
      if (uint64_t(slot) >= slots)
        fail(K3_ERROR_INVALID_ARGUMENT,
             "sequence slot " + std::to_string(slot) +
                 " out of range: state buffer '" + b.name + "' has " +
                 std::to_string(slots) + " slots");
      if (!be_->zero(bufPtr_[i] + uint64_t(slot) * b.perSeqStride,
                     b.perSeqStride, err))
        fail(K3_ERROR_DEVICE, "resetting state '" + b.name + "': " + err);
      any = true;
    }
  }
  (void)any;
}

void Session::ensureMarks(size_t n) {
  std::string err;
  while (marks_.size() < n) {
    void *m = nullptr;
    if (!be_->createMark(m, err))
      fail(K3_ERROR_DEVICE, "creating a timing mark: " + err);
    marks_.push_back(m);
  }
}

void Session::setProfiling(bool on) {
  if (on && !profiling_)
    resetProfile();
  profiling_ = on;
}

void Session::resetProfile() {
  profile_.clear();
  profileRuns_.clear();
}

std::vector<KernelProfile> Session::profile(const std::string &entry) const {
  std::vector<KernelProfile> out;
  double total = 0;
  for (auto &kv : profile_) {
    if (!entry.empty() && kv.second.entry != entry)
      continue;
    out.push_back(kv.second);
    auto r = profileRuns_.find(kv.first.first);
    out.back().runs = r == profileRuns_.end() ? 0 : r->second;
    total += kv.second.totalMs;
  }
  for (KernelProfile &k : out)
    k.share = total > 0 ? k.totalMs / total : 1.0 / double(out.size());
  // Largest first; ties in (entry, kernel) order, as the map keeps them
  // (std::sort with a total order: stable_sort's temporary buffer is
  // deprecated under clang 22 with libstdc++ 12).
  std::sort(out.begin(), out.end(),
            [](const KernelProfile &a, const KernelProfile &b) {
              if (a.totalMs != b.totalMs)
                return a.totalMs > b.totalMs;
              return std::tie(a.entry, a.kernel) < std::tie(b.entry, b.kernel);
            });
  return out;
}

std::vector<double> Session::time(const std::string &entry,
                                  const k3_symbol_value *syms, size_t nsyms,
                                  const k3_host_tensor *inputs, size_t ninputs,
                                  int warmup, int reps, bool inputsOnDevice) {
  if (warmup < 0 || reps < 1)
    fail(K3_ERROR_INVALID_ARGUMENT,
         "timing needs warmup >= 0 and reps >= 1 (got warmup " +
             std::to_string(warmup) + ", reps " + std::to_string(reps) + ")");
  struct Off {
    bool &flag;
    ~Off() { flag = false; }
  } off{timing_};
  timing_ = true;
  std::vector<double> ms;
  for (int i = 0; i < warmup + reps; ++i) {
    run(entry, syms, nsyms, inputs, ninputs, /*download=*/false,
        inputsOnDevice);
    if (i >= warmup)
      ms.push_back(lastTimedMs_);
  }
  return ms;
}

void Session::fetchOutputs() {
  if (lastEntry_ < 0 || !outputs_.empty())
    return;
  const Entry &e = art_->entries[size_t(lastEntry_)];
  std::string err;
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    const TensorSpec &t = e.outputs[k];
    OutputTensor o{t.name, t.dtype, lastOutShapes_[k], {}};
    uint64_t bytes = dtypeSize(t.dtype);
    for (int64_t d : o.shape)
      bytes *= uint64_t(d);
    o.data.resize(bytes);
    if (!be_->download(o.data.data(), bufPtr_[t.buffer], bytes, err)) {
      outputs_.clear();
      fail(K3_ERROR_DEVICE, "downloading output '" + t.name + "': " + err);
    }
    outputs_.push_back(std::move(o));
  }
}

void Session::outputOnDevice(const std::string &name, uint64_t &addr,
                             DType &dtype, std::vector<int64_t> &shape) {
  if (lastEntry_ < 0)
    fail(K3_ERROR_INVALID_ARGUMENT, "no successful run to read outputs from");
  const Entry &e = art_->entries[size_t(lastEntry_)];
  if (contextOutputs_)
    fail(K3_ERROR_INVALID_ARGUMENT,
         "entry '" + e.name +
             "' ran context-parallel: its outputs were put together on the "
             "host from the ranks' (read them with k3_session_output)");
  for (size_t k = 0; k < e.outputs.size(); ++k)
    if (e.outputs[k].name == name) {
      addr = bufPtr_[e.outputs[k].buffer];
      dtype = e.outputs[k].dtype;
      shape = lastOutShapes_[k];
      return;
    }
  fail(K3_ERROR_INVALID_ARGUMENT,
       "entry '" + e.name + "' has no output '" + name + "'");
}

void Session::readOutput(const std::string &name, uint64_t offset, void *dst,
                         uint64_t nbytes, DType *dtype,
                         std::vector<int64_t> *shape) {
  if (lastEntry_ < 0)
    fail(K3_ERROR_INVALID_ARGUMENT, "no successful run to read outputs from");
  const Entry &e = art_->entries[size_t(lastEntry_)];
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    const TensorSpec &t = e.outputs[k];
    if (t.name != name)
      continue;
    uint64_t bytes = dtypeSize(t.dtype);
    for (int64_t d : lastOutShapes_[k])
      bytes *= uint64_t(d);
    if (offset > bytes || nbytes > bytes - offset)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "reading " + std::to_string(nbytes) + " bytes at " +
               std::to_string(offset) + " of output '" + name + "' (" +
               std::to_string(bytes) + " bytes)");
    std::string err;
    if (contextOutputs_) {
      if (nbytes)
        std::memcpy(dst, outputs_[k].data.data() + offset, nbytes);
    } else if (nbytes &&
               !be_->download(dst, bufPtr_[t.buffer] + offset, nbytes, err)) {
      fail(K3_ERROR_DEVICE, "downloading output '" + name + "': " + err);
    }
    if (dtype)
      *dtype = t.dtype;
    if (shape)
      *shape = lastOutShapes_[k];
    return;
  }
  fail(K3_ERROR_INVALID_ARGUMENT,
       "entry '" + e.name + "' has no output '" + name + "'");
}

void Session::readBuffer(size_t id, void *dst, size_t nbytes) {
  if (id >= art_->buffers.size())
    fail(K3_ERROR_INVALID_ARGUMENT,
         "buffer id " + std::to_string(id) + " out of range");
  const Buffer &b = art_->buffers[id];
  if (nbytes > b.size)
    fail(K3_ERROR_INVALID_ARGUMENT, "reading " + std::to_string(nbytes) +
                                        " bytes from buffer '" + b.name +
                                        "' of " + std::to_string(b.size));
  std::string err;
  if (nbytes && !dst)
    fail(K3_ERROR_INVALID_ARGUMENT, "destination is NULL");
  if (!be_->download(dst, bufPtr_[id], nbytes, err))
    fail(K3_ERROR_DEVICE, "reading buffer '" + b.name + "': " + err);
}

} // namespace rt
} // namespace k3
