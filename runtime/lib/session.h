// Private: the session (one artifact on one device) behind the C API.
#ifndef K3_RT_SESSION_H
#define K3_RT_SESSION_H

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "communicator.h"
#include "k3/artifact.h"
#include "k3/k3_runtime.h"
#include "launch_lanes.h"
#include "tensor_map.h"

namespace k3 {
namespace rt {

// Error with a C API status; thrown inside the runtime, caught at the C API.
struct Error {
  k3_status status;
  std::string message;
};
[[noreturn]] void fail(k3_status s, const std::string &msg);

using artifact::weightBytes;
std::string shapeString(const std::vector<int64_t> &s); // "[2, 3]"
uint64_t weightNumel(const artifact::Weight &w);

/// One cp coordinate's part of a context-parallel call
/// (session_context.cpp): the rows it takes from each per-token input, and
/// its cu_seqlens.
struct ContextSegments {
  std::vector<int64_t> rows;
  std::vector<int32_t> cu;
};
/// One cp coordinate's call: its symbols and inputs (`data` and `shapes`
/// own what the cut inputs point at).
struct ContextPart {
  std::vector<k3_symbol_value> syms;
  std::vector<k3_host_tensor> inputs;
  std::vector<std::vector<uint8_t>> data;
  std::vector<std::vector<int64_t>> shapes;
};
/// A context-parallel call cut into its coordinates' parts.
struct ContextCall {
  artifact::DimExpr tokenDim;
  std::vector<int32_t> cu; // the call's
  std::vector<ContextSegments> segs;
  std::vector<ContextPart> parts;
};

struct OutputTensor {
  std::string name;
  artifact::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

// Per-kernel aggregate of a profile (profiling on): every launch of `kernel`
// in runs of `entry`.
struct KernelProfile {
  std::string entry, kernel;
  uint64_t calls = 0;
  uint64_t runs = 0; // profiled runs of the entry
  double totalMs = 0, minMs = 0, maxMs = 0;
  double share = 0; // of the total of the selection it was queried with
  int64_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}; // of the first launch
  bool dimsVaried = false; // a later launch had another grid or block
};

/// What a checkpoint load did: bytes written to the device (the weights at
/// the manifest's dtypes), the files they came from, and the wall time from
/// opening the files to the last copy done.
struct WeightLoadStats {
  uint64_t bytes = 0, files = 0;
  double seconds = 0;
};

/// Where a rank's shard of a weight lies in the whole tensor, row-major:
/// `outer` runs of `localInner` elements, run o at element
/// o * fullInner + offset of the whole.
struct ShardSlice {
  uint64_t outer = 1, localInner = 0, fullInner = 0, offset = 0;
};
/// N of a device named `cuda` (0) or `cuda:N`; anything else is an
/// invalid-argument error naming the device.
int cudaOrdinal(const std::string &device);
ShardSlice shardSlice(const artifact::Weight &local,
                      const artifact::WeightShard &s, uint32_t index);
/// One byte region of a sharded MXFP4 weight (`local` its rank's shape):
/// the codes (`per` = 2 elements a byte) or the scales (`per` =
/// kMXFP4Block), each shaped like the weight with its last dimension
/// divided by `per`; the slice in bytes of that region of the whole weight.
ShardSlice mxfp4RegionSlice(const artifact::Weight &local,
                            const artifact::WeightShard &s, uint32_t index,
                            uint64_t per);

class Session {
public:
  Session(std::shared_ptr<const artifact::Artifact> art,
          const std::string &device);
  ~Session();
  /// This process's rank of a partitioned artifact in a job started by an
  /// MPI launcher (`mpirun -np N`, N the partition's world): on the CPU
  /// target, collectives through MPI (communicator_mpi.cpp); on `cuda:N`,
  /// the GPU N + the process's rank on its node, collectives through NCCL
  /// (its unique id shared by MPI). The rank's shards of each checkpoint.
  /// Every process makes its own session and runs the same calls
  /// (session_ranks.cpp).
  static std::unique_ptr<Session>
  mpiRank(std::shared_ptr<const artifact::Artifact> art,
          const std::string &device);
  const std::string &deviceName() const { return deviceName_; }
  uint32_t rank() const { return rank_; }
  /// Loads a checkpoint (weights.cpp): staged, pipelined uploads
  /// (weight_upload.h); `progress` gets (bytes done, bytes in all) at most
  /// ten times a second and once at the end.
  WeightLoadStats
  loadWeights(const std::vector<std::string> &paths,
              const std::function<void(uint64_t, uint64_t)> &progress = {});
  /// Seeded random weights (k3/dtype.h, randomInit). Made by the
  /// artifact's weight-init kernels on a GPU, on host threads on the CPU;
  /// K3_RANDOM_WEIGHTS=host|device chooses. Returns where they were made.
  std::string initRandomWeights(uint64_t seed);
  /// Weight `name` from `bytes` host bytes in its manifest layout (mxfp4:
  /// codes then scales); the size must be the weight's.
  void setWeight(const std::string &name, const void *host, uint64_t bytes);
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
  /// Lanes and cross-lane waits of the last graph captured (1 and 0: one
  /// lane; launch_lanes.h).
  size_t graphLanesUsed() const { return graphLanesUsed_; }
  size_t graphLaneWaits() const { return graphLaneWaits_; }
  size_t graphReplays() const { return graphReplays_; }
  const artifact::Artifact &artifact() const { return *art_; }

  /// Profiling: each launch is timed between two marks (CUDA events; the
  /// host clock on the CPU) and aggregated per entry and kernel. Launch
  /// graphs are neither captured nor replayed while profiling (each launch
  /// needs its own marks). Turning it on starts an empty profile.
  void setProfiling(bool on);
  bool profiling() const { return profiling_; }
  void resetProfile();
  /// Aggregates for `entry` (all entries when empty), sorted by total time,
  /// descending; shares of their sum.
  std::vector<KernelProfile> profile(const std::string &entry) const;
  const char *clockName() const { return be_->clockName(); }
  /// Runs `entry` warmup + reps times (outputs stay on the device) and
  /// returns the time of each of the last `reps` runs: marks around the
  /// launches of the whole entry (device time from CUDA events; the host
  /// clock on the CPU); input copies are outside.
  std::vector<double> time(const std::string &entry,
                           const k3_symbol_value *syms, size_t nsyms,
                           const k3_host_tensor *inputs, size_t ninputs,
                           int warmup, int reps, bool inputsOnDevice);

private:
  /// Rank `rank` (> 0) of a partitioned artifact, driven by rank 0.
  Session(std::shared_ptr<const artifact::Artifact> art,
          const std::string &device, uint32_t rank,
          std::shared_ptr<Communicator> comm);
  void init(const std::string &device);
  // Ranks (session_ranks.cpp). Rank 0 of a partitioned artifact owns a
  // session per other rank on the same device kind, and runs each public
  // call on every rank, each on its own thread.
  /// Checks the partition against the device and, on rank 0, makes the
  /// communicator and the peers.
  void createRanks(const std::string &device);
  /// mpiRank on a GPU: the NCCL communicator of this process's rank.
  static std::unique_ptr<Session>
  ncclProcessRank(std::shared_ptr<const artifact::Artifact> art,
                  const std::string &device, uint32_t rank, uint32_t world,
                  std::shared_ptr<Communicator> mpi);
  /// Whether this call must go to every rank (rank 0, not already inside a
  /// fan-out).
  bool leadsRanks() const { return !peers_.empty() && !fanningOut_; }
  /// Runs `fn` on every rank, concurrently; a rank that fails aborts the
  /// communicator (so that none waits for it) and the first failure (not
  /// an abort it caused) is rethrown.
  void forEachRank(const std::function<void(Session &)> &fn);
  // Context-parallel entries (session_context.cpp).
  /// Whether `e` runs on segments of its sequences (it reads k3.rank.cp).
  bool contextParallel(const artifact::Entry &e) const;
  /// Runs every rank on its coordinate's segments of the call (as threads
  /// from rank 0, or this process's own under MPI) and leaves the call's
  /// outputs on the host.
  void runContextParallel(size_t ei, const k3_symbol_value *syms, size_t nsyms,
                          const k3_host_tensor *inputs, size_t ninputs,
                          bool inputsOnDevice);
  /// The call's sequences cut into the cp coordinates' segments.
  ContextCall cutContextCall(size_t ei, const k3_symbol_value *syms,
                             size_t nsyms, const k3_host_tensor *inputs,
                             size_t ninputs, bool inputsOnDevice) const;
  void cutPart(const artifact::Entry &e, const artifact::DimExpr &tokenDim,
               int64_t numTokens, const std::string &tokenSym,
               const ContextSegments &seg, const k3_symbol_value *syms,
               size_t nsyms, const k3_host_tensor *inputs, size_t ninputs,
               ContextPart &part) const;
  /// Under MPI: every coordinate's outputs, all-gathered over cp.
  std::vector<std::vector<OutputTensor>>
  exchangeContextOutputs(const artifact::Entry &e, const ContextCall &call);
  /// The call's outputs from the coordinates': per-token ones in the
  /// sequences' order, the others from the last cp coordinate.
  void mergeContextOutputs(
      const artifact::Entry &e, const ContextCall &call,
      const std::vector<const std::vector<OutputTensor> *> &byCoordinate);
  /// A collective launch: the communicator, with this call's sizes.
  void runCollective(const artifact::Entry &e, size_t li,
                     const std::vector<int64_t> &sv);
  /// Weight i's shard, if the artifact slices it (null otherwise).
  const artifact::WeightShard *shardOf(size_t i) const;
  /// Weight i as the unsplit checkpoint tensor (its shard dim times the
  /// parts).
  artifact::Weight fullWeight(size_t i) const;
  /// Copies this rank's slice of weight i from `full` (its fullWeight's
  /// bytes) to `local`.
  void sliceWeight(size_t i, const uint8_t *full, uint8_t *local) const;
  void cleanup();
  // Creation, step by step (session.cpp).
  /// Loads the objects this device runs; per object, why not otherwise.
  std::vector<std::string> loadKernelObjects();
  /// Every launch's kernel; entries whose objects did not load are marked
  /// unrunnable (`why`), and a session with none fails.
  void resolveLaunches(const std::vector<std::string> &why);
  /// The arena, buffers and tensor-map slots, once the plan is known to fit.
  void allocatePlan();
  void allocWeight(size_t i);
  // One call of an entry (session_run.cpp), step by step.
  struct ProfiledLaunch {
    size_t launch;
    int64_t grid[3], block[3];
  };
  size_t entryIndex(const std::string &entryName) const;
  /// Every symbol's value: the caller's, checked against its bounds, and
  /// the device's (device_sm_count).
  std::vector<int64_t> symbolValues(size_t ei, const k3_symbol_value *syms,
                                    size_t nsyms) const;
  /// Tensor `t`'s shape for these symbol values, checked against its
  /// buffer; `what` ("input", "output") names it in errors.
  std::vector<int64_t> evalShape(const artifact::TensorSpec &t,
                                 const char *what,
                                 const std::vector<int64_t> &sv) const;
  /// Checks the entry's weights are loaded and its inputs (names, dtypes,
  /// shapes, values), and copies them into their buffers.
  void stageInputs(size_t ei, const std::vector<int64_t> &sv,
                   const k3_host_tensor *inputs, size_t ninputs,
                   bool inputsOnDevice);
  /// An input named k3.rank.<group>: this rank's coordinate in the group
  /// (isRankInput), which the caller never passes.
  void stageRankInput(const artifact::Entry &e, const artifact::TensorSpec &t,
                      const std::string &group, const std::vector<int64_t> &sv);
  /// One input: dtype, shape and bytes against `t`, copied into its buffer,
  /// its values checked (input_checks.h).
  void stageInput(const artifact::Entry &e, const artifact::TensorSpec &t,
                  const k3_host_tensor &h, const std::vector<int64_t> &sv,
                  bool inputsOnDevice);
  /// The launches: replayed from a launch graph, captured into one, or one
  /// by one; timed (time()) and profiled as asked.
  void launchEntry(size_t ei, const std::vector<int64_t> &sv);
  /// Evaluates every launch's dimensions and arguments and launches (or,
  /// while capturing, records) it; `profiled`: marks around each.
  /// `lanes`: the capture's lanes (graphLanePlan), null for one lane.
  void launchAll(size_t ei, const std::vector<int64_t> &sv,
                 std::vector<ProfiledLaunch> *profiled,
                 const LaunchLanes *lanes = nullptr);
  /// The lanes of entry `ei`'s launch graph at `sv` (launch_lanes.h); null
  /// where it has one lane (K3_LAUNCH_LANES, the backend's lanes).
  std::unique_ptr<LaunchLanes> graphLanePlan(size_t ei,
                                             const std::vector<int64_t> &sv);
  /// The device bytes that launch `li` touches at `sv`.
  LaunchFootprint launchFootprint(size_t ei, size_t li,
                                  const std::vector<int64_t> &sv) const;
  /// The 8-byte parameter values of launch `li` (kernel_abi.h).
  void argumentSlots(size_t ei, size_t li, const std::vector<int64_t> &sv,
                     std::vector<uint64_t> &slots);
  /// Records the entry's launches into a launch graph; null (graphs then
  /// off) when the backend could not build it.
  void *captureGraph(size_t ei, const std::vector<int64_t> &sv);
  void mark(const artifact::Entry &e, size_t i);
  void recordProfile(size_t ei, const std::vector<ProfiledLaunch> &profiled);
  /// checkSequences (input_checks.h) on the call's cu_seqlens and
  /// context_lens, where the entry has them.
  void checkPackedSequences(const artifact::Entry &e,
                            const k3_host_tensor *inputs, size_t ninputs,
                            const std::vector<int64_t> &sv,
                            bool inputsOnDevice);
  void uploadWeight(size_t i, const void *host);
  /// Fills weight i with randomInit's values by the artifact's
  /// k3_weight_init_<dtype> kernel; false when the artifact has none.
  bool fillWeightOnDevice(size_t i, uint64_t seed);
  std::shared_ptr<const artifact::Artifact> art_;
  std::unique_ptr<Backend> be_;
  uint32_t rank_ = 0;
  artifact::Partition partition_;
  std::shared_ptr<Communicator> comm_; // null for one rank
  /// The MPI job's communicator where NCCL carries the collectives (one
  /// GPU a process): kept so that MPI stays initialised.
  std::shared_ptr<Communicator> launcher_;
  std::vector<std::unique_ptr<Session>> peers_;
  bool fanningOut_ = false;
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
  /// The last run's outputs are outputs_, put together from the ranks of a
  /// context-parallel call (no device buffer holds them).
  bool contextOutputs_ = false;
  /// This rank is a process of its own (MPI): calls arrive whole, not cut
  /// by rank 0.
  bool ownProcess_ = false;
  /// Inside a context-parallel call: run() runs this rank's part.
  bool inContextCall_ = false;
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
  // Overlapped launches allowed by the artifact (grid_dependency_control)
  // and the environment (K3_GRID_OVERLAP); used for decode entries only.
  bool gridOverlap_ = false;
  // K3_GRID_OVERLAP=all: overlapped launches in prefill entries too (A/B).
  bool gridOverlapPrefill_ = false;
  std::string graphsOff_; // why graphs were turned off, if they were
  static constexpr size_t kMaxGraphs = 8;
  size_t graphReplays_ = 0, graphsCaptured_ = 0;
  // Lanes a captured graph may use (K3_LAUNCH_LANES; 1: captured in order),
  // and what the last capture used.
  unsigned launchLanes_ = 1;
  size_t graphLanesUsed_ = 1, graphLaneWaits_ = 0;
  // Profiling and timing (setProfiling, time).
  void ensureMarks(size_t n);
  std::vector<void *> marks_; // backend marks, reused from run to run
  bool profiling_ = false;
  bool timing_ = false;    // time() is running: mark the whole entry
  double lastTimedMs_ = 0; // the whole entry, between two marks
  std::map<std::pair<int, std::string>, KernelProfile> profile_;
  std::map<int, uint64_t> profileRuns_; // per entry
};

} // namespace rt
} // namespace k3

#endif
