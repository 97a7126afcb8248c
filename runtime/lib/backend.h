// Private: device backend interface used by the session.
#ifndef K3_RT_BACKEND_H
#define K3_RT_BACKEND_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "k3/artifact.h"
#include "tensor_map.h"

namespace k3 {
namespace rt {

class Backend;

/// One copy out of a filled staging slot: `bytes` from byte `staged` of the
/// slot to device address `device`.
struct UploadCopy {
  uint64_t staged = 0, device = 0, bytes = 0;
};

/// Bulk host-to-device uploads (a checkpoint's weights, weight_upload.h):
/// host threads write the bytes into memory the stream hands out, one
/// staging slot at a time, and the stream copies a filled slot while the
/// next one is written. The destructor waits for copies still in flight
/// before freeing the slots (an error may leave some); a stream must not
/// outlive its backend.
class UploadStream {
public:
  virtual ~UploadStream() = default;
  /// Where the bytes bound for device address `device` are written, given
  /// their place `staged` in slot `slot`: the slot (pinned memory on CUDA),
  /// or `device` itself where device memory is host memory (the CPU).
  /// Called from several threads at once.
  virtual uint8_t *hostFor(size_t slot, uint64_t staged, uint64_t device) = 0;
  /// Blocks until the copies last sent from `slot` are done, so that it can
  /// be written again.
  virtual bool acquire(size_t slot, std::string &err) = 0;
  /// Starts the copies out of a filled slot; may return before they finish.
  virtual bool send(size_t slot, const std::vector<UploadCopy> &copies,
                    std::string &err) = 0;
  /// Blocks until every copy sent is done.
  virtual bool finish(std::string &err) = 0;
};

/// The upload stream of any backend: slots in ordinary host memory, each
/// copy a synchronous upload() (a backend with nothing faster).
std::unique_ptr<UploadStream>
openSynchronousUploadStream(Backend &be, size_t slots, uint64_t slotBytes);

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string
  name() const = 0; // for messages, e.g. "cpu", "cuda:0 (NVIDIA H200, sm_90)"
  // Whether kernel objects for `target` run here; `why` explains a refusal.
  virtual bool supportsTarget(const std::string &target,
                              std::string &why) const = 0;
  virtual bool alloc(size_t bytes, uint64_t &ptr,
                     std::string &err) = 0; // zero-filled
  virtual void release(uint64_t ptr) = 0;
  virtual bool upload(uint64_t dst, const void *src, size_t n,
                      std::string &err) = 0;
  virtual bool download(void *dst, uint64_t src, size_t n,
                        std::string &err) = 0;
  virtual bool zero(uint64_t dst, size_t n, std::string &err) = 0;
  // Device-to-device copy within this device (external device tensors
  // bound through k3_session_run_device).
  virtual bool copy(uint64_t dst, uint64_t src, size_t n, std::string &err) = 0;
  virtual bool loadObject(const artifact::KernelObject &obj, size_t index,
                          void *&module, std::string &err) = 0;
  virtual void unloadObject(void *module) = 0;
  virtual bool getKernel(void *module, const std::string &name, void *&fn,
                         std::string &err) = 0;
  virtual bool launch(void *fn, const std::string &name, const int64_t grid[3],
                      const int64_t block[3], int64_t smem, void **params,
                      size_t numArgs, std::string &err) = 0;
  virtual bool synchronize(std::string &err) = 0;
  /// A stream for bulk uploads through `slots` staging slots of
  /// `slotBytes` each (UploadStream); null with `err` when it cannot be
  /// made. Default: openSynchronousUploadStream.
  virtual std::unique_ptr<UploadStream>
  openUploadStream(size_t slots, uint64_t slotBytes, std::string &err) {
    return openSynchronousUploadStream(*this, slots, slotBytes);
  }
  // Streaming multiprocessors (1 on the CPU): the value of the artifact's
  // `device_sm_count` symbol, which sizes grid-stride grids.
  virtual int64_t smCount() const { return 1; }
  /// Makes this device current on the calling thread (a rank's thread
  /// before it uses a CUDA session); the CPU needs nothing.
  virtual bool makeCurrent(std::string &err) { return true; }
  // Free and total memory of the device; false where the backend cannot say
  // (the CPU: no check before allocating).
  virtual bool memoryInfo(uint64_t &freeBytes, uint64_t &totalBytes) {
    return false;
  }

  // Launch graphs: between beginCapture and endCapture, launch() records
  // instead of running; endCapture returns an executable graph that
  // launchGraph replays, ordered with uploads and downloads. CUDA: a CUDA
  // graph (one launch for the whole entry); CPU: the recorded launch list.
  virtual bool supportsGraphs() const { return false; }
  /// Launches captured into graphs may overlap the previous kernel's end
  /// (programmatic dependent launch): only for kernels that wait for their
  /// predecessor themselves (artifact metadata grid_dependency_control).
  virtual void setGridOverlap(bool on) {}
  virtual bool beginCapture(std::string &err) {
    err = "launch graphs are not supported on " + name();
    return false;
  }
  virtual bool endCapture(void *&graph, std::string &err) {
    err = "not capturing";
    return false;
  }
  virtual bool launchGraph(void *graph, std::string &err) {
    err = "launch graphs are not supported";
    return false;
  }
  virtual void destroyGraph(void *graph) {}
  /// Lanes of a launch graph (launch_lanes.h): a capture may put launches
  /// on lanes 0 .. graphLanes() - 1, which run side by side where no wait
  /// orders them. 1: every launch on lane 0, in capture order.
  virtual unsigned graphLanes() const { return 1; }
  /// While capturing: the next launches go to `lane`, after the launches
  /// numbered `waitFor` (each marked by markLaunch once it was captured).
  virtual bool useLane(unsigned lane, const std::vector<size_t> &waitFor,
                       std::string &err) {
    if (lane == 0 && waitFor.empty())
      return true;
    err = "launch graphs have one lane on " + name();
    return false;
  }
  /// While capturing: marks the launch just captured as launch `step`, for
  /// later launches on other lanes to wait for.
  virtual bool markLaunch(size_t step, std::string &err) { return true; }

  // Timing marks (profiling, k3_session_time): recordMark puts a mark in the
  // launch order; markElapsedMs waits for `end` and returns the time between
  // two recorded marks. Never recorded while capturing a launch graph.
  // Default (the CPU, where a launch returns when its kernel is done): the
  // host's steady clock when recorded. CUDA: a cuEvent pair on the stream.
  virtual const char *clockName() const { return "host steady_clock"; }
  virtual bool createMark(void *&mark, std::string &err) {
    mark = new std::chrono::steady_clock::time_point();
    return true;
  }
  virtual bool recordMark(void *mark, std::string &err) {
    *static_cast<std::chrono::steady_clock::time_point *>(mark) =
        std::chrono::steady_clock::now();
    return true;
  }
  virtual bool markElapsedMs(void *start, void *end, double &ms,
                             std::string &err) {
    using TP = std::chrono::steady_clock::time_point;
    ms = std::chrono::duration<double, std::milli>(*static_cast<TP *>(end) -
                                                   *static_cast<TP *>(start))
             .count();
    return true;
  }
  virtual void destroyMark(void *mark) {
    delete static_cast<std::chrono::steady_clock::time_point *>(mark);
  }
  // TMA tensor maps (ArgKind::TensorMap): whether this device can encode
  // them (`why` explains a refusal), and encoding one CUtensorMap into
  // `out` (host memory, kTensorMapBytes, 128-byte aligned).
  virtual bool supportsTensorMaps(std::string &why) const {
    why = "tensor maps need a CUDA device (this is " + name() + ")";
    return false;
  }
  virtual bool encodeTensorMap(const TensorMapParams &p, void *out,
                               std::string &err) {
    err = "tensor maps need a CUDA device (this is " + name() + ")";
    return false;
  }
};

std::unique_ptr<Backend> createCpuBackend(std::string &err);
// Returns null with err starting "no CUDA driver" / "no CUDA device" when
// unavailable.
std::unique_ptr<Backend> createCudaBackend(int ordinal, std::string &err);

} // namespace rt
} // namespace k3

#endif
