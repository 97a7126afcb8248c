// Private: the session (one artifact on one device) behind the C API.
#ifndef K3_RT_SESSION_H
#define K3_RT_SESSION_H

#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "k3/artifact.h"
#include "k3/k3_runtime.h"
#include "tensor_map.h"

namespace k3 {
namespace rt {

// Error with a C API status; thrown inside the runtime, caught at the C API.
struct Error {
  k3_status status;
  std::string message;
};
[[noreturn]] void fail(k3_status s, const std::string &msg);

struct OutputTensor {
  std::string name;
  artifact::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

class Session {
public:
  Session(std::shared_ptr<const artifact::Artifact> art,
          const std::string &device);
  ~Session();
  const std::string &deviceName() const { return deviceName_; }
  void loadWeights(const std::vector<std::string> &paths);
  void initRandomWeights(uint64_t seed);
  void resetState(int64_t slot);
  /// Runs an entry; with `download` false the outputs stay on the device
  /// (outputs() is empty; readOutput copies parts of them).
  /// With `inputsOnDevice` every input's data is an address on this
  /// session's device (a host address on the CPU), copied device to device.
  void run(const std::string &entry, const k3_symbol_value *syms, size_t nsyms,
           const k3_host_tensor *inputs, size_t ninputs, bool download = true,
           bool inputsOnDevice = false);
  /// Device address, dtype and shape of output `name` of the last run.
  void outputOnDevice(const std::string &name, uint64_t &addr,
                      artifact::DType &dtype, std::vector<int64_t> &shape);
  /// 1 (kDLCPU) or 2 (kDLCUDA), and the device ordinal.
  int dlDeviceType() const { return ordinal_ < 0 ? 1 : 2; }
  int deviceOrdinal() const { return ordinal_ < 0 ? 0 : ordinal_; }
  /// Copies `nbytes` from byte `offset` of output `name` of the last
  /// successful run (e.g. one row of logits); its dtype and shape in
  /// `dtype`/`shape` when given.
  void readOutput(const std::string &name, uint64_t offset, void *dst,
                  uint64_t nbytes, artifact::DType *dtype = nullptr,
                  std::vector<int64_t> *shape = nullptr);
  const std::vector<OutputTensor> &outputs() const { return outputs_; }
  /// Downloads the outputs of the last run if it left them on the device.
  void fetchOutputs();
  /// Wall time of the last run's launches, from the first launch to the
  /// device being idle again (inputs uploaded before, outputs read after).
  double lastLaunchMs() const { return lastLaunchMs_; }
  void readBuffer(size_t id, void *dst, size_t nbytes);
  /// Launch graphs captured, and runs replayed from one (a decode loop
  /// replays every step after the second).
  size_t graphsCaptured() const { return graphsCaptured_; }
  size_t graphReplays() const { return graphReplays_; }
  const artifact::Artifact &artifact() const { return *art_; }

private:
  void init(const std::string &device);
  void cleanup();
  void uploadWeight(size_t i, const void *host);
  std::shared_ptr<const artifact::Artifact> art_;
  std::unique_ptr<Backend> be_;
  std::string deviceName_;
  int ordinal_ = -1;            // CUDA device ordinal; -1 on the CPU
  std::vector<void *> modules_; // per object; null if not for this device
  std::vector<std::vector<void *>> kernels_; // per entry, per launch
  std::vector<std::string> unrunnable_;      // per entry; empty if runnable
  std::vector<std::vector<bool>> entrySyms_; // per entry: symbols it references
  std::vector<std::vector<bool>>
      entryWeights_; // per entry: weights it references
  uint64_t arena_ = 0;
  std::vector<uint64_t> bufPtr_;
  std::vector<uint64_t> ownAllocs_;
  std::vector<uint64_t> weightPtr_;
  TensorMapSlots tensorMaps_; // device slots of TensorMap arguments
  std::vector<bool> weightLoaded_;
  std::vector<OutputTensor> outputs_;
  int lastEntry_ = -1; // entry of the last successful run
  std::vector<std::vector<int64_t>> lastOutShapes_;
  double lastLaunchMs_ = 0.0;
  // Launch graphs: a run repeating the previous run's entry and symbol
  // values (a decode step) is captured once and replayed from then on:
  // every kernel argument is a fixed buffer, weight, symbol or tensor-map
  // slot (whose contents are refreshed before each run), so the same
  // key means the same launches. K3_LAUNCH_GRAPHS=0 turns this off.
  struct LaunchGraph {
    int entry;
    std::vector<int64_t> symbols;
    void *exec;
  };
  std::vector<LaunchGraph> graphs_; // most recent last, at most kMaxGraphs
  std::vector<int64_t> lastKey_; // entry, then symbol values, of the last run
  bool graphsEnabled_ = false;
  std::string graphsOff_; // why graphs were turned off, if they were
  static constexpr size_t kMaxGraphs = 8;
  size_t graphReplays_ = 0, graphsCaptured_ = 0;
};

} // namespace rt
} // namespace k3

#endif
