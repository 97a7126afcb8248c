// Session: calls of a context-parallel entry (k3-partition-context,
// docs/scaling.md). The call's every sequence is cut into cp consecutive
// segments (coordinate c of the cp group gets tokens [L c / cp,
// L (c + 1) / cp) of a sequence of L); each rank runs its coordinate's
// segments; the call's outputs are put together: per-token outputs from
// every segment in the sequences' order, the others (one row per sequence,
// such as last-token logits) from the last coordinate, which holds every
// non-empty sequence's last token. With the ranks as threads, rank 0 cuts
// the call for all and reads its peers' outputs; with a process per rank
// (MPI), each process cuts its own part and the outputs travel through
// all-gathers over cp.
#include "session.h"

#include <algorithm>
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

uint64_t bytesOf(const OutputTensor &o) {
  uint64_t b = dtypeSize(o.dtype);
  for (int64_t d : o.shape)
    b *= uint64_t(d);
  return b;
}

} // namespace

bool Session::contextParallel(const Entry &e) const {
  return partition_.cp > 1 && isContextParallelEntry(*art_, e);
}

ContextCall Session::cutContextCall(size_t ei, const k3_symbol_value *syms,
                                    size_t nsyms, const k3_host_tensor *inputs,
                                    size_t ninputs, bool inputsOnDevice) const {
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
  ContextCall call;
  call.tokenDim = tokens->shape[0];
  const std::string &tokenSym = a.symbols[call.tokenDim.sym].name;
  int64_t numTokens = symbolValues(ei, syms, nsyms)[call.tokenDim.sym];
  const k3_host_tensor *cuIn = nullptr;
  for (size_t i = 0; i < ninputs; ++i)
    if (inputs && inputs[i].name && std::string(inputs[i].name) == "cu_seqlens")
      cuIn = &inputs[i];
  if (!cuIn || cuIn->dtype != K3_DTYPE_I32 || !cuIn->data)
    bad("cu_seqlens (i32) must be given: the segments are cut per sequence");
  call.cu.resize(cuIn->nbytes / 4);
  std::memcpy(call.cu.data(), cuIn->data, call.cu.size() * 4);
  if (call.cu.empty() || call.cu.front() != 0 || call.cu.back() != numTokens)
    bad("cu_seqlens must run from 0 to " + tokenSym + " = " +
        std::to_string(numTokens));
  for (size_t s = 0; s + 1 < call.cu.size(); ++s)
    if (call.cu[s + 1] < call.cu[s])
      bad("cu_seqlens decreases at " + std::to_string(s + 1));
  uint32_t cp = partition_.cp;
  call.segs = cutSequences(call.cu, cp);
  call.parts.resize(cp);
  for (uint32_t c = 0; c < cp; ++c)
    cutPart(e, call.tokenDim, numTokens, tokenSym, call.segs[c], syms, nsyms,
            inputs, ninputs, call.parts[c]);
  return call;
}

void Session::cutPart(const Entry &e, const DimExpr &tokenDim,
                      int64_t numTokens, const std::string &tokenSym,
                      const ContextSegments &seg, const k3_symbol_value *syms,
                      size_t nsyms, const k3_host_tensor *inputs,
                      size_t ninputs, ContextPart &part) const {
  int64_t rows = int64_t(seg.rows.size());
  part.data.resize(ninputs);
  part.shapes.resize(ninputs);
  // Per-token inputs by the part's rows, cu_seqlens its own, the rest as
  // given.
  for (size_t i = 0; i < ninputs; ++i) {
    k3_host_tensor h = inputs[i];
    const TensorSpec *spec = nullptr;
    for (const TensorSpec &t : e.inputs)
      if (h.name && t.name == h.name)
        spec = &t;
    bool perToken = spec && !spec->shape.empty() &&
                    spec->shape[0] == tokenDim && h.rank >= 1 && h.shape &&
                    h.shape[0] == numTokens && h.data;
    std::vector<uint8_t> &bytes = part.data[i];
    if (h.name && std::string(h.name) == "cu_seqlens") {
      bytes.resize(seg.cu.size() * 4);
      std::memcpy(bytes.data(), seg.cu.data(), bytes.size());
    } else if (perToken) {
      uint64_t rb = numTokens > 0 ? h.nbytes / uint64_t(numTokens) : 0;
      bytes.resize(uint64_t(rows) * rb);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(bytes.data() + uint64_t(r) * rb,
                    static_cast<const uint8_t *>(h.data) +
                        uint64_t(seg.rows[size_t(r)]) * rb,
                    rb);
      part.shapes[i].assign(h.shape, h.shape + h.rank);
      part.shapes[i][0] = rows;
      h.shape = part.shapes[i].data();
    } else {
      part.inputs.push_back(h);
      continue;
    }
    h.data = bytes.data();
    h.nbytes = bytes.size();
    part.inputs.push_back(h);
  }
  bool given = false;
  for (size_t i = 0; i < nsyms; ++i) {
    k3_symbol_value v = syms[i];
    if (v.name && tokenSym == v.name) {
      v.value = rows;
      given = true;
    }
    part.syms.push_back(v);
  }
  if (!given)
    part.syms.push_back({tokenSym.c_str(), rows});
}

void Session::runContextParallel(size_t ei, const k3_symbol_value *syms,
                                 size_t nsyms, const k3_host_tensor *inputs,
                                 size_t ninputs, bool inputsOnDevice) {
  const Entry &e = art_->entries[ei];
  ContextCall call =
      cutContextCall(ei, syms, nsyms, inputs, ninputs, inputsOnDevice);
  auto runPart = [&](Session &s) {
    const ContextPart &p = call.parts[partition_.rankIn("cp", s.rank_)];
    s.run(e.name, p.syms.data(), p.syms.size(), p.inputs.data(),
          p.inputs.size(), /*download=*/true, /*inputsOnDevice=*/false);
  };
  // Every coordinate's outputs, read where they are (no copies).
  std::vector<const std::vector<OutputTensor> *> byCoordinate(partition_.cp);
  std::vector<std::vector<OutputTensor>> exchanged;
  if (ownProcess_) {
    // MPI: this process's part, then every coordinate's outputs.
    struct Inside {
      bool &flag;
      ~Inside() { flag = false; }
    } inside{inContextCall_ = true};
    runPart(*this);
    exchanged = exchangeContextOutputs(e, call);
    for (uint32_t c = 0; c < partition_.cp; ++c)
      byCoordinate[c] = &exchanged[c];
  } else {
    forEachRank(runPart);
    // Coordinate c's outputs: its rank whose other coordinates are 0.
    for (uint32_t c = 0; c < partition_.cp; ++c) {
      uint32_t r = partition_.memberRank("cp", 0, c);
      byCoordinate[c] = r == rank_ ? &outputs_ : &peers_[r - 1]->outputs_;
    }
  }
  mergeContextOutputs(e, call, byCoordinate);
}

std::vector<std::vector<OutputTensor>>
Session::exchangeContextOutputs(const Entry &e, const ContextCall &call) {
  uint32_t cp = partition_.cp;
  std::vector<std::vector<OutputTensor>> all(cp, outputs_);
  size_t most = 0;
  for (const ContextSegments &s : call.segs)
    most = std::max(most, s.rows.size());
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const OutputTensor &mine = outputs_[k];
    bool perToken =
        !e.outputs[k].shape.empty() && e.outputs[k].shape[0] == call.tokenDim;
    // Every coordinate sends the same number of bytes: per-token outputs
    // padded to the longest part.
    uint64_t bytes = bytesOf(mine);
    if (perToken) {
      OutputTensor row = mine;
      row.shape[0] = 1;
      bytes = uint64_t(most) * bytesOf(row);
    }
    uint64_t elem = dtypeSize(mine.dtype);
    std::vector<uint8_t> in(bytes, 0), out(bytes * cp, 0);
    std::memcpy(in.data(), mine.data.data(), mine.data.size());
    Collective gather;
    gather.kind = CollectiveKind::AllGather;
    gather.dtype = mine.dtype;
    gather.group = "cp";
    gather.groupSize = cp;
    CollectiveCall c;
    c.collective = &gather;
    c.partition = partition_;
    c.rank = rank_;
    c.in = uint64_t(uintptr_t(in.data()));
    c.out = uint64_t(uintptr_t(out.data()));
    c.outer = 1;
    c.chunk = bytes / elem;
    std::string err;
    if (!comm_->run(c, err))
      fail(K3_ERROR_DEVICE,
           "gathering output '" + mine.name + "' over the cp ranks: " + err);
    for (uint32_t q = 0; q < cp; ++q) {
      OutputTensor &o = all[q][k];
      if (perToken)
        o.shape[0] = int64_t(call.segs[q].rows.size());
      o.data.assign(out.begin() + q * bytes,
                    out.begin() + q * bytes + bytesOf(o));
    }
  }
  return all;
}

void Session::mergeContextOutputs(
    const Entry &e, const ContextCall &call,
    const std::vector<const std::vector<OutputTensor> *> &byCoordinate) {
  uint32_t cp = partition_.cp;
  std::vector<OutputTensor> merged;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    const TensorSpec &t = e.outputs[k];
    if (t.shape.empty() || !(t.shape[0] == call.tokenDim)) {
      merged.push_back((*byCoordinate[cp - 1])[k]);
      shapes.push_back(merged.back().shape);
      continue;
    }
    // Per token: the sequences' segments in order.
    const OutputTensor &first = (*byCoordinate[0])[k];
    OutputTensor o{first.name, first.dtype, first.shape, {}};
    o.shape[0] = 1;
    uint64_t rb = bytesOf(o);
    o.shape[0] = call.cu.back();
    o.data.assign(uint64_t(o.shape[0]) * rb, 0);
    for (uint32_t c = 0; c < cp; ++c) {
      const OutputTensor &part = (*byCoordinate[c])[k];
      for (size_t r = 0; r < call.segs[c].rows.size(); ++r)
        std::memcpy(o.data.data() + uint64_t(call.segs[c].rows[r]) * rb,
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
