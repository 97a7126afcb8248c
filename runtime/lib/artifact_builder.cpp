// Builder: an Artifact assembled record by record (the compiler's emitter). See
// docs/artifact-format.md.
#include "k3/artifact.h"

#include <algorithm>

namespace k3 {
namespace artifact {

Builder::Builder() {
  a_.metadata.push_back({kMetaCallingConvention, kCallingConvention});
}
void Builder::setMetadata(const std::string &k, const std::string &v) {
  for (auto &kv : a_.metadata)
    if (kv.first == k) {
      kv.second = v;
      return;
    }
  a_.metadata.push_back({k, v});
}
uint32_t Builder::addSymbol(const std::string &name, int64_t maxValue) {
  a_.symbols.push_back({name, maxValue});
  return uint32_t(a_.symbols.size() - 1);
}
uint32_t Builder::addWeight(const std::string &name, DType dtype,
                            std::vector<int64_t> shape, WeightInit init,
                            uint32_t device) {
  a_.weights.push_back({name, dtype, std::move(shape), init, device});
  return uint32_t(a_.weights.size() - 1);
}
uint32_t Builder::addKernelObject(const std::string &target,
                                  std::vector<uint8_t> data,
                                  std::vector<std::string> symbols) {
  a_.objects.push_back({target, std::move(data), std::move(symbols)});
  return uint32_t(a_.objects.size() - 1);
}
uint32_t Builder::addBuffer(const std::string &name, BufferKind kind,
                            uint64_t size, uint64_t arenaOffset,
                            uint64_t perSeqStride, uint32_t device,
                            uint32_t flags) {
  a_.buffers.push_back(
      {name, kind, size, arenaOffset, perSeqStride, device, flags});
  return uint32_t(a_.buffers.size() - 1);
}
uint32_t Builder::addTensorMap(TensorMapSpec spec) {
  a_.tensorMaps.push_back(std::move(spec));
  return uint32_t(a_.tensorMaps.size() - 1);
}
uint32_t Builder::addCollective(uint32_t entry, Collective c, Arg in, Arg out,
                                uint32_t device) {
  a_.collectives.push_back(std::move(c));
  Launch l;
  l.object = kCollectiveObject;
  l.device = device;
  l.args = {in, out, Arg::i64(int64_t(a_.collectives.size() - 1))};
  return addLaunch(entry, std::move(l));
}
void Builder::addWeightShard(WeightShard shard) {
  a_.weightShards.push_back(std::move(shard));
}
uint32_t Builder::addEntry(const std::string &name) {
  Entry e;
  e.name = name;
  a_.entries.push_back(std::move(e));
  return uint32_t(a_.entries.size() - 1);
}
uint32_t Builder::addInput(uint32_t entry, const std::string &name, DType dtype,
                           std::vector<DimExpr> shape, uint32_t buffer) {
  auto &in = a_.entries.at(entry).inputs;
  in.push_back({name, dtype, std::move(shape), buffer, {}, {}});
  return uint32_t(in.size() - 1);
}
void Builder::setInputMaxValue(uint32_t entry, uint32_t input, int64_t maxValue,
                               std::string reason) {
  TensorSpec &t = a_.entries.at(entry).inputs.at(input);
  t.maxValue = maxValue;
  t.maxValueReason = std::move(reason);
}
void Builder::addOutput(uint32_t entry, const std::string &name, DType dtype,
                        std::vector<DimExpr> shape, uint32_t buffer) {
  a_.entries.at(entry).outputs.push_back(
      {name, dtype, std::move(shape), buffer, {}, {}});
}
uint32_t Builder::addLaunch(uint32_t entry, Launch launch) {
  auto &l = a_.entries.at(entry).launches;
  l.push_back(std::move(launch));
  return uint32_t(l.size() - 1);
}
void Builder::bindNeedsToInputs(uint32_t entry) {
  Entry &e = a_.entries.at(entry);
  // At most 255 inputs are named (the field is a byte).
  size_t named = std::min<size_t>(e.inputs.size(), 255);
  for (Launch &l : e.launches)
    for (size_t k = 0; k < l.needs.size() && k < l.args.size(); ++k) {
      if (l.args[k].kind != ArgKind::Buffer)
        continue;
      for (size_t i = 0; i < named; ++i)
        if (e.inputs[i].buffer == l.args[k].index)
          l.needs[k].input = uint8_t(i + 1);
    }
}

uint32_t Builder::addLaunch(uint32_t entry, uint32_t object,
                            const std::string &kernel, std::vector<Arg> args,
                            const DimExpr (&grid)[3], const DimExpr (&block)[3],
                            DimExpr smem, uint32_t device) {
  Launch l;
  l.object = object;
  l.kernel = kernel;
  l.args = std::move(args);
  for (int i = 0; i < 3; ++i) {
    l.grid[i] = grid[i];
    l.block[i] = block[i];
  }
  l.sharedMemBytes = smem;
  l.device = device;
  return addLaunch(entry, std::move(l));
}
bool Builder::serialize(std::vector<uint8_t> &out, std::string &err) const {
  return artifact::serialize(a_, out, err);
}
bool Builder::writeFile(const std::string &path, std::string &err) const {
  return artifact::writeFile(path, a_, err);
}

} // namespace artifact
} // namespace k3
