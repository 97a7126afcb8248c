// Session: calls of a context-parallel entry (k3-partition-context,
// docs/scaling.md). Rank 0 cuts every sequence of the call into cp
// consecutive segments (coordinate c of the cp group gets tokens
// [L c / cp, L (c + 1) / cp) of a sequence of L), runs each rank on its
// segments, and puts the call's outputs together: per-token outputs from
// every segment in the sequences' order, the others (one row per sequence,
// such as last-token logits) from the last coordinate, which holds every
// non-empty sequence's last token.
#include "session.h"

#include <cstring>

namespace k3 {
namespace rt {

using namespace artifact;

namespace {

std::vector<ContextSegments> cutSequences(const std::vector<int32_t> &cu,
                                          uint32_t cp) {
  std::vector<ContextSegments> segs(cp);
  for (uint32_t c = 0; c < cp; ++c) {
    segs[c].cu.push_back(0);
    for (size_t s = 0; s + 1 < cu.size(); ++s) {
      int64_t a = cu[s], len = int64_t(cu[s + 1]) - a;
      int64_t lo = a + len * c / cp, hi = a + len * (c + 1) / cp;
      for (int64_t t = lo; t < hi; ++t)
        segs[c].rows.push_back(t);
      segs[c].cu.push_back(int32_t(segs[c].rows.size()));
    }
  }
  return segs;
}

uint64_t rowBytes(const k3_host_tensor &h, int64_t rows) {
  return rows > 0 ? h.nbytes / uint64_t(rows) : 0;
}

} // namespace

bool Session::contextParallel(const Entry &e) const {
  if (partition_.cp < 2)
    return false;
  for (const TensorSpec &t : e.inputs)
    if (t.name == "k3.rank.cp")
      return true;
  return false;
}

void Session::runContextParallel(size_t ei, const k3_symbol_value *syms,
                                 size_t nsyms, const k3_host_tensor *inputs,
                                 size_t ninputs, bool inputsOnDevice) {
  const Artifact &a = *art_;
  const Entry &e = a.entries[ei];
  auto bad = [&](const std::string &why) {
    fail(K3_ERROR_INVALID_ARGUMENT,
         "entry '" + e.name + "' (context-parallel over " +
             std::to_string(partition_.cp) + " ranks): " + why);
  };
  if (inputsOnDevice)
    bad("its inputs are cut into segments on the host; give host inputs");
  // The token count: the leading dimension of token_ids.
  const TensorSpec *tokens = nullptr;
  for (const TensorSpec &t : e.inputs)
    if (t.name == "token_ids")
      tokens = &t;
  if (!tokens || tokens->shape.empty() || tokens->shape[0].isConstant())
    bad("no token_ids input with a symbolic token count");
  const DimExpr tokenDim = tokens->shape[0];
  const std::string &tokenSym = a.symbols[tokenDim.sym].name;
  std::vector<int64_t> sv = symbolValues(ei, syms, nsyms);
  int64_t numTokens = sv[tokenDim.sym];
  const k3_host_tensor *cuIn = nullptr;
  for (size_t i = 0; i < ninputs; ++i)
    if (inputs && inputs[i].name && std::string(inputs[i].name) == "cu_seqlens")
      cuIn = &inputs[i];
  if (!cuIn || cuIn->dtype != K3_DTYPE_I32 || !cuIn->data)
    bad("cu_seqlens (i32) must be given: the segments are cut per sequence");
  std::vector<int32_t> cu(cuIn->nbytes / 4);
  std::memcpy(cu.data(), cuIn->data, cu.size() * 4);
  if (cu.empty() || cu.front() != 0 || cu.back() != numTokens)
    bad("cu_seqlens must run from 0 to " + tokenSym + " = " +
        std::to_string(numTokens));
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    if (cu[s + 1] < cu[s])
      bad("cu_seqlens decreases at " + std::to_string(s + 1));

  uint32_t cp = partition_.cp;
  std::vector<ContextSegments> segs = cutSequences(cu, cp);
  // Each coordinate's inputs: per-token ones by its rows, cu_seqlens its
  // own, the rest as given.
  std::vector<std::vector<std::vector<uint8_t>>> data(cp);
  std::vector<std::vector<std::vector<int64_t>>> shapes(cp);
  std::vector<std::vector<k3_host_tensor>> local(cp);
  std::vector<std::vector<k3_symbol_value>> localSyms(cp);
  for (uint32_t c = 0; c < cp; ++c) {
    int64_t rows = int64_t(segs[c].rows.size());
    data[c].resize(ninputs);
    shapes[c].resize(ninputs);
    for (size_t i = 0; i < ninputs; ++i) {
      k3_host_tensor h = inputs[i];
      const TensorSpec *spec = nullptr;
      for (const TensorSpec &t : e.inputs)
        if (h.name && t.name == h.name)
          spec = &t;
      bool perToken = spec && !spec->shape.empty() &&
                      spec->shape[0] == tokenDim && h.rank >= 1 && h.shape &&
                      h.shape[0] == numTokens;
      if (h.name && std::string(h.name) == "cu_seqlens") {
        data[c][i].resize(segs[c].cu.size() * 4);
        std::memcpy(data[c][i].data(), segs[c].cu.data(), data[c][i].size());
      } else if (perToken) {
        uint64_t rb = rowBytes(h, numTokens);
        data[c][i].resize(uint64_t(rows) * rb);
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(data[c][i].data() + uint64_t(r) * rb,
                      static_cast<const uint8_t *>(h.data) +
                          uint64_t(segs[c].rows[size_t(r)]) * rb,
                      rb);
        shapes[c][i].assign(h.shape, h.shape + h.rank);
        shapes[c][i][0] = rows;
        h.shape = shapes[c][i].data();
      } else {
        local[c].push_back(h);
        continue;
      }
      h.data = data[c][i].data();
      h.nbytes = data[c][i].size();
      local[c].push_back(h);
    }
    bool given = false;
    for (size_t i = 0; i < nsyms; ++i) {
      k3_symbol_value v = syms[i];
      if (v.name && tokenSym == v.name) {
        v.value = rows;
        given = true;
      }
      localSyms[c].push_back(v);
    }
    if (!given)
      localSyms[c].push_back({tokenSym.c_str(), rows});
  }

  forEachRank([&](Session &s) {
    uint32_t c = partition_.rankIn("cp", s.rank_);
    s.run(e.name, localSyms[c].data(), localSyms[c].size(), local[c].data(),
          local[c].size(), /*download=*/true, /*inputsOnDevice=*/false);
  });
  gatherContextOutputs(e, tokenDim, segs, cu);
}

void Session::gatherContextOutputs(const Entry &e, const DimExpr &tokenDim,
                                   const std::vector<ContextSegments> &segs,
                                   const std::vector<int32_t> &cu) {
  uint32_t cp = partition_.cp;
  // Coordinate c's outputs: those of its rank whose other coordinates are 0.
  auto ranksOutputs = [&](uint32_t c) -> const std::vector<OutputTensor> & {
    uint32_t r = partition_.memberRank("cp", 0, c);
    return r == rank_ ? outputs_ : peers_[r - 1]->outputs_;
  };
  std::vector<OutputTensor> merged;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    const TensorSpec &t = e.outputs[k];
    if (t.shape.empty() || !(t.shape[0] == tokenDim)) {
      merged.push_back(ranksOutputs(cp - 1)[k]);
      shapes.push_back(merged.back().shape);
      continue;
    }
    // Per token: the sequences' segments in order.
    OutputTensor o = ranksOutputs(0)[k];
    int64_t total = cu.back();
    uint64_t rb = 1;
    for (size_t d = 1; d < o.shape.size(); ++d)
      rb *= uint64_t(o.shape[d]);
    rb *= dtypeSize(o.dtype);
    o.shape[0] = total;
    o.data.assign(uint64_t(total) * rb, 0);
    for (uint32_t c = 0; c < cp; ++c) {
      const OutputTensor &part = ranksOutputs(c)[k];
      for (size_t r = 0; r < segs[c].rows.size(); ++r)
        std::memcpy(o.data.data() + uint64_t(segs[c].rows[r]) * rb,
                    part.data.data() + r * rb, rb);
    }
    shapes.push_back(o.shape);
    merged.push_back(std::move(o));
  }
  outputs_ = std::move(merged);
  lastOutShapes_ = std::move(shapes);
  contextOutputs_ = true;
}

} // namespace rt
} // namespace k3
