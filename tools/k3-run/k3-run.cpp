// k3-run: runs a compiled .k3bin artifact: prefill + greedy decode, or one
// call of an entry point with inputs from a safetensors file.
// Exit codes: 0 success, 1 runtime error, 2 usage error. Errors are one line
// on stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "k3/artifact.h"
#include "k3/dtype.h"
#include "k3/k3_runtime.h"
#include "k3/safetensors.h"

namespace {

const char *kUsage =
    "usage: k3-run MODEL.k3bin [options]\n"
    "  --device cpu|cuda:N        device to run on (default cpu)\n"
    "  --weights FILE             .safetensors file or sharded index .json "
    "(repeatable)\n"
    "  --random-weights SEED      deterministic random weights from the "
    "artifact's init recipes\n"
    "  --prompt \"1,2,3\"           prompt token ids (comma or space "
    "separated)\n"
    "  --prompt-file FILE         prompt token ids from a file\n"
    "  --max-new-tokens N         tokens to generate (default 16)\n"
    "  --prompt may be repeated: the prompts are generated as one batch\n"
    "  --temperature T            sampling temperature (default 0: greedy)\n"
    "  --top-k K                  keep the K most likely tokens (0: off)\n"
    "  --top-p P                  keep the smallest set of mass >= P (1: "
    "off)\n"
    "  --min-p P                  drop tokens below P x the most likely's "
    "probability (0: off)\n"
    "  --repetition-penalty R     penalise prompt and generated tokens (1: "
    "off)\n"
    "  --seed S                   sampling seed (same seed, same tokens; "
    "default 0)\n"
    "  --stop-token ID[,ID...]    stop a sequence after it emits one of these "
    "(repeatable)\n"
    "  --inputs FILE.safetensors  run --entry once with these named inputs "
    "instead of generating\n"
    "  --symbol NAME=VALUE        runtime symbol value for --inputs mode "
    "(repeatable; inferred when possible)\n"
    "  --entry NAME               entry point (default forward)\n"
    "  --dump OUT.safetensors     write all outputs, dumpable buffers and "
    "final states\n"
    "  --progress                 show progress (loading weights, decoding) "
    "even when stderr is not a terminal\n"
    "  --quiet                    print only the generated ids\n"
    "  --repeat N                 with --inputs: run N times; print the "
    "median, "
    "min and max launch time of the last N-1 (CUDA events on the GPU)\n"
    "  --profile                  time every kernel launch (CUDA events; the "
    "host clock on the CPU; launch graphs off) and print a table per phase: "
    "prefill and decode steps, or the --inputs runs\n"
    "  --plan                     print each entry's launches (kernel, grid x "
    "block as expressions of the symbols) and exit; needs no device\n"
    "  --describe                 print the artifact (symbols, tensor maps, "
    "launches and their arguments) and exit\n"
    "  --mpi                      one rank of a partitioned artifact per "
    "process, under mpirun -np N (CPU; Open MPI loaded at run time); rank 0 "
    "prints and dumps\n"
    "  --help                     this text\n";

[[noreturn]] void usageError(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "k3-run: usage error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (see k3-run --help)\n");
  va_end(ap);
  exit(2);
}

[[noreturn]] void die(const std::string &msg) {
  fprintf(stderr, "k3-run: error: %s\n", msg.c_str());
  exit(1);
}

void check(k3_status s, const char *what) {
  if (s != K3_OK)
    die(std::string(what) + ": " + k3_last_error());
}

bool parseInt(const std::string &s, int64_t &out) {
  if (s.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  long long v = strtoll(s.c_str(), &end, 10);
  if (errno || *end)
    return false;
  out = v;
  return true;
}

std::vector<int64_t> parseIds(const std::string &text,
                              const std::string &what) {
  std::vector<int64_t> ids;
  std::string cur;
  auto flush = [&]() {
    if (cur.empty())
      return;
    int64_t v;
    if (!parseInt(cur, v))
      usageError("%s: '%s' is not an integer token id", what.c_str(),
                 cur.c_str());
    ids.push_back(v);
    cur.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r')
      flush();
    else
      cur += c;
  }
  flush();
  return ids;
}

bool parseFloat(const std::string &s, float &out) {
  if (s.empty())
    return false;
  char *end = nullptr;
  errno = 0;
  float v = strtof(s.c_str(), &end);
  if (errno || *end || !std::isfinite(v))
    return false;
  out = v;
  return true;
}

struct Options {
  std::string model, device = "cpu", promptFile, inputs, entry = "forward",
                     dump;
  std::vector<std::string> prompts;
  k3_sampling_params sampling;
  std::vector<int32_t> stopTokens;
  std::vector<std::string> weights;
  bool randomWeights = false, quiet = false, progress = false, profile = false,
       plan = false, describe = false, mpi = false;
  int repeat = 1;
  uint64_t seed = 0;
  int64_t maxNew = 16;
  std::vector<std::pair<std::string, int64_t>> symbols;
};

Options parseArgs(int argc, char **argv) {
  Options o;
  k3_sampling_params_init(&o.sampling);
  bool havePrompt = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        usageError("%s needs a value", a.c_str());
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      fputs(kUsage, stdout);
      exit(0);
    } else if (a == "--device")
      o.device = value();
    else if (a == "--weights")
      o.weights.push_back(value());
    else if (a == "--random-weights") {
      std::string v = value();
      int64_t s;
      if (!parseInt(v, s) || s < 0)
        usageError(
            "--random-weights needs a non-negative integer seed, got '%s'",
            v.c_str());
      o.randomWeights = true;
      o.seed = uint64_t(s);
    } else if (a == "--prompt") {
      o.prompts.push_back(value());
      havePrompt = true;
    } else if (a == "--temperature" || a == "--top-p" || a == "--min-p" ||
               a == "--repetition-penalty") {
      std::string v = value();
      float f;
      if (!parseFloat(v, f))
        usageError("%s needs a number, got '%s'", a.c_str(), v.c_str());
      float &dst = a == "--temperature" ? o.sampling.temperature
                   : a == "--top-p"     ? o.sampling.top_p
                   : a == "--min-p"     ? o.sampling.min_p
                                        : o.sampling.repetition_penalty;
      dst = f;
    } else if (a == "--top-k") {
      std::string v = value();
      int64_t k;
      if (!parseInt(v, k) || k < 0 || k > INT32_MAX)
        usageError("--top-k needs a non-negative integer, got '%s'", v.c_str());
      o.sampling.top_k = int32_t(k);
    } else if (a == "--seed") {
      std::string v = value();
      int64_t sd;
      if (!parseInt(v, sd) || sd < 0)
        usageError("--seed needs a non-negative integer, got '%s'", v.c_str());
      o.sampling.seed = uint64_t(sd);
    } else if (a == "--stop-token") {
      for (int64_t t : parseIds(value(), "--stop-token")) {
        if (t < 0 || t > INT32_MAX)
          usageError("--stop-token: %lld is not a token id", (long long)t);
        o.stopTokens.push_back(int32_t(t));
      }
    } else if (a == "--prompt-file")
      o.promptFile = value();
    else if (a == "--max-new-tokens") {
      std::string v = value();
      if (!parseInt(v, o.maxNew) || o.maxNew < 0)
        usageError("--max-new-tokens needs a non-negative integer, got '%s'",
                   v.c_str());
    } else if (a == "--inputs")
      o.inputs = value();
    else if (a == "--symbol") {
      std::string v = value();
      size_t eq = v.find('=');
      int64_t x;
      if (eq == std::string::npos || eq == 0 || !parseInt(v.substr(eq + 1), x))
        usageError("--symbol needs NAME=INTEGER, got '%s'", v.c_str());
      o.symbols.push_back({v.substr(0, eq), x});
    } else if (a == "--entry")
      o.entry = value();
    else if (a == "--dump")
      o.dump = value();
    else if (a == "--quiet")
      o.quiet = true;
    else if (a == "--profile")
      o.profile = true;
    else if (a == "--plan")
      o.plan = true;
    else if (a == "--repeat") {
      std::string v = value();
      int64_t r;
      if (!parseInt(v, r) || r < 1 || r > 100000)
        usageError("--repeat needs an integer in [1, 100000], got '%s'",
                   v.c_str());
      o.repeat = int(r);
    } else if (a == "--describe")
      o.describe = true;
    else if (a == "--progress")
      o.progress = true;
    else if (a == "--mpi")
      o.mpi = true;
    else if (a.size() > 1 && a[0] == '-')
      usageError("unknown option '%s'", a.c_str());
    else if (o.model.empty())
      o.model = a;
    else
      usageError("unexpected argument '%s' (model already given as '%s')",
                 a.c_str(), o.model.c_str());
  }
  if (o.model.empty())
    usageError("no model .k3bin given");
  if (o.describe)
    return o;
  if (!o.weights.empty() && o.randomWeights)
    usageError("--weights and --random-weights are mutually exclusive");
  if (havePrompt && !o.promptFile.empty())
    usageError("--prompt and --prompt-file are mutually exclusive");
  if (!o.inputs.empty() && (havePrompt || !o.promptFile.empty()))
    usageError("--inputs and --prompt are mutually exclusive");
  if (o.inputs.empty() && !havePrompt && o.promptFile.empty() && !o.plan)
    usageError("give --prompt, --prompt-file or --inputs");
  return o;
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t metaInt(const k3_artifact *a, const char *key, int64_t dflt) {
  const char *v = k3_artifact_metadata(a, key);
  int64_t x;
  if (!v)
    return dflt;
  if (!parseInt(v, x))
    die(std::string("artifact metadata '") + key + "' = '" + v +
        "' is not an integer");
  return x;
}

// Everything the artifact marks dumpable, plus all outputs, plus final states.
void dumpAll(k3_session *s, const k3_artifact *a, const std::string &path,
             const std::vector<int32_t> *generated) {
  std::vector<k3::st::WriteTensor> ts;
  std::vector<std::vector<uint8_t>> keep;
  for (size_t i = 0; i < k3_session_num_outputs(s); ++i) {
    k3_tensor_view v;
    check(k3_session_output(s, i, &v), "reading outputs");
    ts.push_back({v.name, k3::st::dtypeFor(k3::artifact::DType(v.dtype)),
                  std::vector<int64_t>(v.shape, v.shape + v.rank), v.data,
                  v.nbytes});
  }
  for (size_t b = 0; b < k3_artifact_num_buffers(a); ++b) {
    k3_buffer_info bi;
    check(k3_artifact_buffer_info(a, b, &bi), "reading buffer info");
    bool isState = bi.kind == K3_BUFFER_STATE;
    if (!isState && !(bi.flags & K3_BUFFER_FLAG_DUMP))
      continue;
    keep.emplace_back(bi.size);
    check(k3_session_read_buffer(s, b, keep.back().data(), bi.size),
          "reading buffer for --dump");
    std::vector<int64_t> shape = {int64_t(bi.size)};
    if (isState && bi.per_seq_stride)
      shape = {int64_t(bi.size / bi.per_seq_stride),
               int64_t(bi.per_seq_stride)};
    ts.push_back({std::string(isState ? "state." : "buffer.") + bi.name, "U8",
                  shape, keep.back().data(), bi.size});
  }
  if (generated)
    ts.push_back({"generated_ids",
                  "I32",
                  {int64_t(generated->size())},
                  generated->data(),
                  generated->size() * 4});
  std::vector<std::pair<std::string, std::string>> meta = {
      {"producer", "k3-run"}};
  std::string err;
  if (!k3::st::write(path, ts, meta, err))
    die(err);
}

struct ProfileRow {
  std::string kernel;
  uint64_t calls;
  double totalMs, minMs, maxMs, share;
  std::string dims;
};

// The session's profile (every entry) as rows, then an empty profile.
std::vector<ProfileRow> takeProfile(k3_session *s) {
  std::vector<ProfileRow> rows;
  size_t n = k3_session_profile_snapshot(s, nullptr);
  for (size_t i = 0; i < n; ++i) {
    k3_kernel_profile p;
    check(k3_session_profile_kernel(s, i, &p), "reading the profile");
    char dims[160];
    snprintf(dims, sizeof dims, "%lldx%lldx%lld x %lldx%lldx%lld%s",
             (long long)p.grid[0], (long long)p.grid[1], (long long)p.grid[2],
             (long long)p.block[0], (long long)p.block[1],
             (long long)p.block[2], p.dims_varied ? " (varies)" : "");
    rows.push_back(
        {p.kernel, p.calls, p.total_ms, p.min_ms, p.max_ms, p.share, dims});
  }
  check(k3_session_reset_profile(s), "resetting the profile");
  return rows;
}

// Sorted by total time (the runtime sorts): kernel, calls, total ms, share,
// min/max of one launch, grid x block of its first launch.
void printProfile(const char *phase, size_t runs, const char *runWord,
                  const char *clock, const std::vector<ProfileRow> &rows) {
  double total = 0;
  uint64_t calls = 0;
  size_t width = 6;
  for (auto &r : rows) {
    total += r.totalMs;
    calls += r.calls;
    width = std::max(width, r.kernel.size());
  }
  printf("profile: %s: %zu %s%s, %llu launches, %.3f ms in kernels (%s)\n",
         phase, runs, runWord, runs == 1 ? "" : "s", (unsigned long long)calls,
         total, clock);
  printf("  %-*s %7s %12s %7s %10s %10s  %s\n", int(width), "kernel", "calls",
         "total ms", "%", "min ms", "max ms", "grid x block");
  for (auto &r : rows)
    printf("  %-*s %7llu %12.4f %6.2f%% %10.4f %10.4f  %s\n", int(width),
           r.kernel.c_str(), (unsigned long long)r.calls, r.totalMs,
           100.0 * r.share, r.minMs, r.maxMs, r.dims.c_str());
}

} // namespace

// --plan: every entry's launches in order, with their grid and block as
// expressions of the symbols (what the runtime evaluates per run).
/// The plan's device memory, before anything is allocated (the session
/// refuses a plan that does not fit, naming the parts).
void printFootprint(const k3_artifact *art) {
  k3_memory_footprint f;
  if (k3_artifact_memory_footprint(art, &f) != K3_OK)
    return;
  auto gb = [](uint64_t b) { return double(b) / 1e9; };
  std::fprintf(stderr,
               "memory: weights %.2f GB, activations %.2f GB, inputs and "
               "outputs %.2f GB, decode state %.2f GB (%llu B per sequence, "
               "%llu B per cached token); total %.2f GB\n",
               gb(f.weight_bytes), gb(f.activation_bytes), gb(f.io_bytes),
               gb(f.state_bytes), (unsigned long long)f.state_bytes_per_seq,
               (unsigned long long)f.cache_bytes_per_token, gb(f.total_bytes));
}

/// "13.1 GB", "2.0 kB": decimal units, as GB/s are.
std::string sizeText(uint64_t bytes) {
  static const char *units[] = {"B", "kB", "MB", "GB", "TB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

/// The weight-loading progress bar (k3_session_set_load_progress), redrawn
/// in place on stderr; the runtime calls it at most ten times a second.
struct LoadProgress {
  double start = 0;
  bool drawn = false;
  static void draw(void *user, uint64_t done, uint64_t total) {
    auto *p = static_cast<LoadProgress *>(user);
    constexpr int kWidth = 30;
    int filled =
        total ? int(double(kWidth) * double(done) / double(total)) : kWidth;
    double s = now() - p->start;
    fprintf(stderr, "\rloading weights [%s%s] %s / %s (%.1f GB/s)",
            std::string(size_t(filled), '=').c_str(),
            std::string(size_t(kWidth - filled), ' ').c_str(),
            sizeText(done).c_str(), sizeText(total).c_str(),
            s > 0 ? double(done) / s / 1e9 : 0.0);
    p->drawn = true;
  }
};

/// --weights: loads them (a progress bar on a terminal, or with
/// --progress) and says how much, from how many files, how fast.
void loadWeights(k3_session *s, const std::vector<std::string> &weights,
                 bool showProgress, bool quiet) {
  std::vector<const char *> p;
  for (auto &w : weights)
    p.push_back(w.c_str());
  LoadProgress bar;
  bar.start = now();
  if (showProgress)
    k3_session_set_load_progress(s, &LoadProgress::draw, &bar);
  k3_status st = k3_session_load_weights(s, p.data(), p.size());
  k3_session_set_load_progress(s, nullptr, nullptr);
  if (bar.drawn)
    fprintf(stderr, "\r\033[K");
  check(st, "loading weights");
  if (quiet)
    return;
  k3_load_stats ls;
  k3_session_load_stats(s, &ls);
  fprintf(stderr, "weights: %s from %llu file%s in %.2f s (%.1f GB/s)\n",
          sizeText(ls.bytes).c_str(), (unsigned long long)ls.files,
          ls.files == 1 ? "" : "s", ls.seconds,
          ls.seconds > 0 ? double(ls.bytes) / ls.seconds / 1e9 : 0.0);
}

int printPlan(const std::string &path) {
  k3::artifact::Artifact A;
  std::string err;
  if (!k3::artifact::readFile(path, A, err))
    die(err);
  std::vector<std::string> names;
  for (auto &sym : A.symbols)
    names.push_back(sym.name);
  auto dims = [&](const k3::artifact::DimExpr *d) {
    std::string r;
    for (int i = 0; i < 3; ++i)
      r += (i ? ", " : "") + k3::artifact::dimToString(d[i], names);
    return "[" + r + "]";
  };
  for (auto &sym : A.symbols)
    printf("symbol %s <= %lld\n", sym.name.c_str(), (long long)sym.maxValue);
  for (auto &e : A.entries) {
    printf("entry %s: %zu launches\n", e.name.c_str(), e.launches.size());
    for (size_t i = 0; i < e.launches.size(); ++i) {
      const k3::artifact::Launch &l = e.launches[i];
      printf("  %3zu %-40s grid %s block %s smem %s (%s)\n", i,
             l.kernel.c_str(), dims(l.grid).c_str(), dims(l.block).c_str(),
             k3::artifact::dimToString(l.sharedMemBytes, names).c_str(),
             A.objects[l.object].target.c_str());
    }
  }
  return 0;
}

/// The session of `o` on its device (one rank of an MPI job with --mpi:
/// the other ranks' standard output silenced), its weights loaded or made,
/// profiling on with --profile.
k3_session *openSession(Options &o, k3_artifact *art) {
  k3_session *s = nullptr;
  if (o.mpi) {
    check(k3_session_create_mpi(art, o.device.c_str(), &s),
          ("device " + o.device + " under MPI").c_str());
    // Every rank computes the same outputs; rank 0 reports them.
    if (k3_session_rank(s) != 0) {
      o.quiet = true;
      o.dump.clear();
      if (!std::freopen("/dev/null", "w", stdout))
        die("cannot silence rank " + std::to_string(k3_session_rank(s)));
    }
  } else {
    check(k3_session_create(art, o.device.c_str(), &s),
          ("device " + o.device).c_str());
  }
  if (!o.weights.empty()) {
    loadWeights(s, o.weights, (o.progress || isatty(2)) && !o.quiet, o.quiet);
  } else if (o.randomWeights) {
    // Seconds for a multi-GB model: say so before, and how long after.
    if (!o.quiet)
      std::fprintf(stderr, "filling %zu weights with seeded random values...\n",
                   k3_artifact_num_weights(art));
    auto t0 = std::chrono::steady_clock::now();
    check(k3_session_init_random_weights(s, o.seed), "random weights");
    if (!o.quiet)
      std::fprintf(
          stderr, "random weights: %.1f s (%s)\n",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count(),
          k3_session_random_weights_place(s));
  } else if (k3_artifact_num_weights(art) > 0) {
    usageError(
        "the artifact needs %zu weights: pass --weights or --random-weights",
        k3_artifact_num_weights(art));
  }

  if (o.profile)
    check(k3_session_set_profiling(s, 1), "--profile");

  return s;
}

/// --inputs: one call of --entry with named inputs from a safetensors
/// file (symbols inferred from their shapes where --symbol does not give
/// them), --repeat timing, --profile, --dump.
/// The inputs of one --inputs call and the symbols for it; the views point
/// into the other members, so it is filled in place and not moved.
struct InputCall {
  k3::artifact::Artifact art;
  std::map<std::string, int64_t> syms;
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<k3_host_tensor> ins;
  std::vector<k3_symbol_value> sv;
};

/// --entry's inputs from the --inputs safetensors file, converted to their
/// dtypes; the symbols --symbol does not give are inferred from the
/// inputs' shapes (dims a * symbol + b).
void readInputs(const Options &o, InputCall &call) {
  k3::artifact::Artifact &A = call.art;
  std::string err;
  if (!k3::artifact::readFile(o.model, A, err))
    die(err);
  const k3::artifact::Entry &E = A.entries[size_t(A.findEntry(o.entry))];
  k3::st::Collection c;
  if (!c.addFile(o.inputs, err))
    die(err);
  std::map<std::string, int64_t> &syms = call.syms;
  syms.insert(o.symbols.begin(), o.symbols.end());
  auto &bufs = call.bufs;
  auto &shapes = call.shapes;
  std::vector<const k3::artifact::TensorSpec *> given;
  for (auto &t : E.inputs) {
    if (k3::artifact::isRankInput(t.name))
      continue; // the runtime fills each rank's coordinate
    given.push_back(&t);
    const k3::st::TensorInfo *ti = c.find(t.name);
    if (!ti)
      die(o.inputs + ": entry '" + o.entry + "' input '" + t.name +
          "' not found");
    if (ti->shape.size() != t.shape.size())
      die(o.inputs + ": input '" + t.name + "' has rank " +
          std::to_string(ti->shape.size()) + ", expected " +
          std::to_string(t.shape.size()));
    for (size_t d = 0; d < t.shape.size();
         ++d) { // infer symbols from dims a*sym+b
      const auto &de = t.shape[d];
      if (de.isConstant() || de.c != 1 || de.a == 0)
        continue;
      const std::string &sn = A.symbols[de.sym].name;
      if (syms.count(sn))
        continue;
      int64_t num = ti->shape[d] - de.b;
      if (num % de.a == 0)
        syms[sn] = num / de.a;
    }
    bufs.emplace_back(size_t(ti->numel()) * k3::artifact::dtypeSize(t.dtype));
    if (!k3::st::convert(*ti, t.dtype, bufs.back().data(), err))
      die(err);
    shapes.push_back(ti->shape);
  }
  for (size_t i = 0; i < given.size(); ++i)
    call.ins.push_back({given[i]->name.c_str(), k3_dtype(given[i]->dtype),
                        int32_t(shapes[i].size()), shapes[i].data(),
                        bufs[i].data(), bufs[i].size()});
  for (auto &kv : syms)
    call.sv.push_back({kv.first.c_str(), kv.second});
}

int runInputs(const Options &o, k3_session *s, k3_artifact *art) {
  InputCall call;
  readInputs(o, call);
  const std::vector<k3_host_tensor> &ins = call.ins;
  const std::vector<k3_symbol_value> &sv = call.sv;
  double t0 = now();
  check(k3_session_run(s, o.entry.c_str(), sv.data(), sv.size(), ins.data(),
                       ins.size()),
        ("running '" + o.entry + "'").c_str());
  double dt = now() - t0;
  // --repeat N: the first run is the warm-up; the other N-1 are timed by
  // the runtime's timing API (CUDA events around the entry on the GPU, the
  // host clock on the CPU; inputs copied outside the marks).
  if (o.repeat > 1) {
    std::vector<double> ms(size_t(o.repeat - 1));
    check(k3_session_time(s, o.entry.c_str(), sv.data(), sv.size(), ins.data(),
                          ins.size(), 0, o.repeat - 1, ms.data()),
          ("timing '" + o.entry + "'").c_str());
    check(k3_session_fetch_outputs(s), "reading outputs");
    std::sort(ms.begin(), ms.end());
    size_t n = ms.size();
    double median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    printf("launch time: median %.4f ms, min %.4f ms, max %.4f ms over %zu "
           "timed runs after 1 warm-up (%s)\n",
           median, ms.front(), ms.back(), n, k3_session_clock_name(s));
  }
  if (o.profile)
    printProfile(o.entry.c_str(), size_t(o.repeat), "run",
                 k3_session_clock_name(s), takeProfile(s));
  if (!o.quiet) {
    printf("ran '%s' on %s in %.3f ms\n", o.entry.c_str(),
           k3_session_device_name(s), dt * 1e3);
    for (size_t i = 0; i < k3_session_num_outputs(s); ++i) {
      k3_tensor_view v;
      check(k3_session_output(s, i, &v), "reading outputs");
      std::string sh;
      for (int r = 0; r < v.rank; ++r)
        sh += (r ? ", " : "") + std::to_string(v.shape[r]);
      printf("output %s: %s [%s]\n", v.name, k3_dtype_name(v.dtype),
             sh.c_str());
    }
  }
  if (!o.dump.empty())
    dumpAll(s, art, o.dump, nullptr);
  return 0;
}

/// Generation mode: the runtime's generation loop (k3_generation_*):
/// packed prefill of every prompt, then decode steps through
/// <entry>_decode when the artifact has it, sampling on the host.
/// The generation's report: each sequence's ids (only they, a line each,
/// with --quiet), its finish reason, the prefill's and the decode's rates.
void printGeneration(const Options &o, k3_session *s, k3_generation *g,
                     const std::vector<std::vector<int32_t>> &generated,
                     size_t promptTokens, size_t total,
                     const std::string &decodeEntry) {
  double prefillMs, decodeMs;
  size_t decodeSteps;
  k3_generation_timing(g, &prefillMs, &decodeMs, &decodeSteps);
  auto idList = [](const std::vector<int32_t> &v) {
    std::string r;
    for (size_t i = 0; i < v.size(); ++i)
      r += (i ? "," : "") + std::to_string(v[i]);
    return r;
  };
  if (o.quiet) {
    for (auto &v : generated)
      printf("%s\n", idList(v).c_str());
  } else {
    printf("device: %s\n", k3_session_device_name(s));
    static const char *why[] = {"", "length", "stop token", "stopped"};
    for (size_t i = 0; i < generated.size(); ++i) {
      if (generated.size() == 1)
        printf("generated: %s\n", idList(generated[i]).c_str());
      else
        printf("generated[%zu]: %s (%s)\n", i, idList(generated[i]).c_str(),
               why[k3_generation_finish_reason(g, i)]);
    }
    if (generated.size() == 1 &&
        k3_generation_finish_reason(g, 0) == K3_FINISH_STOP_TOKEN)
      printf("stopped at a stop token\n");
    printf("prefill: %zu tokens in %.3f ms (%.1f tok/s)\n", promptTokens,
           prefillMs,
           prefillMs > 0 ? double(promptTokens) / (prefillMs / 1e3) : 0.0);
    size_t captured = 0, replayed = 0;
    k3_session_graph_stats(s, &captured, &replayed);
    std::string how =
        decodeEntry == o.entry ? "" : " through '" + decodeEntry + "'";
    if (captured) {
      how += ", " + std::to_string(replayed) + " steps replayed from " +
             std::to_string(captured) + " launch graph" +
             (captured == 1 ? "" : "s");
      size_t lanes = 1, waits = 0;
      k3_session_graph_lanes(s, &lanes, &waits);
      if (lanes > 1)
        how += " on " + std::to_string(lanes) + " lanes (" +
               std::to_string(waits) + " waits)";
    }
    size_t decoded = total - std::min(total, generated.size());
    printf("decode: %lld tokens in %.3f ms (%.1f tok/s)%s\n",
           (long long)(generated.size() == 1 ? decodeSteps : decoded), decodeMs,
           decodeMs > 0
               ? double(generated.size() == 1 ? decodeSteps : decoded) /
                     (decodeMs / 1e3)
               : 0.0,
           how.c_str());
  }
}

/// The prompts of --prompt-file and each --prompt, every id checked.
std::vector<std::vector<int32_t>> readPrompts(const Options &o,
                                              k3_artifact *art) {
  std::vector<std::vector<int32_t>> prompts;
  auto addPrompt = [&](const std::vector<int64_t> &ids) {
    if (ids.empty())
      usageError("the prompt is empty");
    std::vector<int32_t> p;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > INT32_MAX)
        die("prompt token " + std::to_string(i) + " = " +
            std::to_string(ids[i]) + " is out of range for vocab_size " +
            std::to_string(metaInt(art, k3::artifact::kMetaVocabSize, -1)));
      p.push_back(int32_t(ids[i]));
    }
    prompts.push_back(std::move(p));
  };
  if (!o.promptFile.empty()) {
    std::ifstream f(o.promptFile);
    if (!f)
      die(o.promptFile + ": cannot open prompt file");
    std::stringstream ss;
    ss << f.rdbuf();
    addPrompt(parseIds(ss.str(), o.promptFile));
  }
  for (auto &text : o.prompts)
    addPrompt(parseIds(text, "--prompt"));
  return prompts;
}

int runGeneration(const Options &o, k3_session *s, k3_artifact *art) {
  std::vector<std::vector<int32_t>> prompts = readPrompts(o, art);
  std::vector<k3_sequence_request> reqs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    k3_sequence_request &r = reqs[i];
    r.prompt = prompts[i].data();
    r.prompt_len = prompts[i].size();
    r.max_new_tokens = o.maxNew;
    r.sampling = o.sampling;
    r.sampling.stream = i;
    r.stop_tokens = o.stopTokens.data();
    r.num_stop_tokens = o.stopTokens.size();
  }
  std::string decodeEntry = o.entry;
  for (size_t i = 0; i < k3_artifact_num_entries(art); ++i)
    if (o.entry + "_decode" == k3_artifact_entry_name(art, i))
      decodeEntry = o.entry + "_decode";

  k3_generation *g = nullptr;
  check(k3_generation_start(s, o.entry.c_str(), reqs.data(), reqs.size(), &g),
        "generation");
  std::vector<std::vector<int32_t>> generated(reqs.size());
  std::vector<int32_t> toks(reqs.size());
  size_t active = 1, total = 0;
  bool showProgress = (o.progress || isatty(2)) && !o.quiet;
  double t1 = now(), lastShown = t1;
  // --profile: the first step is the prefill; the others are decode steps.
  std::vector<ProfileRow> prefillProfile;
  size_t steps = 0;
  while (active) {
    check(k3_generation_step(g, toks.data(), &active),
          ("running '" + o.entry + "'").c_str());
    if (o.profile && steps++ == 0)
      prefillProfile = takeProfile(s);
    for (size_t i = 0; i < toks.size(); ++i)
      if (toks[i] >= 0) {
        generated[i].push_back(toks[i]);
        ++total;
      }
    double t = now();
    if (showProgress && t - lastShown > 0.25) {
      double dms;
      size_t steps;
      k3_generation_timing(g, nullptr, &dms, &steps);
      fprintf(stderr, "\rdecode %zu/%lld tokens (%.1f tok/s)", total,
              (long long)(o.maxNew * int64_t(reqs.size())),
              dms > 0 ? double(steps * reqs.size()) / (dms / 1e3) : 0.0);
      lastShown = t;
    }
  }
  if (showProgress && lastShown > t1)
    fprintf(stderr, "\r\033[K");
  size_t promptTokens = 0;
  for (auto &p : prompts)
    promptTokens += p.size();
  printGeneration(o, s, g, generated, promptTokens, total, decodeEntry);
  if (o.profile) {
    size_t decodeRuns = 0;
    k3_generation_timing(g, nullptr, nullptr, &decodeRuns);
    printProfile(("prefill ('" + o.entry + "')").c_str(), 1, "run",
                 k3_session_clock_name(s), prefillProfile);
    printProfile(("decode ('" + decodeEntry + "')").c_str(), decodeRuns, "step",
                 k3_session_clock_name(s), takeProfile(s));
  }
  k3_generation_destroy(g);
  if (!o.dump.empty()) {
    check(k3_session_fetch_outputs(s), "reading outputs for --dump");
    dumpAll(s, art, o.dump, &generated[0]);
  }
  return 0;
}

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  if (o.plan)
    return printPlan(o.model);
  if (o.describe) {
    k3::artifact::Artifact A;
    std::string err;
    if (!k3::artifact::readFile(o.model, A, err))
      die(err);
    fputs(k3::artifact::describe(A).c_str(), stdout);
    return 0;
  }
  k3_artifact *art = nullptr;
  check(k3_artifact_open(o.model.c_str(), &art), "cannot load model");
  size_t entryIdx = SIZE_MAX;
  for (size_t i = 0; i < k3_artifact_num_entries(art); ++i)
    if (o.entry == k3_artifact_entry_name(art, i))
      entryIdx = i;
  if (entryIdx == SIZE_MAX)
    die(o.model + ": artifact has no entry point '" + o.entry + "'");

  if (!o.quiet)
    printFootprint(art);
  k3_session *s = openSession(o, art);
  int rc = o.inputs.empty() ? runGeneration(o, s, art) : runInputs(o, s, art);
  k3_session_destroy(s);
  k3_artifact_close(art);
  return rc;
}
