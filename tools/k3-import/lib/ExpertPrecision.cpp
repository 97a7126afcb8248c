//===- ExpertPrecision.cpp - which routed experts are MXFP4 ---------------===//
#include "tools/k3-import/lib/ExpertPrecision.h"

#include <algorithm>

#include "tools/k3-import/lib/ModelModules.h"

using llvm::Error;

namespace k3import {

namespace {

/// Decides module by module, in model order (the first problem is the one
/// reported).
class Planner {
public:
  Planner(const Config &c, const QuantizationScheme &s) : c(c), s(s) {
    p.mxfp4.assign(c.layers, {false, false, false});
  }
  Error visit(const ModelModule &m);
  ExpertPrecision p;

private:
  Error expert(const ModelModule &m, bool quantized);

  const Config &c;
  const QuantizationScheme &s;
  std::vector<std::string> names;
};

Error Planner::visit(const ModelModule &m) {
  nameSpellings(m.name, names);
  llvm::StringRef classes[2] = {m.cls, "Module"};
  const QuantGroup *g = s.groupFor({names, classes}, m.routedExpert());
  if (g && g->unsupported)
    return fieldError(g->unsupported->field, g->unsupported->message);
  if (m.routedExpert())
    return expert(m, g != nullptr);
  if (!g)
    return Error::success();
  return fieldError(s.path, m.name + " is quantized (" + g->path +
                                " targets it, no ignore entry matches): "
                                "only the routed experts "
                                "(block_sparse_moe.experts.{e}.w1/w2/w3) "
                                "can be MXFP4");
}

const char *is(bool quantized) {
  return quantized ? " is quantized" : " is not quantized";
}

/// The name of projection `proj` of expert `e` in `m`'s layer.
std::string sibling(const ModelModule &m, int64_t e, int proj) {
  return m.name.substr(0, m.name.rfind("experts.")) + "experts." +
         std::to_string(e) + "." + kExpertProjections[proj];
}

/// The experts of one layer and projection are one stacked weight: expert
/// 0 decides, the others must agree.
Error Planner::expert(const ModelModule &m, bool quantized) {
  bool &slot = p.mxfp4[m.layer][m.proj];
  if (m.expert > 0)
    return slot == quantized
               ? Error::success()
               : fieldError(s.path, m.name + is(quantized) + " but " +
                                        sibling(m, 0, m.proj) + is(slot) +
                                        ": a layer's experts are one stacked "
                                        "weight of one element type");
  slot = quantized;
  if (quantized && m.inDim % kMxfp4Group != 0)
    return fieldError(s.path, m.name + ": in-dim " + std::to_string(m.inDim) +
                                  " is not a multiple of 32 (MXFP4 has one "
                                  "scale per 32 consecutive weights of a "
                                  "row)");
  // w3 comes after w1; gate and up feed one GLU (k3.moe_experts).
  bool w1 = p.mxfp4[m.layer][0];
  if (m.proj == 2 && quantized != w1)
    return fieldError(s.path, m.name + is(quantized) + " but " +
                                  sibling(m, 0, 0) + is(w1) +
                                  ": w1 (gate) and w3 (up) share one element "
                                  "type");
  return Error::success();
}

} // namespace

llvm::Expected<ExpertPrecision>
planExpertPrecision(const Config &c, const QuantizationScheme &scheme) {
  Planner planner(c, scheme);
  if (Error e = forEachModule(
          c, [&](const ModelModule &m) { return planner.visit(m); }))
    return std::move(e);
  return std::move(planner.p);
}

llvm::Expected<ExpertPrecision> expertPrecision(const ParsedConfig &parsed,
                                                bool dequantizedExperts) {
  if (dequantizedExperts || !parsed.quantization)
    return ExpertPrecision{};
  llvm::Expected<QuantizationScheme> scheme =
      parseQuantization(*parsed.quantization, parsed.quantizationPath);
  if (!scheme)
    return scheme.takeError();
  const Config &c = parsed.decoder;
  int64_t moeLayers = std::count(c.isMoe.begin(), c.isMoe.end(), true);
  if (moeLayers * c.experts > kMaxQuantizedExpertModules)
    return fieldError(parsed.quantizationPath,
                      std::to_string(moeLayers) + " MoE layers of " +
                          std::to_string(c.experts) +
                          " experts are more expert weights than the " +
                          std::to_string(kMaxQuantizedExpertModules) +
                          " a quantization_config is matched against");
  return planExpertPrecision(parsed.decoder, *scheme);
}

} // namespace k3import
