// Session: allocation per the plan, weights, and in-order execution of an
// entry point's launches on one backend.
#include "session.h"
#include <chrono>
#include <cstdlib>

#include <algorithm>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <map>
#include <optional>
#include <sys/stat.h>
#include <tuple>

#include "checkpoint_names.h"
#include "footprint.h"
#include "input_checks.h"
#include "k3/dtype.h"
#include "k3/safetensors.h"

namespace k3 {
namespace rt {

using namespace artifact;

void fail(k3_status s, const std::string &msg) { throw Error{s, msg}; }

uint64_t weightBytes(const Weight &w) {
  uint64_t n = dtypeSize(w.dtype);
  for (int64_t d : w.shape)
    n *= uint64_t(d);
  return n;
}
uint64_t weightNumel(const Weight &w) {
  uint64_t n = 1;
  for (int64_t d : w.shape)
    n *= uint64_t(d);
  return n;
}

namespace {

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

void noteDim(const DimExpr &d, std::vector<bool> &syms) {
  if (!d.isConstant() && d.sym < syms.size())
    syms[d.sym] = true;
}

} // namespace

Session::Session(std::shared_ptr<const Artifact> art, const std::string &device)
    : art_(std::move(art)) {
  try {
    init(device);
  } catch (...) {
    cleanup(); // the destructor does not run when a constructor throws
    throw;
  }
}

void Session::init(const std::string &device) {
  const Artifact &a = *art_;
  std::string err;
  if (device == "cpu") {
    be_ = createCpuBackend(err);
  } else if (device.rfind("cuda", 0) == 0) {
    int ordinal = 0;
    std::string rest = device.substr(4);
    if (!rest.empty()) {
      if (rest[0] != ':' || rest.size() < 2 || rest.size() > 4 ||
          rest.find_first_not_of("0123456789", 1) != std::string::npos)
        fail(K3_ERROR_INVALID_ARGUMENT,
             "invalid device '" + device + "' (expected cpu, cuda or cuda:N)");
      ordinal = atoi(rest.c_str() + 1);
    }
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

namespace {
/// Whether a checkpoint tensor of shape `got` holds, row-major, exactly the
/// tensor of shape `want`: equal shapes, equal after dropping unit
/// dimensions (Kimi Linear stores A_log as [1, 1, H, 1]), or a flat `want`
/// of the same size (transformers' dt_bias [H, d] for [H * d]).
bool sameLayout(const std::vector<int64_t> &got,
                const std::vector<int64_t> &want) {
  if (got == want)
    return true;
  auto squeeze = [](const std::vector<int64_t> &s) {
    std::vector<int64_t> r;
    for (int64_t d : s)
      if (d != 1)
        r.push_back(d);
    return r;
  };
  if (squeeze(got) == squeeze(want))
    return true;
  int64_t n = 1;
  for (int64_t d : got)
    n *= d;
  return want.size() == 1 && n == want[0];
}
} // namespace

namespace {
bool isDirectory(const std::string &p) {
  struct stat sb;
  return stat(p.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode);
}
bool isFile(const std::string &p) {
  struct stat sb;
  return stat(p.c_str(), &sb) == 0 && S_ISREG(sb.st_mode);
}
/// The weight files of a checkpoint directory: its
/// model.safetensors.index.json when present, else every *.safetensors in
/// it (sorted by name).
std::vector<std::string> checkpointFiles(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  std::string index = dir + "/model.safetensors.index.json";
  if (isFile(index))
    return {index};
  std::vector<std::string> files;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0 &&
          isFile(dir + "/" + n))
        files.push_back(dir + "/" + n);
    }
    closedir(d);
  } else {
    fail(K3_ERROR_IO, dir + ": cannot open directory");
  }
  std::sort(files.begin(), files.end());
  if (files.empty())
    fail(K3_ERROR_IO, dir +
                          ": checkpoint directory has no "
                          "model.safetensors.index.json and no *.safetensors");
  return files;
}
} // namespace

void Session::loadWeights(const std::vector<std::string> &given) {
  if (given.empty())
    fail(K3_ERROR_INVALID_ARGUMENT, "no weight files given");
  std::vector<std::string> paths;
  for (auto &p : given) {
    if (isDirectory(p)) {
      for (auto &f : checkpointFiles(p))
        paths.push_back(f);
    } else {
      paths.push_back(p);
    }
  }
  st::Collection c;
  std::string err, names;
  for (auto &p : paths) {
    names += (names.empty() ? "" : ", ") + p;
    bool isIndex = p.size() >= 5 && p.compare(p.size() - 5, 5, ".json") == 0;
    bool ok = isIndex ? c.open(p, err) : c.addFile(p, err);
    if (!ok)
      fail(err.find("cannot open") != std::string::npos ? K3_ERROR_IO
                                                        : K3_ERROR_FORMAT,
           err);
  }
  const Artifact &a = *art_;
  // A weight is one checkpoint tensor, or for a name with the "{expert}"
  // placeholder a stack of one tensor per expert along the first dimension.
  // VLM checkpoints (Kimi K3) prefix every name with "language_model.".
  // A checkpoint saved by transformers >= 5 has other names and fused
  // tensors: a weight not found by its own name is looked up there
  // (checkpoint_names.h), possibly as a slab of a fused tensor.
  std::map<std::string, const st::TensorInfo *> found;
  std::deque<st::TensorInfo> slabs; // stable addresses
  auto find = [&](const std::string &name) {
    const st::TensorInfo *t = c.find(name);
    return t ? t : c.find("language_model." + name);
  };
  auto lookup = [&](const std::string &name) -> const st::TensorInfo * {
    auto it = found.find(name);
    if (it != found.end())
      return it->second;
    const st::TensorInfo *t = find(name);
    for (const TensorSlab &src :
         t ? std::vector<TensorSlab>{} : transformersSources(name)) {
      const st::TensorInfo *fused = find(src.name);
      std::optional<st::TensorInfo> slab =
          fused ? slabOf(*fused, src) : std::nullopt;
      if (slab) {
        slabs.push_back(*slab);
        t = &slabs.back();
        break;
      }
    }
    return found[name] = t;
  };
  auto parts = [&](const Weight &w) {
    std::vector<std::pair<std::string, const st::TensorInfo *>> out;
    static const std::string kExpert = "{expert}";
    size_t at = w.name.find(kExpert);
    if (at == std::string::npos) {
      out.push_back({w.name, lookup(w.name)});
      return out;
    }
    for (int64_t e = 0; e < (w.shape.empty() ? 0 : w.shape[0]); ++e) {
      std::string n = w.name.substr(0, at) + std::to_string(e) +
                      w.name.substr(at + kExpert.size());
      out.push_back({n, lookup(n)});
    }
    return out;
  };
  // Validate everything before touching device memory.
  for (auto &w : a.weights) {
    bool stacked = w.name.find("{expert}") != std::string::npos;
    std::vector<int64_t> partShape =
        stacked ? std::vector<int64_t>(w.shape.begin() + 1, w.shape.end())
                : w.shape;
    for (auto &[n, t] : parts(w)) {
      if (!t)
        fail(K3_ERROR_WEIGHTS, "weight '" + n + "' (" + dtypeName(w.dtype) +
                                   " " + shapeStr(partShape) +
                                   ") not found in " + names);
      if (!sameLayout(t->shape, partShape))
        fail(K3_ERROR_WEIGHTS,
             "weight '" + n + "'" +
                 (t->name == n || t->name == "language_model." + n
                      ? ""
                      : " (as '" + t->name + "')") +
                 " has shape " + shapeStr(t->shape) + " in " + t->file +
                 " but the artifact expects " + shapeStr(partShape));
    }
  }
  std::vector<uint8_t> host;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const Weight &w = a.weights[i];
    host.assign(weightBytes(w), 0);
    auto ps = parts(w);
    uint64_t partBytes = ps.empty() ? 0 : weightBytes(w) / ps.size();
    for (size_t e = 0; e < ps.size(); ++e)
      if (!st::convert(*ps[e].second, w.dtype, host.data() + e * partBytes,
                       err))
        fail(K3_ERROR_WEIGHTS, "weight '" + ps[e].first + "': " + err);
    uploadWeight(i, host.data());
  }
}

void Session::resetState(int64_t slot) {
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

void Session::checkPackedSequences(const Entry &e, const k3_host_tensor *inputs,
                                   size_t ninputs,
                                   const std::vector<int64_t> &sv,
                                   bool inputsOnDevice) {
  const Artifact &a = *art_;
  int tokSym = a.findSymbol("num_tokens"), seqSym = a.findSymbol("num_seqs");
  if (tokSym < 0 || seqSym < 0)
    return;
  int64_t n = sv[size_t(seqSym)];
  // Host copies of an input: the caller's data, or read back from its
  // buffer (inputs given on the device).
  auto values = [&](const char *name, std::vector<int32_t> &out) {
    for (const TensorSpec &t : e.inputs) {
      if (t.name != name || t.dtype != DType::I32)
        continue;
      for (size_t i = 0; i < ninputs; ++i)
        if (inputs[i].name && t.name == inputs[i].name) {
          out.resize(inputs[i].nbytes / 4);
          std::string err;
          if (!inputsOnDevice)
            std::memcpy(out.data(), inputs[i].data, out.size() * 4);
          else if (!be_->download(out.data(), bufPtr_[t.buffer], out.size() * 4,
                                  err))
            fail(K3_ERROR_DEVICE, "reading input '" + t.name + "': " + err);
          return true;
        }
    }
    return false;
  };
  std::vector<int32_t> cu, ctx;
  if (!values("cu_seqlens", cu) || int64_t(cu.size()) != n + 1)
    return;
  bool haveCtx = values("context_lens", ctx) && int64_t(ctx.size()) == n;
  checkSequences(a, e, cu.data(), haveCtx ? ctx.data() : nullptr, n,
                 sv[size_t(tokSym)]);
}

void Session::run(const std::string &entryName, const k3_symbol_value *syms,
                  size_t nsyms, const k3_host_tensor *inputs, size_t ninputs,
                  bool download, bool inputsOnDevice) {
  const Artifact &a = *art_;
  outputs_.clear();
  lastEntry_ = -1;
  int ei = a.findEntry(entryName);
  if (ei < 0) {
    std::string list;
    for (auto &e : a.entries)
      list += (list.empty() ? "" : ", ") + e.name;
    fail(K3_ERROR_INVALID_ARGUMENT, "unknown entry point '" + entryName +
                                        "' (artifact has: " + list + ")");
  }
  const Entry &e = a.entries[size_t(ei)];
  if (!unrunnable_[size_t(ei)].empty())
    fail(K3_ERROR_NO_DEVICE, unrunnable_[size_t(ei)]);
  std::vector<std::string> symNames;
  for (auto &s : a.symbols)
    symNames.push_back(s.name);

  // Symbols.
  std::vector<int64_t> sv(a.symbols.size(), 0);
  std::vector<bool> given(a.symbols.size(), false);
  if (nsyms && !syms)
    fail(K3_ERROR_INVALID_ARGUMENT, "symbols is NULL");
  for (size_t i = 0; i < nsyms; ++i) {
    if (!syms[i].name)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "symbol " + std::to_string(i) + " has a NULL name");
    int s = a.findSymbol(syms[i].name);
    if (s < 0)
      fail(K3_ERROR_INVALID_ARGUMENT,
           std::string("unknown symbol '") + syms[i].name + "'");
    if (given[size_t(s)])
      fail(K3_ERROR_INVALID_ARGUMENT,
           std::string("symbol '") + syms[i].name + "' given twice");
    const Symbol &S = a.symbols[size_t(s)];
    if (S.name == kSymbolDeviceSMCount)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "symbol '" + S.name + "' is set by the runtime from the device");
    if (syms[i].value < 0 || syms[i].value > S.maxValue)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "symbol '" + S.name + "' = " + std::to_string(syms[i].value) +
               " is outside the compiled range [0, " +
               std::to_string(S.maxValue) + "]");
    sv[size_t(s)] = syms[i].value;
    given[size_t(s)] = true;
  }
  for (size_t s = 0; s < a.symbols.size(); ++s)
    if (a.symbols[s].name == kSymbolDeviceSMCount) {
      sv[s] = std::min<int64_t>(be_->smCount(), a.symbols[s].maxValue);
      given[s] = true;
    }
  for (size_t s = 0; s < a.symbols.size(); ++s)
    if (entrySyms_[size_t(ei)][s] && !given[s])
      fail(K3_ERROR_INVALID_ARGUMENT, "entry '" + e.name +
                                          "' needs a value for symbol '" +
                                          a.symbols[s].name + "'");
  auto evalShape = [&](const TensorSpec &t, const char *what) {
    std::vector<int64_t> shape;
    std::string err;
    unsigned __int128 bytes = dtypeSize(t.dtype);
    for (auto &d : t.shape) {
      int64_t v;
      if (!evalDim(d, sv.data(), sv.size(), v, err))
        fail(K3_ERROR_INVALID_ARGUMENT,
             std::string(what) + " '" + t.name + "': " + err);
      if (v < 0)
        fail(K3_ERROR_INVALID_ARGUMENT,
             std::string(what) + " '" + t.name + "': dim " +
                 dimToString(d, symNames) + " evaluates to " +
                 std::to_string(v));
      shape.push_back(v);
      bytes *= uint64_t(v);
      if (bytes > (unsigned __int128)(uint64_t(1) << 60))
        bytes = (unsigned __int128)(uint64_t(1) << 60);
    }
    if (bytes > a.buffers[t.buffer].size)
      fail(K3_ERROR_INVALID_ARGUMENT,
           std::string(what) + " '" + t.name + "' of shape " + shapeStr(shape) +
               " needs " + std::to_string(uint64_t(bytes)) +
               " bytes but buffer '" + a.buffers[t.buffer].name + "' has " +
               std::to_string(a.buffers[t.buffer].size));
    return shape;
  };

  // Weights used by this entry must be loaded.
  for (size_t w = 0; w < a.weights.size(); ++w)
    if (entryWeights_[size_t(ei)][w] && !weightLoaded_[w])
      fail(K3_ERROR_WEIGHTS,
           "weight '" + a.weights[w].name +
               "' is not loaded (load weights or use random weights first)");

  // Inputs.
  if (ninputs && !inputs)
    fail(K3_ERROR_INVALID_ARGUMENT, "inputs is NULL");
  std::vector<bool> have(e.inputs.size(), false);
  std::string err;
  for (size_t i = 0; i < ninputs; ++i) {
    const k3_host_tensor &h = inputs[i];
    if (!h.name)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "input " + std::to_string(i) + " has a NULL name");
    size_t k = 0;
    while (k < e.inputs.size() && e.inputs[k].name != h.name)
      ++k;
    if (k == e.inputs.size()) {
      std::string list;
      for (auto &t : e.inputs)
        list += (list.empty() ? "" : ", ") + t.name;
      fail(K3_ERROR_INVALID_ARGUMENT, std::string("entry '") + e.name +
                                          "' has no input '" + h.name +
                                          "' (inputs: " + list + ")");
    }
    if (have[k])
      fail(K3_ERROR_INVALID_ARGUMENT,
           std::string("input '") + h.name + "' given twice");
    have[k] = true;
    const TensorSpec &t = e.inputs[k];
    if (int(h.dtype) != int(t.dtype))
      fail(K3_ERROR_INVALID_ARGUMENT,
           "input '" + t.name + "': dtype " +
               (unsigned(h.dtype) < kNumDTypes ? dtypeName(DType(h.dtype))
                                               : "invalid") +
               ", expected " + dtypeName(t.dtype));
    std::vector<int64_t> want = evalShape(t, "input");
    if (h.rank < 0 || h.rank > K3_MAX_RANK || (h.rank && !h.shape))
      fail(K3_ERROR_INVALID_ARGUMENT,
           "input '" + t.name + "': invalid rank/shape");
    std::vector<int64_t> got(h.shape, h.shape + h.rank);
    if (got != want) {
      std::string expl;
      for (auto &d : t.shape)
        expl += (expl.empty() ? "" : ", ") + dimToString(d, symNames);
      fail(K3_ERROR_INVALID_ARGUMENT, "input '" + t.name + "': shape " +
                                          shapeStr(got) + ", expected " +
                                          shapeStr(want) + " = [" + expl + "]");
    }
    uint64_t bytes = dtypeSize(t.dtype);
    for (int64_t d : want)
      bytes *= uint64_t(d);
    if (h.nbytes != bytes)
      fail(K3_ERROR_INVALID_ARGUMENT,
           "input '" + t.name + "': " + std::to_string(h.nbytes) +
               " bytes given, shape needs " + std::to_string(bytes));
    if (bytes && !h.data)
      fail(K3_ERROR_INVALID_ARGUMENT, "input '" + t.name + "': data is NULL");
    if (inputsOnDevice) {
      if (!be_->copy(bufPtr_[t.buffer], uint64_t(uintptr_t(h.data)), bytes,
                     err))
        fail(K3_ERROR_DEVICE, "copying input '" + t.name + "': " + err);
    }
    // Values kernels rely on (token ids inside the vocabulary, the
    // artifact's bounds on inputs): no call with others gets to a launch
    // (inputs on the device are read back from their buffer for it).
    checkInputValues(*be_, a, e, t, inputsOnDevice ? nullptr : h.data,
                     bufPtr_[t.buffer], bytes);
    if (!inputsOnDevice && !be_->upload(bufPtr_[t.buffer], h.data, bytes, err))
      fail(K3_ERROR_DEVICE, "uploading input '" + t.name + "': " + err);
  }
  for (size_t k = 0; k < e.inputs.size(); ++k)
    if (!have[k])
      fail(K3_ERROR_INVALID_ARGUMENT,
           "entry '" + e.name + "' input '" + e.inputs[k].name + "' not given");
  checkPackedSequences(e, inputs, ninputs, sv, inputsOnDevice);
  std::vector<std::vector<int64_t>> outShapes;
  for (auto &t : e.outputs)
    outShapes.push_back(evalShape(t, "output"));

  // Tensor maps for these symbol values, uploaded before any launch reads
  // them (graph replays included: a graph's kernels read the slots).
  tensorMaps_.refresh(*be_, a, size_t(ei), sv, bufPtr_, weightPtr_);

  // Launches, in order: replayed from a launch graph when this entry ran
  // with these symbol values before, captured into one when the previous
  // run had the same key (a decode loop's second step), else one by one.
  auto launchStart = std::chrono::steady_clock::now();
  std::vector<int64_t> key{int64_t(ei)};
  key.insert(key.end(), sv.begin(), sv.end());
  void *replay = nullptr;
  bool capture = false;
  // Timing marks: 0 and 1 around the whole entry (time()); a pair around
  // each profiled launch, 2 + 2k and 3 + 2k for the k-th (a pair, not one
  // mark between two launches, so that the device waiting for the host
  // between two launches is counted for neither).
  const bool profile = profiling_, timed = timing_;
  if (profile || timed)
    ensureMarks(2 + 2 * e.launches.size());
  auto mark = [&](size_t i) {
    if (!be_->recordMark(marks_[i], err))
      fail(K3_ERROR_DEVICE, "entry '" + e.name + "': timing mark: " + err);
  };
  struct Profiled {
    size_t launch;
    int64_t grid[3], block[3];
  };
  std::vector<Profiled> profiled;
  // Profiling times each launch on its own: no launch graphs meanwhile.
  if (graphsEnabled_ && !profile) {
    for (size_t gi = 0; gi < graphs_.size() && !replay; ++gi)
      if (graphs_[gi].entry == ei && graphs_[gi].symbols == sv)
        replay = graphs_[gi].exec;
    if (!replay && key == lastKey_) {
      capture = be_->beginCapture(err);
      if (!capture) {
        graphsEnabled_ = false;
        graphsOff_ = err;
      }
    }
  }
  // Evaluates every launch's dimensions and arguments and launches (or,
  // while capturing, records) it.
  auto launchAll = [&]() {
    std::vector<std::vector<uint64_t>>
        slotStore; // kept alive until the graph is built
    std::vector<void *> params;
    for (size_t li = 0; li < e.launches.size(); ++li) {
      const Launch &l = e.launches[li];
      auto where = [&]() {
        return "entry '" + e.name + "' launch " + std::to_string(li) + " ('" +
               l.kernel + "')";
      };
      int64_t grid[3], block[3], smem;
      bool empty = false;
      for (int k = 0; k < 7; ++k) {
        const DimExpr &d = k < 3   ? l.grid[k]
                           : k < 6 ? l.block[k - 3]
                                   : l.sharedMemBytes;
        int64_t v;
        if (!evalDim(d, sv.data(), sv.size(), v, err))
          fail(K3_ERROR_INVALID_ARGUMENT, where() + ": " + err);
        if (v < 0)
          fail(K3_ERROR_INVALID_ARGUMENT,
               where() + ": launch dim " + dimToString(d, symNames) +
                   " evaluates to " + std::to_string(v));
        if (k < 3) {
          grid[k] = v;
          empty |= (v == 0);
        } else if (k < 6) {
          if (v == 0)
            fail(K3_ERROR_INVALID_ARGUMENT, where() + ": block dim is 0");
          block[k - 3] = v;
        } else
          smem = v;
      }
      if (empty)
        continue; // nothing to do for an empty grid (e.g. zero tokens)
      slotStore.emplace_back(l.args.size(), 0);
      std::vector<uint64_t> &slots = slotStore.back();
      params.assign(l.args.size() + 1, nullptr);
      for (size_t ai = 0; ai < l.args.size(); ++ai) {
        const Arg &g = l.args[ai];
        uint64_t &slot = slots[ai];
        switch (g.kind) {
        case ArgKind::Buffer:
          slot = bufPtr_[g.index] + g.offset;
          break;
        case ArgKind::Weight:
          slot = weightPtr_[g.index];
          break;
        case ArgKind::I32: {
          int32_t v = int32_t(g.imm);
          memcpy(&slot, &v, 4);
          break;
        }
        case ArgKind::I64: {
          int64_t v = g.imm;
          memcpy(&slot, &v, 8);
          break;
        }
        case ArgKind::F32:
          memcpy(&slot, &g.fimm, 4);
          break;
        case ArgKind::Symbol: {
          int64_t v = sv[g.index];
          memcpy(&slot, &v, 8);
          break;
        }
        case ArgKind::TensorMap: // u64 device address of the CUtensorMap
          slot = tensorMaps_.address(size_t(ei), li, ai);
          break;
        }
        params[ai] = &slot;
      }
      if (profile)
        mark(2 + 2 * profiled.size());
      if (!be_->launch(kernels_[size_t(ei)][li], l.kernel, grid, block, smem,
                       params.data(), l.args.size(), err))
        fail(K3_ERROR_DEVICE, where() + ": " + err);
      if (profile) {
        mark(3 + 2 * profiled.size());
        profiled.push_back(
            {li, {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}});
      }
    }
  };
  if (replay) {
    ++graphReplays_;
  } else if (capture) {
    // Whatever leaves the capture (an error in an argument, a launch that
    // fails), the backend must not stay capturing: later launches would be
    // recorded, not run.
    struct CaptureGuard {
      Backend *be;
      bool open = true;
      ~CaptureGuard() {
        if (!open)
          return;
        void *dropped = nullptr;
        std::string ignored;
        if (be->endCapture(dropped, ignored) && dropped)
          be->destroyGraph(dropped);
      }
    } guard{be_.get()};
    launchAll();
    guard.open = false;
    void *exec = nullptr;
    if (be_->endCapture(exec, err)) {
      if (graphs_.size() == kMaxGraphs) {
        be_->destroyGraph(graphs_.front().exec);
        graphs_.erase(graphs_.begin());
      }
      graphs_.push_back({ei, sv, exec});
      ++graphsCaptured_;
      replay = exec;
    } else {
      // The recorded launches never ran: run them one by one, and stop
      // capturing in this session (the failure would repeat).
      graphsEnabled_ = false;
      graphsOff_ = "capturing a launch graph: " + err;
      if (timed)
        mark(0);
      launchAll();
    }
  } else {
    if (timed)
      mark(0);
    launchAll();
  }
  if (replay) {
    if (timed)
      mark(0);
    if (!be_->launchGraph(replay, err))
      fail(K3_ERROR_DEVICE, "entry '" + e.name + "' (launch graph): " + err);
  }
  if (timed)
    mark(1);
  if (!be_->synchronize(err))
    fail(K3_ERROR_DEVICE, "entry '" + e.name + "': " + err);
  if (timed && !be_->markElapsedMs(marks_[0], marks_[1], lastTimedMs_, err))
    fail(K3_ERROR_DEVICE, "entry '" + e.name + "': timing: " + err);
  if (profile) {
    for (size_t k = 0; k < profiled.size(); ++k) {
      double ms = 0;
      if (!be_->markElapsedMs(marks_[2 + 2 * k], marks_[3 + 2 * k], ms, err))
        fail(K3_ERROR_DEVICE, "entry '" + e.name + "': profiling: " + err);
      const Profiled &p = profiled[k];
      const std::string &kname = e.launches[p.launch].kernel;
      KernelProfile &kp = profile_[{ei, kname}];
      bool sameDims = true;
      for (int d = 0; d < 3; ++d)
        sameDims &= kp.grid[d] == p.grid[d] && kp.block[d] == p.block[d];
      if (kp.calls == 0) {
        kp.entry = e.name;
        kp.kernel = kname;
        kp.minMs = kp.maxMs = ms;
        for (int d = 0; d < 3; ++d) {
          kp.grid[d] = p.grid[d];
          kp.block[d] = p.block[d];
        }
      } else {
        kp.dimsVaried |= !sameDims;
        kp.minMs = std::min(kp.minMs, ms);
        kp.maxMs = std::max(kp.maxMs, ms);
      }
      ++kp.calls;
      kp.totalMs += ms;
    }
    ++profileRuns_[ei];
  }
  lastKey_ = key; // only a run that got this far counts as the previous one
  lastLaunchMs_ = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - launchStart)
                      .count();

  lastEntry_ = ei;
  lastOutShapes_ = outShapes;
  if (download)
    fetchOutputs();
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
    if (nbytes && !be_->download(dst, bufPtr_[t.buffer] + offset, nbytes, err))
      fail(K3_ERROR_DEVICE, "downloading output '" + name + "': " + err);
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
