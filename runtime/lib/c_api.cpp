// C API wrappers: exceptions never cross this boundary.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "footprint.h"
#include "generation.h"
#include "k3/k3_runtime.h"
#include "sampling.h"
#include "session.h"

using namespace k3;
using k3::rt::Error;

struct k3_artifact {
  std::shared_ptr<const artifact::Artifact> art;
};
struct k3_session {
  std::unique_ptr<rt::Session> s;
  std::vector<rt::KernelProfile> profile; // k3_session_profile_snapshot
  std::string randomPlace;                // k3_session_random_weights_place
  rt::WeightLoadStats loadStats;          // k3_session_load_stats
  k3_progress_fn loadProgress = nullptr;  // k3_session_set_load_progress
  void *loadProgressUser = nullptr;
};
struct k3_generation {
  std::unique_ptr<rt::Generation> g;
};

namespace {
thread_local std::string g_lastError;

k3_status setError(k3_status s, const std::string &msg) {
  g_lastError = msg;
  return s;
}

template <typename F> k3_status guard(F &&f) {
  try {
    f();
    return K3_OK;
  } catch (const Error &e) {
    return setError(e.status, e.message);
  } catch (const std::bad_alloc &) {
    return setError(K3_ERROR_INTERNAL, "out of host memory");
  } catch (const std::exception &e) {
    return setError(K3_ERROR_INTERNAL,
                    std::string("internal error: ") + e.what());
  } catch (...) {
    return setError(K3_ERROR_INTERNAL, "internal error");
  }
}

k3_status openBytes(const uint8_t *data, size_t size, const std::string &name,
                    k3_artifact **out) {
  auto a = std::make_shared<artifact::Artifact>();
  std::string err;
  if (!artifact::deserialize(data, size, *a, err))
    return setError(K3_ERROR_FORMAT, name + ": " + err);
  *out = new k3_artifact{a};
  return K3_OK;
}

void fillSpec(const artifact::Artifact &a, const artifact::TensorSpec &t,
              k3_tensor_spec *out) {
  std::vector<int64_t> maxv;
  for (auto &s : a.symbols)
    maxv.push_back(s.maxValue);
  out->name = t.name.c_str();
  out->dtype = k3_dtype(t.dtype);
  out->rank = int32_t(t.shape.size());
  for (size_t i = 0; i < t.shape.size() && i < K3_MAX_RANK; ++i) {
    int64_t v = -1;
    std::string err;
    if (!artifact::evalDim(t.shape[i], maxv.data(), maxv.size(), v, err))
      v = -1;
    out->max_shape[i] = v;
  }
}

void fillView(const rt::OutputTensor &o, k3_tensor_view *out) {
  memset(out, 0, sizeof *out);
  out->name = o.name.c_str();
  out->dtype = k3_dtype(o.dtype);
  out->rank = int32_t(o.shape.size());
  for (size_t i = 0; i < o.shape.size() && i < K3_MAX_RANK; ++i)
    out->shape[i] = o.shape[i];
  out->data = o.data.data();
  out->nbytes = o.data.size();
}

/// A session of `a` on `device` made by `make` (`fn` names the call in
/// errors).
template <typename Make>
k3_status createSession(const char *fn, const k3_artifact *a,
                        const char *device, k3_session **out, Make make) {
  if (!a || !device || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    std::string(fn) + ": NULL argument");
  *out = nullptr;
  return guard([&] {
    std::unique_ptr<rt::Session> s = make();
    *out = new k3_session{std::move(s), {}, {}, {}, nullptr, nullptr};
  });
}
} // namespace

extern "C" {

int k3_runtime_api_version(void) { return K3_RUNTIME_API_VERSION; }
const char *k3_last_error(void) { return g_lastError.c_str(); }
const char *k3_status_name(k3_status s) {
  switch (s) {
  case K3_OK:
    return "ok";
  case K3_ERROR_INVALID_ARGUMENT:
    return "invalid argument";
  case K3_ERROR_IO:
    return "I/O error";
  case K3_ERROR_FORMAT:
    return "format error";
  case K3_ERROR_NO_DEVICE:
    return "device unavailable";
  case K3_ERROR_DEVICE:
    return "device error";
  case K3_ERROR_WEIGHTS:
    return "weights error";
  case K3_ERROR_INTERNAL:
    return "internal error";
  case K3_ERROR_OUT_OF_MEMORY:
    return "out of device memory";
  }
  return "unknown status";
}
size_t k3_dtype_size(k3_dtype t) {
  return unsigned(t) < artifact::kNumDTypes
             ? artifact::dtypeSize(artifact::DType(t))
             : 0;
}
const char *k3_dtype_name(k3_dtype t) {
  return unsigned(t) < artifact::kNumDTypes
             ? artifact::dtypeName(artifact::DType(t))
             : "invalid";
}

k3_status k3_artifact_open(const char *path, k3_artifact **out) {
  if (!path || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_artifact_open: NULL argument");
  *out = nullptr;
  return guard([&] {
    std::vector<uint8_t> bytes;
    std::string err;
    if (!k3::artifact::readWholeFile(path, bytes, err))
      rt::fail(K3_ERROR_IO, err);
    k3_status s = openBytes(bytes.data(), bytes.size(), path, out);
    if (s != K3_OK)
      rt::fail(s, g_lastError);
  });
}
k3_status k3_artifact_open_memory(const void *data, size_t size,
                                  k3_artifact **out) {
  if ((!data && size) || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_artifact_open_memory: NULL argument");
  *out = nullptr;
  return guard([&] {
    k3_status s =
        openBytes(static_cast<const uint8_t *>(data), size, "<memory>", out);
    if (s != K3_OK)
      rt::fail(s, g_lastError);
  });
}
void k3_artifact_close(k3_artifact *a) { delete a; }
const char *k3_artifact_metadata(const k3_artifact *a, const char *key) {
  if (!a || !key)
    return nullptr;
  const std::string *v = a->art->meta(key);
  return v ? v->c_str() : nullptr;
}
size_t k3_artifact_num_metadata(const k3_artifact *a) {
  return a ? a->art->metadata.size() : 0;
}
const char *k3_artifact_metadata_key(const k3_artifact *a, size_t i) {
  return a && i < a->art->metadata.size() ? a->art->metadata[i].first.c_str()
                                          : nullptr;
}
size_t k3_artifact_num_entries(const k3_artifact *a) {
  return a ? a->art->entries.size() : 0;
}
const char *k3_artifact_entry_name(const k3_artifact *a, size_t i) {
  return a && i < a->art->entries.size() ? a->art->entries[i].name.c_str()
                                         : nullptr;
}
size_t k3_artifact_num_weights(const k3_artifact *a) {
  return a ? a->art->weights.size() : 0;
}
k3_status k3_artifact_memory_footprint(const k3_artifact *a,
                                       k3_memory_footprint *out) {
  if (!a || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_artifact_memory_footprint: NULL argument");
  rt::Footprint f = rt::footprint(*a->art);
  *out = {f.weights,     f.activations,   f.io,     f.state,
          f.statePerSeq, f.cachePerToken, f.total()};
  return K3_OK;
}
size_t k3_artifact_num_symbols(const k3_artifact *a) {
  return a ? a->art->symbols.size() : 0;
}
const char *k3_artifact_symbol_name(const k3_artifact *a, size_t i) {
  return a && i < a->art->symbols.size() ? a->art->symbols[i].name.c_str()
                                         : nullptr;
}
int64_t k3_artifact_symbol_max(const k3_artifact *a, size_t i) {
  return a && i < a->art->symbols.size() ? a->art->symbols[i].maxValue : -1;
}
size_t k3_artifact_num_buffers(const k3_artifact *a) {
  return a ? a->art->buffers.size() : 0;
}
k3_status k3_artifact_buffer_info(const k3_artifact *a, size_t id,
                                  k3_buffer_info *out) {
  if (!a || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_artifact_buffer_info: NULL argument");
  if (id >= a->art->buffers.size())
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "buffer id " + std::to_string(id) + " out of range");
  const auto &b = a->art->buffers[id];
  out->name = b.name.c_str();
  out->kind = k3_buffer_kind(b.kind);
  out->size = b.size;
  out->per_seq_stride = b.perSeqStride;
  out->device = b.device;
  out->flags = b.flags;
  return K3_OK;
}
size_t k3_artifact_entry_num_inputs(const k3_artifact *a, size_t e) {
  return a && e < a->art->entries.size() ? a->art->entries[e].inputs.size() : 0;
}
size_t k3_artifact_entry_num_outputs(const k3_artifact *a, size_t e) {
  return a && e < a->art->entries.size() ? a->art->entries[e].outputs.size()
                                         : 0;
}
k3_status k3_artifact_entry_input(const k3_artifact *a, size_t e, size_t i,
                                  k3_tensor_spec *out) {
  if (!a || !out || e >= a->art->entries.size() ||
      i >= a->art->entries[e].inputs.size())
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_artifact_entry_input: index out of range");
  fillSpec(*a->art, a->art->entries[e].inputs[i], out);
  return K3_OK;
}
k3_status k3_artifact_entry_output(const k3_artifact *a, size_t e, size_t i,
                                   k3_tensor_spec *out) {
  if (!a || !out || e >= a->art->entries.size() ||
      i >= a->art->entries[e].outputs.size())
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_artifact_entry_output: index out of range");
  fillSpec(*a->art, a->art->entries[e].outputs[i], out);
  return K3_OK;
}

k3_status k3_session_create(const k3_artifact *a, const char *device,
                            k3_session **out) {
  return createSession("k3_session_create", a, device, out, [&] {
    return std::make_unique<rt::Session>(a->art, device);
  });
}
k3_status k3_session_create_mpi(const k3_artifact *a, const char *device,
                                k3_session **out) {
  return createSession("k3_session_create_mpi", a, device, out,
                       [&] { return rt::Session::mpiRank(a->art, device); });
}
void k3_session_destroy(k3_session *s) { delete s; }
uint32_t k3_session_rank(const k3_session *s) { return s ? s->s->rank() : 0; }
const char *k3_session_device_name(const k3_session *s) {
  return s ? s->s->deviceName().c_str() : "";
}
k3_status k3_session_load_weights(k3_session *s, const char *const *paths,
                                  size_t n) {
  if (!s || (n && !paths))
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_load_weights: NULL argument");
  return guard([&] {
    std::vector<std::string> p;
    for (size_t i = 0; i < n; ++i) {
      if (!paths[i])
        rt::fail(K3_ERROR_INVALID_ARGUMENT,
                 "weight path " + std::to_string(i) + " is NULL");
      p.push_back(paths[i]);
    }
    std::function<void(uint64_t, uint64_t)> progress;
    if (k3_progress_fn fn = s->loadProgress)
      progress = [fn, user = s->loadProgressUser](
                     uint64_t done, uint64_t total) { fn(user, done, total); };
    s->loadStats = s->s->loadWeights(p, progress);
  });
}
void k3_session_set_load_progress(k3_session *s, k3_progress_fn fn,
                                  void *user) {
  if (s) {
    s->loadProgress = fn;
    s->loadProgressUser = user;
  }
}
void k3_session_load_stats(const k3_session *s, k3_load_stats *out) {
  if (!out)
    return;
  *out = k3_load_stats{0, 0, 0.0};
  if (s) {
    out->bytes = s->loadStats.bytes;
    out->files = s->loadStats.files;
    out->seconds = s->loadStats.seconds;
  }
}
k3_status k3_session_set_weight(k3_session *s, const char *name,
                                const void *data, size_t bytes) {
  if (!s || !name || (bytes && !data))
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_set_weight: NULL argument");
  return guard([&] { s->s->setWeight(name, data, bytes); });
}
k3_status k3_session_init_random_weights(k3_session *s, uint64_t seed) {
  if (!s)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_init_random_weights: NULL session");
  return guard([&] { s->randomPlace = s->s->initRandomWeights(seed); });
}
const char *k3_session_random_weights_place(const k3_session *s) {
  return s ? s->randomPlace.c_str() : "";
}
k3_status k3_session_reset_state(k3_session *s, int64_t slot) {
  if (!s)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_reset_state: NULL session");
  return guard([&] { s->s->resetState(slot); });
}
double k3_session_last_launch_ms(const k3_session *s) {
  return s && s->s ? s->s->lastLaunchMs() : 0.0;
}

void k3_session_graph_stats(const k3_session *s, size_t *captured,
                            size_t *replayed) {
  if (captured)
    *captured = s && s->s ? s->s->graphsCaptured() : 0;
  if (replayed)
    *replayed = s && s->s ? s->s->graphReplays() : 0;
}

void k3_session_graph_lanes(const k3_session *s, size_t *lanes, size_t *waits) {
  if (lanes)
    *lanes = s && s->s ? s->s->graphLanesUsed() : 1;
  if (waits)
    *waits = s && s->s ? s->s->graphLaneWaits() : 0;
}

k3_status k3_session_run(k3_session *s, const char *entry,
                         const k3_symbol_value *syms, size_t nsyms,
                         const k3_host_tensor *inputs, size_t ninputs) {
  if (!s || !entry)
    return setError(K3_ERROR_INVALID_ARGUMENT, "k3_session_run: NULL argument");
  return guard([&] { s->s->run(entry, syms, nsyms, inputs, ninputs); });
}
size_t k3_session_num_outputs(const k3_session *s) {
  return s ? s->s->outputs().size() : 0;
}
k3_status k3_session_output(const k3_session *s, size_t i,
                            k3_tensor_view *out) {
  if (!s || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_output: NULL argument");
  if (i >= s->s->outputs().size())
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "output index " + std::to_string(i) + " out of range");
  fillView(s->s->outputs()[i], out);
  return K3_OK;
}
k3_status k3_session_find_output(const k3_session *s, const char *name,
                                 k3_tensor_view *out) {
  if (!s || !name || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_find_output: NULL argument");
  for (auto &o : s->s->outputs())
    if (o.name == name) {
      fillView(o, out);
      return K3_OK;
    }
  return setError(K3_ERROR_INVALID_ARGUMENT,
                  std::string("no output '") + name + "' from the last run");
}
/// Device tensors in the session's input form: the device address in
/// `data` (Session::run reads it as a device pointer with inputsOnDevice).
static std::vector<k3_host_tensor> asHostViews(const k3_device_tensor *inputs,
                                               size_t n) {
  std::vector<k3_host_tensor> in(n);
  for (size_t i = 0; i < n; ++i)
    in[i] = {inputs[i].name,
             inputs[i].dtype,
             inputs[i].rank,
             inputs[i].shape,
             reinterpret_cast<const void *>(uintptr_t(inputs[i].data)),
             inputs[i].nbytes};
  return in;
}
k3_status k3_session_run_device(k3_session *s, const char *entry,
                                const k3_symbol_value *syms, size_t nsyms,
                                const k3_device_tensor *inputs,
                                size_t ninputs) {
  if (!s || !entry || (ninputs && !inputs))
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_run_device: NULL argument");
  return guard([&] {
    std::vector<k3_host_tensor> in = asHostViews(inputs, ninputs);
    s->s->run(entry, syms, nsyms, in.data(), in.size(), /*download=*/false,
              /*inputsOnDevice=*/true);
  });
}

k3_status k3_session_set_profiling(k3_session *s, int enabled) {
  if (!s)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_set_profiling: NULL session");
  return guard([&] { s->s->setProfiling(enabled != 0); });
}
k3_status k3_session_reset_profile(k3_session *s) {
  if (!s)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_reset_profile: NULL session");
  return guard([&] { s->s->resetProfile(); });
}
const char *k3_session_clock_name(const k3_session *s) {
  return s && s->s ? s->s->clockName() : "";
}
size_t k3_session_profile_snapshot(k3_session *s, const char *entry) {
  if (!s)
    return 0;
  s->profile = s->s->profile(entry ? entry : "");
  return s->profile.size();
}
k3_status k3_session_profile_kernel(const k3_session *s, size_t i,
                                    k3_kernel_profile *out) {
  if (!s || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_profile_kernel: NULL argument");
  if (i >= s->profile.size())
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "profile row " + std::to_string(i) + " out of range (" +
                        std::to_string(s->profile.size()) +
                        " kernels in the snapshot)");
  const rt::KernelProfile &k = s->profile[i];
  memset(out, 0, sizeof *out);
  out->entry = k.entry.c_str();
  out->kernel = k.kernel.c_str();
  out->calls = k.calls;
  out->runs = k.runs;
  out->total_ms = k.totalMs;
  out->min_ms = k.minMs;
  out->max_ms = k.maxMs;
  out->share = k.share;
  for (int d = 0; d < 3; ++d) {
    out->grid[d] = k.grid[d];
    out->block[d] = k.block[d];
  }
  out->dims_varied = k.dimsVaried ? 1 : 0;
  return K3_OK;
}
k3_status k3_session_time(k3_session *s, const char *entry,
                          const k3_symbol_value *syms, size_t nsyms,
                          const k3_host_tensor *inputs, size_t ninputs,
                          int32_t warmup, int32_t reps, double *ms) {
  if (!s || !entry || !ms || (ninputs && !inputs))
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_time: NULL argument");
  return guard([&] {
    std::vector<double> t =
        s->s->time(entry, syms, nsyms, inputs, ninputs, warmup, reps, false);
    std::copy(t.begin(), t.end(), ms);
  });
}
k3_status k3_session_time_device(k3_session *s, const char *entry,
                                 const k3_symbol_value *syms, size_t nsyms,
                                 const k3_device_tensor *inputs, size_t ninputs,
                                 int32_t warmup, int32_t reps, double *ms) {
  if (!s || !entry || !ms || (ninputs && !inputs))
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_time_device: NULL argument");
  return guard([&] {
    std::vector<k3_host_tensor> in = asHostViews(inputs, ninputs);
    std::vector<double> t = s->s->time(entry, syms, nsyms, in.data(), in.size(),
                                       warmup, reps, /*inputsOnDevice=*/true);
    std::copy(t.begin(), t.end(), ms);
  });
}
k3_status k3_session_output_device(k3_session *s, const char *name,
                                   k3_device_view *out) {
  if (!s || !name || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_output_device: NULL argument");
  return guard([&] {
    uint64_t addr;
    artifact::DType dt;
    std::vector<int64_t> shape;
    s->s->outputOnDevice(name, addr, dt, shape);
    if (shape.size() > K3_MAX_RANK)
      rt::fail(K3_ERROR_INTERNAL, "output rank above K3_MAX_RANK");
    memset(out, 0, sizeof *out);
    for (auto &en : s->s->artifact().entries)
      for (auto &o : en.outputs)
        if (o.name == name && !out->name)
          out->name = o.name.c_str();
    out->dtype = k3_dtype(dt);
    out->rank = int32_t(shape.size());
    size_t n = artifact::dtypeSize(dt);
    for (size_t i = 0; i < shape.size(); ++i) {
      out->shape[i] = shape[i];
      n *= size_t(shape[i]);
    }
    out->data = addr;
    out->nbytes = n;
    out->device_type = s->s->dlDeviceType();
    out->device_id = s->s->deviceOrdinal();
  });
}
k3_status k3_session_fetch_outputs(k3_session *s) {
  if (!s)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_fetch_outputs: NULL session");
  return guard([&] { s->s->fetchOutputs(); });
}
k3_status k3_session_read_buffer(k3_session *s, size_t id, void *dst,
                                 size_t nbytes) {
  if (!s)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_session_read_buffer: NULL session");
  return guard([&] { s->s->readBuffer(id, dst, nbytes); });
}

void k3_sampling_params_init(k3_sampling_params *p) {
  if (p)
    *p = rt::defaultSamplingParams();
}
k3_status k3_sample(const float *logits, int64_t vocab,
                    const k3_sampling_params *p, const int32_t *history,
                    size_t num_history, uint64_t step, int32_t *token) {
  if (!logits || !p || !token || (num_history && !history))
    return setError(K3_ERROR_INVALID_ARGUMENT, "k3_sample: NULL argument");
  return guard([&] {
    rt::validateSamplingParams(*p, "k3_sample");
    *token = rt::sampleToken(logits, vocab, *p, history, num_history, step);
  });
}
k3_status k3_generation_start(k3_session *s, const char *entry,
                              const k3_sequence_request *requests,
                              size_t num_requests, k3_generation **out) {
  if (!s || !out)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_generation_start: NULL argument");
  *out = nullptr;
  return guard([&] {
    auto g = std::make_unique<rt::Generation>(*s->s, entry ? entry : "forward",
                                              requests, num_requests);
    *out = new k3_generation{std::move(g)};
  });
}
k3_status k3_generation_step(k3_generation *g, int32_t *tokens,
                             size_t *active) {
  if (!g)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_generation_step: NULL generation");
  return guard([&] { g->g->step(tokens, active); });
}
k3_status k3_generation_stop(k3_generation *g, size_t i) {
  if (!g)
    return setError(K3_ERROR_INVALID_ARGUMENT,
                    "k3_generation_stop: NULL generation");
  return guard([&] { g->g->stop(i); });
}
k3_finish_reason k3_generation_finish_reason(const k3_generation *g, size_t i) {
  return g ? g->g->finishReason(i) : K3_FINISH_NONE;
}
void k3_generation_timing(const k3_generation *g, double *prefill_ms,
                          double *decode_ms, size_t *decode_steps) {
  if (prefill_ms)
    *prefill_ms = g ? g->g->prefillMs : 0;
  if (decode_ms)
    *decode_ms = g ? g->g->decodeMs : 0;
  if (decode_steps)
    *decode_steps = g ? g->g->decodeSteps : 0;
}
void k3_generation_destroy(k3_generation *g) { delete g; }

} // extern "C"
