// Session::run: one call of an entry point — its symbols and inputs
// checked and staged, its launches run one by one, captured into a launch
// graph or replayed from one, timed or profiled on request.
#include "session.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "input_checks.h"

namespace k3 {
namespace rt {

using namespace artifact;

namespace {
std::vector<std::string> symbolNames(const Artifact &a) {
  std::vector<std::string> names;
  for (auto &s : a.symbols)
    names.push_back(s.name);
  return names;
}
} // namespace

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

size_t Session::entryIndex(const std::string &entryName) const {
  const Artifact &a = *art_;
  int ei = a.findEntry(entryName);
  if (ei < 0) {
    std::string list;
    for (auto &e : a.entries)
      list += (list.empty() ? "" : ", ") + e.name;
    fail(K3_ERROR_INVALID_ARGUMENT, "unknown entry point '" + entryName +
                                        "' (artifact has: " + list + ")");
  }
  if (!unrunnable_[size_t(ei)].empty())
    fail(K3_ERROR_NO_DEVICE, unrunnable_[size_t(ei)]);
  return size_t(ei);
}

std::vector<int64_t> Session::symbolValues(size_t ei,
                                           const k3_symbol_value *syms,
                                           size_t nsyms) const {
  const Artifact &a = *art_;
  const Entry &e = a.entries[ei];
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
    if (entrySyms_[ei][s] && !given[s])
      fail(K3_ERROR_INVALID_ARGUMENT, "entry '" + e.name +
                                          "' needs a value for symbol '" +
                                          a.symbols[s].name + "'");
  return sv;
}

std::vector<int64_t> Session::evalShape(const TensorSpec &t, const char *what,
                                        const std::vector<int64_t> &sv) const {
  const Artifact &a = *art_;
  std::vector<std::string> symNames = symbolNames(a);
  std::vector<int64_t> shape;
  std::string err;
  unsigned __int128 bytes = dtypeSize(t.dtype);
  for (auto &d : t.shape) {
    int64_t v;
    if (!evalDim(d, sv.data(), sv.size(), v, err))
      fail(K3_ERROR_INVALID_ARGUMENT,
           std::string(what) + " '" + t.name + "': " + err);
    if (v < 0)
      fail(K3_ERROR_INVALID_ARGUMENT, std::string(what) + " '" + t.name +
                                          "': dim " + dimToString(d, symNames) +
                                          " evaluates to " + std::to_string(v));
    shape.push_back(v);
    bytes *= uint64_t(v);
    if (bytes > (unsigned __int128)(uint64_t(1) << 60))
      bytes = (unsigned __int128)(uint64_t(1) << 60);
  }
  if (bytes > a.buffers[t.buffer].size)
    fail(K3_ERROR_INVALID_ARGUMENT,
         std::string(what) + " '" + t.name + "' of shape " +
             shapeString(shape) + " needs " + std::to_string(uint64_t(bytes)) +
             " bytes but buffer '" + a.buffers[t.buffer].name + "' has " +
             std::to_string(a.buffers[t.buffer].size));
  return shape;
}

void Session::stageInput(const Entry &e, const TensorSpec &t,
                         const k3_host_tensor &h,
                         const std::vector<int64_t> &sv, bool inputsOnDevice) {
  const Artifact &a = *art_;
  std::vector<std::string> symNames = symbolNames(a);
  std::string err;
  if (int(h.dtype) != int(t.dtype))
    fail(K3_ERROR_INVALID_ARGUMENT,
         "input '" + t.name + "': dtype " +
             (unsigned(h.dtype) < kNumDTypes ? dtypeName(DType(h.dtype))
                                             : "invalid") +
             ", expected " + dtypeName(t.dtype));
  std::vector<int64_t> want = evalShape(t, "input", sv);
  if (h.rank < 0 || h.rank > K3_MAX_RANK || (h.rank && !h.shape))
    fail(K3_ERROR_INVALID_ARGUMENT,
         "input '" + t.name + "': invalid rank/shape");
  std::vector<int64_t> got(h.shape, h.shape + h.rank);
  if (got != want) {
    std::string expl;
    for (auto &d : t.shape)
      expl += (expl.empty() ? "" : ", ") + dimToString(d, symNames);
    fail(K3_ERROR_INVALID_ARGUMENT,
         "input '" + t.name + "': shape " + shapeString(got) + ", expected " +
             shapeString(want) + " = [" + expl + "]");
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
    if (!be_->copy(bufPtr_[t.buffer], uint64_t(uintptr_t(h.data)), bytes, err))
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

void Session::stageRankInput(const Entry &e, const TensorSpec &t,
                             const std::string &group,
                             const std::vector<int64_t> &sv) {
  int32_t coord = int32_t(partition_.rankIn(group, rank_));
  int64_t one = 1;
  k3_host_tensor h{t.name.c_str(), K3_DTYPE_I32, 1, &one, &coord, sizeof coord};
  stageInput(e, t, h, sv, /*inputsOnDevice=*/false);
}

void Session::stageInputs(size_t ei, const std::vector<int64_t> &sv,
                          const k3_host_tensor *inputs, size_t ninputs,
                          bool inputsOnDevice) {
  const Artifact &a = *art_;
  const Entry &e = a.entries[ei];
  // Weights used by this entry must be loaded.
  for (size_t w = 0; w < a.weights.size(); ++w)
    if (entryWeights_[ei][w] && !weightLoaded_[w])
      fail(K3_ERROR_WEIGHTS,
           "weight '" + a.weights[w].name +
               "' is not loaded (load weights or use random weights first)");

  // Inputs.
  if (ninputs && !inputs)
    fail(K3_ERROR_INVALID_ARGUMENT, "inputs is NULL");
  std::vector<bool> have(e.inputs.size(), false);
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
    if (isRankInput(h.name))
      fail(K3_ERROR_INVALID_ARGUMENT,
           std::string("input '") + h.name +
               "' is filled by the runtime (the rank's coordinate in its "
               "group); do not pass it");
    have[k] = true;
    stageInput(e, e.inputs[k], h, sv, inputsOnDevice);
  }
  for (size_t k = 0; k < e.inputs.size(); ++k) {
    std::string group;
    if (!have[k] && isRankInput(e.inputs[k].name, &group)) {
      stageRankInput(e, e.inputs[k], group, sv);
      continue;
    }
    if (!have[k])
      fail(K3_ERROR_INVALID_ARGUMENT,
           "entry '" + e.name + "' input '" + e.inputs[k].name + "' not given");
  }
  checkPackedSequences(e, inputs, ninputs, sv, inputsOnDevice);
}

namespace {
/// Grid, block and dynamic shared memory of launch `li` of `e` for these
/// symbol values; false for an empty grid (e.g. zero tokens).
bool launchDims(const Entry &e, size_t li, const std::vector<int64_t> &sv,
                const std::vector<std::string> &symNames, int64_t grid[3],
                int64_t block[3], int64_t &smem) {
  const Launch &l = e.launches[li];
  auto where = [&]() {
    return "entry '" + e.name + "' launch " + std::to_string(li) + " ('" +
           l.kernel + "')";
  };
  std::string err;
  bool empty = false;
  for (int k = 0; k < 7; ++k) {
    const DimExpr &d = k < 3   ? l.grid[k]
                       : k < 6 ? l.block[k - 3]
                               : l.sharedMemBytes;
    int64_t v;
    if (!evalDim(d, sv.data(), sv.size(), v, err))
      fail(K3_ERROR_INVALID_ARGUMENT, where() + ": " + err);
    if (v < 0)
      fail(K3_ERROR_INVALID_ARGUMENT, where() + ": launch dim " +
                                          dimToString(d, symNames) +
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
  return !empty;
}
} // namespace

void Session::argumentSlots(size_t ei, size_t li,
                            const std::vector<int64_t> &sv,
                            std::vector<uint64_t> &slots) {
  const Launch &l = art_->entries[ei].launches[li];
  slots.assign(l.args.size(), 0);
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
      slot = tensorMaps_.address(ei, li, ai);
      break;
    }
  }
}

void Session::launchAll(size_t ei, const std::vector<int64_t> &sv,
                        std::vector<ProfiledLaunch> *profiled,
                        const LaunchLanes *lanes) {
  const Entry &e = art_->entries[ei];
  std::vector<std::string> symNames = symbolNames(*art_);
  std::string err;
  std::vector<uint64_t> slots;
  std::vector<void *> params;
  for (size_t li = 0; li < e.launches.size(); ++li) {
    const Launch &l = e.launches[li];
    if (l.object == kCollectiveObject) {
      runCollective(e, li, sv);
      continue;
    }
    int64_t grid[3], block[3], smem = 0;
    if (!launchDims(e, li, sv, symNames, grid, block, smem))
      continue;
    // The backend reads the values at the launch (and a capture records
    // them), so one set of slots serves every launch.
    argumentSlots(ei, li, sv, slots);
    params.assign(l.args.size() + 1, nullptr);
    for (size_t ai = 0; ai < l.args.size(); ++ai)
      params[ai] = &slots[ai];
    if (profiled)
      mark(e, 2 + 2 * profiled->size());
    const size_t step = lanes ? lanes->stepOf[li] : LaunchLanes::kNoStep;
    const LaneStep *lane =
        step == LaunchLanes::kNoStep ? nullptr : &lanes->plan.steps[step];
    auto where = [&] {
      return "entry '" + e.name + "' launch " + std::to_string(li) + " ('" +
             l.kernel + "'): ";
    };
    if (lane && !be_->useLane(lane->lane, lane->waitFor, err))
      fail(K3_ERROR_DEVICE, where() + err);
    if (!be_->launch(kernels_[ei][li], l.kernel, grid, block, smem,
                     params.data(), l.args.size(), err))
      fail(K3_ERROR_DEVICE, where() + err);
    if (lane && lane->signals && !be_->markLaunch(step, err))
      fail(K3_ERROR_DEVICE, where() + err);
    if (profiled) {
      mark(e, 3 + 2 * profiled->size());
      profiled->push_back(
          {li, {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}});
    }
  }
}

void Session::mark(const Entry &e, size_t i) {
  std::string err;
  if (!be_->recordMark(marks_[i], err))
    fail(K3_ERROR_DEVICE, "entry '" + e.name + "': timing mark: " + err);
}

void Session::recordProfile(size_t ei,
                            const std::vector<ProfiledLaunch> &profiled) {
  const Entry &e = art_->entries[ei];
  std::string err;
  for (size_t k = 0; k < profiled.size(); ++k) {
    double ms = 0;
    if (!be_->markElapsedMs(marks_[2 + 2 * k], marks_[3 + 2 * k], ms, err))
      fail(K3_ERROR_DEVICE, "entry '" + e.name + "': profiling: " + err);
    const ProfiledLaunch &p = profiled[k];
    const std::string &kname = e.launches[p.launch].kernel;
    KernelProfile &kp = profile_[{int(ei), kname}];
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
  ++profileRuns_[int(ei)];
}

void Session::launchEntry(size_t ei, const std::vector<int64_t> &sv) {
  const Entry &e = art_->entries[ei];
  std::string err;
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
  std::vector<ProfiledLaunch> profiled;
  std::vector<ProfiledLaunch> *profiling = profile ? &profiled : nullptr;
  // Profiling times each launch on its own: no launch graphs meanwhile.
  if (graphsEnabled_ && !profile) {
    for (size_t gi = 0; gi < graphs_.size() && !replay; ++gi)
      if (graphs_[gi].entry == int(ei) && graphs_[gi].symbols == sv)
        replay = graphs_[gi].exec;
    if (!replay && key == lastKey_) {
      // Overlapped launches pay in a decode step's short kernels and cost
      // in prefill, whose next kernel's early blocks hold SM slots while
      // the previous one drains: 41.3 ms against 39.9 at T = 1024 (bench/
      // results/e2e-checks/prefill-grid-overlap-ab-nvidia-h200-20261203T0110Z.txt).
      be_->setGridOverlap(gridOverlap_ && (gridOverlapPrefill_ ||
                                           isOneTokenEntry(*art_, e.name)));
      capture = be_->beginCapture(err);
      if (!capture) {
        graphsEnabled_ = false;
        graphsOff_ = err;
      }
    }
  }
  if (replay) {
    ++graphReplays_;
  } else if (capture) {
    replay = captureGraph(ei, sv);
    if (!replay) {
      if (timed)
        mark(e, 0);
      launchAll(ei, sv, profiling);
    }
  } else {
    if (timed)
      mark(e, 0);
    launchAll(ei, sv, profiling);
  }
  if (replay) {
    if (timed)
      mark(e, 0);
    if (!be_->launchGraph(replay, err))
      fail(K3_ERROR_DEVICE, "entry '" + e.name + "' (launch graph): " + err);
  }
  if (timed)
    mark(e, 1);
  if (!be_->synchronize(err))
    fail(K3_ERROR_DEVICE, "entry '" + e.name + "': " + err);
  if (timed && !be_->markElapsedMs(marks_[0], marks_[1], lastTimedMs_, err))
    fail(K3_ERROR_DEVICE, "entry '" + e.name + "': timing: " + err);
  if (profile)
    recordProfile(ei, profiled);
  lastKey_ = key; // only a run that got this far counts as the previous one
  lastLaunchMs_ = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - launchStart)
                      .count();
}

void *Session::captureGraph(size_t ei, const std::vector<int64_t> &sv) {
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
  std::unique_ptr<LaunchLanes> lanes = graphLanePlan(ei, sv);
  launchAll(ei, sv, nullptr, lanes.get());
  guard.open = false;
  void *exec = nullptr;
  std::string err;
  if (!be_->endCapture(exec, err)) {
    // The recorded launches never ran: the caller runs them one by one;
    // stop capturing in this session (the failure would repeat).
    graphsEnabled_ = false;
    graphsOff_ = "capturing a launch graph: " + err;
    return nullptr;
  }
  if (graphs_.size() == kMaxGraphs) {
    be_->destroyGraph(graphs_.front().exec);
    graphs_.erase(graphs_.begin());
  }
  graphs_.push_back({int(ei), sv, exec});
  ++graphsCaptured_;
  graphLanesUsed_ = lanes ? lanes->plan.lanesUsed : 1;
  graphLaneWaits_ = lanes ? lanes->plan.waits : 0;
  return exec;
}

void Session::run(const std::string &entryName, const k3_symbol_value *syms,
                  size_t nsyms, const k3_host_tensor *inputs, size_t ninputs,
                  bool download, bool inputsOnDevice) {
  // A context-parallel entry: each cp coordinate gets its segments (from
  // rank 0, or under MPI each process cuts its own).
  if ((leadsRanks() || (ownProcess_ && !inContextCall_)) &&
      contextParallel(art_->entries[entryIndex(entryName)]))
    return runContextParallel(entryIndex(entryName), syms, nsyms, inputs,
                              ninputs, inputsOnDevice);
  // Every rank gets the same inputs; rank 0's outputs are the call's.
  if (leadsRanks())
    return forEachRank([&](Session &s) {
      s.run(entryName, syms, nsyms, inputs, ninputs, download && &s == this,
            inputsOnDevice);
    });
  const Artifact &a = *art_;
  outputs_.clear();
  contextOutputs_ = false;
  lastEntry_ = -1;
  size_t ei = entryIndex(entryName);
  const Entry &e = a.entries[ei];
  std::vector<int64_t> sv = symbolValues(ei, syms, nsyms);
  stageInputs(ei, sv, inputs, ninputs, inputsOnDevice);
  std::vector<std::vector<int64_t>> outShapes;
  for (auto &t : e.outputs)
    outShapes.push_back(evalShape(t, "output", sv));
  // Tensor maps for these symbol values, uploaded before any launch reads
  // them (graph replays included: a graph's kernels read the slots).
  tensorMaps_.refresh(*be_, a, ei, sv, bufPtr_, weightPtr_);
  launchEntry(ei, sv);
  lastEntry_ = int(ei);
  lastOutShapes_ = outShapes;
  if (download)
    fetchOutputs();
}

} // namespace rt
} // namespace k3
