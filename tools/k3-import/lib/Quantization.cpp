//===- Quantization.cpp - quantization_config, read for MXFP4 -------------===//
//
// Structure problems (wrong JSON types, unknown fields: pydantic's
// extra="forbid" in compressed-tensors) are errors at once; values that are
// valid compressed-tensors but not MXFP4 are recorded on their group
// (QuantGroup::unsupported), first one found.
//
//===----------------------------------------------------------------------===//
#include "tools/k3-import/lib/Quantization.h"

#include "tools/k3-import/lib/ConfigFields.h"

#include "llvm/ADT/StringExtras.h"

using llvm::Error;

namespace k3import {

namespace {

constexpr const char *kMxfp4Format = "mxfp4-pack-quantized";
constexpr const char *kUnknown =
    "unknown field (not a compressed-tensors quantization_config field this "
    "importer knows)";

std::string quote(const std::string &s) { return "'" + s + "'"; }

/// A bool-or-string value as the messages show it.
std::string shown(const std::string &v) {
  return v == "true" || v == "false" ? v : quote(v);
}

/// Records the first reason a group is not MXFP4.
void note(std::optional<FieldMessage> &u, std::string field, std::string what) {
  if (!u)
    u = FieldMessage{std::move(field), std::move(what)};
}

/// Reads the entries of a `targets` / `ignore` list.
Error readTargets(const std::vector<std::string> &specs,
                  const std::string &field, std::vector<Target> &out) {
  for (size_t i = 0; i < specs.size(); ++i) {
    llvm::Expected<Target> t =
        Target::parse(specs[i], field + "[" + std::to_string(i) + "]");
    if (!t)
      return t.takeError();
    out.push_back(std::move(*t));
  }
  return Error::success();
}

/// `dynamic` (true, false or "local") and `actorder` (true, false, "group",
/// "weight", "dynamic", "static"): a bool or a string.
Error boolOrString(Fields &w, const char *key,
                   std::optional<std::string> &out) {
  out.reset();
  const js::Value *v = w.get(key);
  if (!v || v->type == js::Type::Null)
    return Error::success();
  if (v->type == js::Type::Bool) {
    out = v->boolean ? "true" : "false";
    return Error::success();
  }
  if (v->type != js::Type::String)
    return fieldError(w.path(key), std::string("expected true, false or a "
                                               "string, got ") +
                                       js::typeName(v->type));
  out = llvm::StringRef(v->str).lower();
  return Error::success();
}

/// The numbers of QuantizationArgs: num_bits, type, strategy, group_size.
Error readWeightShape(Fields &w, std::optional<FieldMessage> &u) {
  std::optional<int64_t> bits, group;
  std::optional<std::string> type, strategy;
  if (Error e = w.optInteger("num_bits", 1, bits))
    return e;
  if (!bits || *bits != 4)
    note(u, w.path("num_bits"),
         bits ? std::to_string(*bits) + " is not supported (MXFP4 needs 4)"
              : "required field is missing (MXFP4 needs 4)");
  if (Error e = w.optString("type", type))
    return e;
  if (!type || llvm::StringRef(*type).lower() != "float")
    note(u, w.path("type"),
         type ? quote(*type) + " is not supported (MXFP4 needs float)"
              : "required field is missing (MXFP4 needs float)");
  if (Error e = w.optString("strategy", strategy))
    return e;
  if (strategy && llvm::StringRef(*strategy).lower() != "group")
    note(u, w.path("strategy"),
         quote(*strategy) + " is not supported (MXFP4 needs group)");
  if (Error e = w.optInteger("group_size", INT64_MIN, group))
    return e;
  if (!group || *group != 32)
    note(u, w.path("group_size"),
         group ? std::to_string(*group) + " is not supported (MXFP4 needs 32)"
               : "required field is missing (MXFP4 needs 32)");
  return Error::success();
}

/// The rest of QuantizationArgs: MXFP4 is symmetric, static, unblocked,
/// without g_idx, with U8 (E8M0) scales.
Error readWeightRest(Fields &w, std::optional<FieldMessage> &u) {
  bool symmetric;
  std::optional<std::string> dynamic, actorder, scaleDtype;
  if (Error e = w.boolean("symmetric", true, symmetric))
    return e;
  if (!symmetric)
    note(u, w.path("symmetric"),
         "false (zero points) is not supported (MXFP4 is symmetric)");
  if (Error e = boolOrString(w, "dynamic", dynamic))
    return e;
  if (dynamic && *dynamic != "false")
    note(u, w.path("dynamic"),
         shown(*dynamic) + " is not supported (MXFP4 weights are static)");
  if (w.given("block_structure"))
    note(u, w.path("block_structure"),
         "block quantization is not supported (MXFP4 needs group)");
  if (Error e = boolOrString(w, "actorder", actorder))
    return e;
  if (actorder && *actorder != "false" && *actorder != "weight" &&
      *actorder != "static")
    note(u, w.path("actorder"),
         shown(*actorder) + " (activation order, g_idx) is not supported");
  if (Error e = w.optString("scale_dtype", scaleDtype))
    return e;
  if (scaleDtype && *scaleDtype != "torch.uint8")
    note(u, w.path("scale_dtype"),
         quote(*scaleDtype) +
             " is not supported (MXFP4 scales are E8M0 bytes: torch.uint8)");
  w.ignore({"zp_dtype", "observer", "observer_kwargs"});
  return w.checkUnknown();
}

/// Reads one config group object (a QuantizationScheme) into `g`.
/// `topFormat`: quantization_config.format, used when the group has none.
Error readScheme(const js::Value &v,
                 const std::optional<std::string> &topFormat,
                 const std::string &topPath, QuantGroup &g) {
  Fields f(v, g.path + ".", kUnknown);
  std::optional<std::vector<std::string>> targets;
  std::optional<std::string> format;
  if (Error e = f.optStringList("targets", targets))
    return e;
  if (!targets)
    return fieldError(f.path("targets"), "required field is missing");
  if (Error e = readTargets(*targets, f.path("targets"), g.targets))
    return e;
  if (Error e = f.optString("format", format))
    return e;
  std::string fmt = format ? *format : topFormat.value_or("");
  std::string fmtPath = format ? f.path("format") : topPath + ".format";
  if (fmt.empty() || fmt == "mixed-precision")
    note(g.unsupported, fmtPath,
         fmt.empty() ? "required field is missing (mxfp4-pack-quantized)"
                     : "'mixed-precision' needs a format in each group");
  else if (fmt != kMxfp4Format)
    note(g.unsupported, fmtPath,
         quote(fmt) + " is not supported (MXFP4: mxfp4-pack-quantized)");
  const js::Value *w = f.get("weights");
  if (!w || w->type == js::Type::Null)
    note(g.unsupported, f.path("weights"),
         "required field is missing (MXFP4 weights)");
  else if (!w->isObject())
    return fieldError(f.path("weights"),
                      std::string("expected an object, got ") +
                          js::typeName(w->type));
  else {
    Fields wf(*w, f.path("weights."), kUnknown);
    if (Error e = readWeightShape(wf, g.unsupported))
      return e;
    if (Error e = readWeightRest(wf, g.unsupported))
      return e;
  }
  for (const char *act : {"input_activations", "output_activations"})
    if (f.given(act))
      note(g.unsupported, f.path(act),
           "activation quantization is not supported (MXFP4 weights only)");
  return f.checkUnknown();
}

/// A group given as a list of targets names a preset scheme
/// (preset_name_to_scheme): MXFP4A16 is MXFP4 weights only.
Error readPreset(const std::string &name, const js::Value &v,
                 const std::string &topPath, QuantGroup &g) {
  std::vector<std::string> specs;
  for (size_t i = 0; i < v.array.size(); ++i) {
    if (!v.array[i].isString())
      return fieldError(g.path + "[" + std::to_string(i) + "]",
                        std::string("expected a string, got ") +
                            js::typeName(v.array[i].type));
    specs.push_back(v.array[i].str);
  }
  if (Error e = readTargets(specs, g.path, g.targets))
    return e;
  std::string preset = llvm::StringRef(name).upper();
  if (preset == "MXFP4")
    note(g.unsupported, g.path,
         "preset MXFP4 also quantizes activations: only MXFP4A16 (weights "
         "only) is supported");
  else if (preset != "MXFP4A16")
    note(g.unsupported, g.path,
         "preset " + quote(name) + " is not supported (MXFP4A16)");
  return Error::success();
}

/// config_groups: {name: scheme or preset target list}, in file order.
Error readGroups(const js::Value &groups,
                 const std::optional<std::string> &topFormat,
                 QuantizationScheme &s) {
  std::string path = s.path + ".config_groups";
  if (!groups.isObject())
    return fieldError(path, std::string("expected an object, got ") +
                                js::typeName(groups.type));
  for (auto &[name, v] : groups.object) {
    QuantGroup g;
    g.path = path + "." + name;
    Error e = v.isObject() ? readScheme(v, topFormat, s.path, g)
              : v.isArray()
                  ? readPreset(name, v, s.path, g)
                  : fieldError(g.path, std::string("expected an object (a "
                                                   "scheme) or a list (a "
                                                   "preset's targets), "
                                                   "got ") +
                                           js::typeName(v.type));
    if (e)
      return e;
    s.groups.push_back(std::move(g));
  }
  return Error::success();
}

/// No config_groups: the routed experts, in the top-level format.
QuantGroup routedExpertsGroup(const std::optional<std::string> &topFormat,
                              const std::string &path) {
  QuantGroup g;
  g.path = path;
  g.routedExperts = true;
  if (!topFormat)
    note(g.unsupported, path + ".format",
         "required field is missing (mxfp4-pack-quantized)");
  else if (*topFormat != kMxfp4Format)
    note(g.unsupported, path + ".format",
         quote(*topFormat) + " is not supported (MXFP4: mxfp4-pack-quantized)");
  return g;
}

/// quant_method, and the top-level features K3 cannot import.
Error readTopLevel(Fields &f) {
  std::optional<std::string> method, status;
  if (Error e = f.optString("quant_method", method))
    return e;
  if (!method)
    return fieldError(f.path("quant_method"),
                      "required field is missing (compressed-tensors)");
  if (*method != "compressed-tensors")
    return fieldError(f.path("quant_method"),
                      quote(*method) +
                          " is not supported (compressed-tensors)");
  if (Error e = f.optString("quantization_status", status))
    return e;
  if (status && *status != "compressed")
    return fieldError(f.path("quantization_status"),
                      quote(*status) +
                          " is not supported (packed MXFP4 weights are "
                          "'compressed')");
  static const std::pair<const char *, const char *> kUnsupported[] = {
      {"kv_cache_scheme", "KV cache quantization is not supported"},
      {"sparsity_config", "sparse checkpoints are not supported"},
      {"transform_config", "transforms are not supported"}};
  for (auto &[key, what] : kUnsupported)
    if (f.given(key))
      return fieldError(f.path(key), what);
  f.ignore({"global_compression_ratio", "version", "run_compressed"});
  return Error::success();
}

} // namespace

llvm::Expected<QuantizationScheme> parseQuantization(const js::Value &q,
                                                     const std::string &path) {
  if (!q.isObject())
    return fieldError(path, std::string("expected an object, got ") +
                                js::typeName(q.type));
  QuantizationScheme s;
  s.path = path;
  Fields f(q, path + ".", kUnknown);
  if (Error e = readTopLevel(f))
    return std::move(e);
  std::optional<std::string> format;
  std::optional<std::vector<std::string>> ignore;
  if (Error e = f.optString("format", format))
    return std::move(e);
  if (Error e = f.optStringList("ignore", ignore))
    return std::move(e);
  if (ignore)
    if (Error e = readTargets(*ignore, f.path("ignore"), s.ignore))
      return std::move(e);
  const js::Value *groups = f.get("config_groups");
  if (!groups || groups->type == js::Type::Null)
    s.groups.push_back(routedExpertsGroup(format, path));
  else if (Error e = readGroups(*groups, format, s))
    return std::move(e);
  if (Error e = f.checkUnknown())
    return std::move(e);
  return s;
}

const QuantGroup *QuantizationScheme::groupFor(const ModuleView &m,
                                               bool routedExpert) const {
  for (const Target &t : ignore)
    if (t.matches(m))
      return nullptr;
  for (const QuantGroup &g : groups) {
    if (g.routedExperts ? routedExpert
                        : llvm::any_of(g.targets, [&](const Target &t) {
                            return t.matches(m);
                          }))
      return &g;
  }
  return nullptr;
}

} // namespace k3import
