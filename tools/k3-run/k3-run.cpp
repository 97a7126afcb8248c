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
    "  --max-new-tokens N         tokens to generate greedily (default 16)\n"
    "  --inputs FILE.safetensors  run --entry once with these named inputs "
    "instead of generating\n"
    "  --symbol NAME=VALUE        runtime symbol value for --inputs mode "
    "(repeatable; inferred when possible)\n"
    "  --entry NAME               entry point (default forward)\n"
    "  --dump OUT.safetensors     write all outputs, dumpable buffers and "
    "final states\n"
    "  --progress                 show a progress line even when stderr is not "
    "a terminal\n"
    "  --quiet                    print only the generated ids\n"
    "  --repeat N                 with --inputs: run N times, print the median "
    "launch time\n"
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

struct Options {
  std::string model, device = "cpu", promptText, promptFile, inputs,
                     entry = "forward", dump;
  std::vector<std::string> weights;
  bool randomWeights = false, quiet = false, progress = false;
  int repeat = 1;
  uint64_t seed = 0;
  int64_t maxNew = 16;
  std::vector<std::pair<std::string, int64_t>> symbols;
};

Options parseArgs(int argc, char **argv) {
  Options o;
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
      o.promptText = value();
      havePrompt = true;
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
    else if (a == "--repeat") {
      std::string v = value();
      int64_t r;
      if (!parseInt(v, r) || r < 1 || r > 100000)
        usageError("--repeat needs an integer in [1, 100000], got '%s'",
                   v.c_str());
      o.repeat = int(r);
    } else if (a == "--progress")
      o.progress = true;
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
  if (!o.weights.empty() && o.randomWeights)
    usageError("--weights and --random-weights are mutually exclusive");
  if (havePrompt && !o.promptFile.empty())
    usageError("--prompt and --prompt-file are mutually exclusive");
  if (!o.inputs.empty() && (havePrompt || !o.promptFile.empty()))
    usageError("--inputs and --prompt are mutually exclusive");
  if (o.inputs.empty() && !havePrompt && o.promptFile.empty())
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

int64_t symbolMax(const k3_artifact *a, const char *name) {
  for (size_t i = 0; i < k3_artifact_num_symbols(a); ++i)
    if (!strcmp(k3_artifact_symbol_name(a, i), name))
      return k3_artifact_symbol_max(a, i);
  return -1;
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

int32_t argmaxLast(const k3_tensor_view &v, int64_t vocab) {
  if (v.rank != 2 || v.shape[1] != vocab)
    die("output 'logits' has rank " + std::to_string(v.rank) + " / last dim " +
        std::to_string(v.rank ? v.shape[v.rank - 1] : 0) +
        ", expected [num_tokens, " + std::to_string(vocab) + "]");
  if (v.shape[0] < 1)
    die("output 'logits' has no rows");
  size_t row = size_t(v.shape[0] - 1) * size_t(vocab);
  int32_t best = 0;
  float bestV = -INFINITY;
  for (int64_t j = 0; j < vocab; ++j) {
    float f;
    size_t k = row + size_t(j);
    if (v.dtype == K3_DTYPE_F32)
      f = static_cast<const float *>(v.data)[k];
    else if (v.dtype == K3_DTYPE_BF16)
      f = k3::bf16ToFloat(static_cast<const uint16_t *>(v.data)[k]);
    else if (v.dtype == K3_DTYPE_F16)
      f = k3::f16ToFloat(static_cast<const uint16_t *>(v.data)[k]);
    else
      die("output 'logits' has dtype " + std::string(k3_dtype_name(v.dtype)) +
          ", expected a float dtype");
    if (std::isnan(f))
      die("output 'logits' contains NaN at row " +
          std::to_string(v.shape[0] - 1) + " column " + std::to_string(j));
    if (f > bestV) {
      bestV = f;
      best = int32_t(j);
    }
  }
  return best;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parseArgs(argc, argv);
  k3_artifact *art = nullptr;
  check(k3_artifact_open(o.model.c_str(), &art), "cannot load model");
  size_t entryIdx = SIZE_MAX;
  for (size_t i = 0; i < k3_artifact_num_entries(art); ++i)
    if (o.entry == k3_artifact_entry_name(art, i))
      entryIdx = i;
  if (entryIdx == SIZE_MAX)
    die(o.model + ": artifact has no entry point '" + o.entry + "'");

  k3_session *s = nullptr;
  check(k3_session_create(art, o.device.c_str(), &s),
        ("device " + o.device).c_str());
  if (!o.weights.empty()) {
    std::vector<const char *> p;
    for (auto &w : o.weights)
      p.push_back(w.c_str());
    check(k3_session_load_weights(s, p.data(), p.size()), "loading weights");
  } else if (o.randomWeights) {
    check(k3_session_init_random_weights(s, o.seed), "random weights");
  } else if (k3_artifact_num_weights(art) > 0) {
    usageError(
        "the artifact needs %zu weights: pass --weights or --random-weights",
        k3_artifact_num_weights(art));
  }

  if (!o.inputs.empty()) {
    // One call with named inputs from a safetensors file.
    k3::artifact::Artifact A;
    std::string err;
    if (!k3::artifact::readFile(o.model, A, err))
      die(err);
    const k3::artifact::Entry &E = A.entries[size_t(A.findEntry(o.entry))];
    k3::st::Collection c;
    if (!c.addFile(o.inputs, err))
      die(err);
    std::map<std::string, int64_t> syms(o.symbols.begin(), o.symbols.end());
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<k3_host_tensor> ins;
    for (auto &t : E.inputs) {
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
    for (size_t i = 0; i < E.inputs.size(); ++i)
      ins.push_back({E.inputs[i].name.c_str(), k3_dtype(E.inputs[i].dtype),
                     int32_t(shapes[i].size()), shapes[i].data(),
                     bufs[i].data(), bufs[i].size()});
    std::vector<k3_symbol_value> sv;
    for (auto &kv : syms)
      sv.push_back({kv.first.c_str(), kv.second});
    double t0 = now();
    check(k3_session_run(s, o.entry.c_str(), sv.data(), sv.size(), ins.data(),
                         ins.size()),
          ("running '" + o.entry + "'").c_str());
    double dt = now() - t0;
    // --repeat: time the launches again (inputs re-uploaded untimed).
    std::vector<double> launchMs = {k3_session_last_launch_ms(s)};
    for (int r = 1; r < o.repeat; ++r) {
      check(k3_session_run(s, o.entry.c_str(), sv.data(), sv.size(), ins.data(),
                           ins.size()),
            ("running '" + o.entry + "'").c_str());
      launchMs.push_back(k3_session_last_launch_ms(s));
    }
    if (o.repeat > 1) {
      std::vector<double> warm(launchMs.begin() + 1, launchMs.end());
      std::sort(warm.begin(), warm.end());
      printf("launch time: median %.4f ms, min %.4f ms over %zu warm runs\n",
             warm[warm.size() / 2], warm.front(), warm.size());
    }
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
    k3_session_destroy(s);
    k3_artifact_close(art);
    return 0;
  }

  // Generation mode.
  std::vector<int64_t> prompt;
  if (!o.promptFile.empty()) {
    std::ifstream f(o.promptFile);
    if (!f)
      die(o.promptFile + ": cannot open prompt file");
    std::stringstream ss;
    ss << f.rdbuf();
    prompt = parseIds(ss.str(), o.promptFile);
  } else {
    prompt = parseIds(o.promptText, "--prompt");
  }
  if (prompt.empty())
    usageError("the prompt is empty");
  int64_t vocab = metaInt(art, k3::artifact::kMetaVocabSize, -1);
  if (vocab <= 0)
    die(o.model + ": artifact metadata has no valid 'vocab_size'");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      die("prompt token " + std::to_string(i) + " = " +
          std::to_string(prompt[i]) + " is out of range for vocab_size " +
          std::to_string(vocab));
  int64_t maxTokens = symbolMax(art, "num_tokens");
  if (maxTokens < 0)
    maxTokens = metaInt(art, k3::artifact::kMetaMaxTokens, -1);
  if (maxTokens >= 0 && int64_t(prompt.size()) > maxTokens)
    die("prompt has " + std::to_string(prompt.size()) +
        " tokens but the artifact was compiled for max_tokens " +
        std::to_string(maxTokens));
  int64_t maxLen = metaInt(art, "max_seq_len", -1);
  if (maxLen >= 0 && int64_t(prompt.size()) + o.maxNew > maxLen)
    die("prompt (" + std::to_string(prompt.size()) + ") + --max-new-tokens (" +
        std::to_string(o.maxNew) + ") exceeds max_seq_len " +
        std::to_string(maxLen));

  // Inputs k3-run knows how to provide, by name.
  static const char *known[] = {"token_ids", "cu_seqlens", "positions",
                                "seq_slots", "context_lens"};
  for (size_t i = 0; i < k3_artifact_entry_num_inputs(art, entryIdx); ++i) {
    k3_tensor_spec sp;
    check(k3_artifact_entry_input(art, entryIdx, i, &sp),
          "reading entry inputs");
    bool ok = false;
    for (auto *k : known)
      ok |= !strcmp(sp.name, k);
    if (!ok)
      die("entry '" + o.entry + "' input '" + sp.name +
          "' is not one k3-run can provide for generation (token_ids, "
          "cu_seqlens, positions, seq_slots, context_lens); use --inputs");
    if (sp.dtype != K3_DTYPE_I32)
      die("entry '" + o.entry + "' input '" + sp.name + "' has dtype " +
          k3_dtype_name(sp.dtype) + ", k3-run provides i32");
  }
  bool hasNumSeqs = symbolMax(art, "num_seqs") >= 0;
  // Steps after the prompt (one token) go through the decode entry when the
  // artifact has one (k3-decode-entry: the token-by-token KDA form).
  std::string decodeEntry = o.entry;
  size_t decodeIdx = entryIdx;
  for (size_t i = 0; i < k3_artifact_num_entries(art); ++i)
    if (o.entry + "_decode" == k3_artifact_entry_name(art, i)) {
      decodeEntry = o.entry + "_decode";
      decodeIdx = i;
    }

  check(k3_session_reset_state(s, -1), "resetting state");
  std::vector<int32_t> generated;
  int64_t position = 0;
  auto step = [&](const std::vector<int64_t> &toks,
                  const std::string &entryName, size_t entryIdx) {
    // context_lens: tokens each sequence already holds in its decode state.
    std::vector<int32_t> ids(toks.begin(), toks.end()), pos(toks.size()),
        cu = {0, int32_t(toks.size())}, slots = {0}, ctx = {int32_t(position)};
    for (size_t i = 0; i < toks.size(); ++i)
      pos[i] = int32_t(position + int64_t(i));
    int64_t nt = int64_t(toks.size()), ns = 1, ncu = 2;
    std::vector<k3_host_tensor> in;
    for (size_t i = 0; i < k3_artifact_entry_num_inputs(art, entryIdx); ++i) {
      k3_tensor_spec sp;
      k3_artifact_entry_input(art, entryIdx, i, &sp);
      std::string n = sp.name;
      if (n == "token_ids")
        in.push_back(
            {sp.name, K3_DTYPE_I32, 1, &nt, ids.data(), ids.size() * 4});
      else if (n == "positions")
        in.push_back(
            {sp.name, K3_DTYPE_I32, 1, &nt, pos.data(), pos.size() * 4});
      else if (n == "cu_seqlens")
        in.push_back(
            {sp.name, K3_DTYPE_I32, 1, &ncu, cu.data(), cu.size() * 4});
      else if (n == "seq_slots")
        in.push_back(
            {sp.name, K3_DTYPE_I32, 1, &ns, slots.data(), slots.size() * 4});
      else if (n == "context_lens")
        in.push_back(
            {sp.name, K3_DTYPE_I32, 1, &ns, ctx.data(), ctx.size() * 4});
    }
    std::vector<k3_symbol_value> sv = {{"num_tokens", nt}};
    if (hasNumSeqs)
      sv.push_back({"num_seqs", ns});
    check(k3_session_run(s, entryName.c_str(), sv.data(), sv.size(), in.data(),
                         in.size()),
          ("running '" + entryName + "'").c_str());
    position += nt;
    k3_tensor_view v;
    check(k3_session_find_output(s, "logits", &v),
          ("entry '" + entryName + "'").c_str());
    return argmaxLast(v, vocab);
  };

  double t0 = now();
  double prefillTime = 0, decodeTime = 0;
  int64_t decodeSteps = 0;
  if (o.maxNew > 0) {
    generated.push_back(step(prompt, o.entry, entryIdx));
    prefillTime = now() - t0;
    bool showProgress = o.progress || isatty(2);
    double lastShown = now();
    double t1 = now();
    while (int64_t(generated.size()) < o.maxNew) {
      generated.push_back(step({generated.back()}, decodeEntry, decodeIdx));
      ++decodeSteps;
      double t = now();
      if (showProgress && !o.quiet && t - lastShown > 0.25) {
        fprintf(stderr, "\rdecode %lld/%lld tokens (%.1f tok/s)",
                (long long)generated.size(), (long long)o.maxNew,
                double(decodeSteps) / (t - t1));
        lastShown = t;
      }
    }
    decodeTime = now() - t1;
    if (showProgress && !o.quiet && lastShown > t1)
      fprintf(stderr, "\r\033[K");
  }
  std::string ids;
  for (size_t i = 0; i < generated.size(); ++i)
    ids += (i ? "," : "") + std::to_string(generated[i]);
  if (o.quiet) {
    printf("%s\n", ids.c_str());
  } else {
    printf("device: %s\n", k3_session_device_name(s));
    printf("generated: %s\n", ids.c_str());
    printf("prefill: %zu tokens in %.3f ms (%.1f tok/s)\n", prompt.size(),
           prefillTime * 1e3,
           prefillTime > 0 ? double(prompt.size()) / prefillTime : 0.0);
    size_t captured = 0, replayed = 0;
    k3_session_graph_stats(s, &captured, &replayed);
    std::string how =
        decodeEntry == o.entry ? "" : " through '" + decodeEntry + "'";
    if (captured)
      how += ", " + std::to_string(replayed) + " steps replayed from " +
             std::to_string(captured) + " launch graph" +
             (captured == 1 ? "" : "s");
    printf("decode: %lld tokens in %.3f ms (%.1f tok/s)%s\n",
           (long long)decodeSteps, decodeTime * 1e3,
           decodeTime > 0 ? double(decodeSteps) / decodeTime : 0.0,
           how.c_str());
  }
  if (!o.dump.empty())
    dumpAll(s, art, o.dump, &generated);
  k3_session_destroy(s);
  k3_artifact_close(art);
  return 0;
}
