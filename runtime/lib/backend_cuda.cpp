// CUDA backend: libcuda.so.1 is loaded at run time with dlopen, so the runtime
// builds and starts on machines without a GPU. Only the driver API entry
// points below are used; their types are declared here (matching cuda.h).
#include <cstring>
#include <dlfcn.h>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backend.h"

namespace k3 {
namespace rt {
namespace {

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUevent_st *CUevent;
constexpr unsigned CU_EVENT_DEFAULT = 0; // timing enabled
constexpr unsigned CU_EVENT_DISABLE_TIMING = 2;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
// cuLaunchKernelEx (CUDA 12+): a launch config with attributes; the one used
// here is programmatic stream serialization (id 6, an int value).
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;
struct CUlaunchAttribute {
  int id;
  char pad[8 - sizeof(int)];
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value;
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned numAttrs;
};
// Tensor maps (cuda.h, CUDA 12+/13): CUtensorMap is 16 u64 ("opaque"),
// 64-byte aligned; the enums are passed as int.
typedef unsigned long long cuuint64_t;
typedef unsigned int cuuint32_t;
constexpr int CU_TENSOR_MAP_DATA_TYPE_INT32 = 3;
constexpr int CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6;
constexpr int CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7;
constexpr int CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9;
// CU_TENSOR_MAP_INTERLEAVE_NONE = 0; CU_TENSOR_MAP_SWIZZLE_{NONE,32B,64B,128B}
// = 0..3; CU_TENSOR_MAP_L2_PROMOTION_{NONE,L2_64B,L2_128B,L2_256B} = 0..3;
// CU_TENSOR_MAP_FLOAT_OOB_FILL_{NONE,NAN_REQUEST_ZERO_FMA} = 0..1: the spec's
// codes are these values.

struct Driver {
  void *lib = nullptr;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)(void);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemGetInfo)(size_t *, size_t *);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void *);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void **,
                             void **);
  // Optional (null on drivers without it): launches then never overlap.
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **,
                               void **);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph,
                                          unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  // Optional: without it a launch graph has one lane (graphLanes).
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  // Optional (null on drivers without it): tensor maps are then refused.
  CUresult (*cuTensorMapEncodeTiled)(void *, int, cuuint32_t, void *,
                                     const cuuint64_t *, const cuuint64_t *,
                                     const cuuint32_t *, const cuuint32_t *,
                                     int, int, int, int);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);

  std::string describe(CUresult r) const {
    const char *n = nullptr, *s = nullptr;
    if (cuGetErrorName)
      cuGetErrorName(r, &n);
    if (cuGetErrorString)
      cuGetErrorString(r, &s);
    return std::string(n ? n : "CUDA_ERROR") + " (" + std::to_string(r) +
           (s ? ": " + std::string(s) : "") + ")";
  }
};

template <typename F>
bool sym(Driver &d, F &fp, const char *name, std::string &err) {
  fp = reinterpret_cast<F>(dlsym(d.lib, name));
  if (!fp) {
    err = std::string("no CUDA driver: libcuda.so.1 lacks ") + name +
          " (driver too old?)";
    return false;
  }
  return true;
}

// Events (profiling and timing marks) are optional: a driver without them
// still runs everything else, and createMark says what is missing.
// cuEventElapsedTime_v2 (CUDA 12.8+) is preferred, the original otherwise.
bool loadEvents(Driver &d) {
  auto opt = [&](auto &fp, const char *name) {
    fp = reinterpret_cast<std::remove_reference_t<decltype(fp)>>(
        dlsym(d.lib, name));
  };
  opt(d.cuEventCreate, "cuEventCreate");
  opt(d.cuEventRecord, "cuEventRecord");
  opt(d.cuEventSynchronize, "cuEventSynchronize");
  opt(d.cuEventElapsedTime, "cuEventElapsedTime_v2");
  if (!d.cuEventElapsedTime)
    opt(d.cuEventElapsedTime, "cuEventElapsedTime");
  opt(d.cuEventDestroy, "cuEventDestroy_v2");
  if (!d.cuEventDestroy)
    opt(d.cuEventDestroy, "cuEventDestroy");
  opt(d.cuStreamWaitEvent, "cuStreamWaitEvent");
  return true;
}

bool loadDriver(Driver &d, std::string &err) {
  d.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!d.lib) {
    const char *e = dlerror();
    err = std::string("no CUDA driver available: cannot load libcuda.so.1 (") +
          (e ? e : "not found") + ")";
    return false;
  }
  d.cuTensorMapEncodeTiled =
      reinterpret_cast<decltype(d.cuTensorMapEncodeTiled)>(
          dlsym(d.lib, "cuTensorMapEncodeTiled"));
  d.cuLaunchKernelEx = reinterpret_cast<decltype(d.cuLaunchKernelEx)>(
      dlsym(d.lib, "cuLaunchKernelEx"));
  return sym(d, d.cuInit, "cuInit", err) &&
         sym(d, d.cuDriverGetVersion, "cuDriverGetVersion", err) &&
         sym(d, d.cuDeviceGetCount, "cuDeviceGetCount", err) &&
         sym(d, d.cuDeviceGet, "cuDeviceGet", err) &&
         sym(d, d.cuDeviceGetName, "cuDeviceGetName", err) &&
         sym(d, d.cuDeviceGetAttribute, "cuDeviceGetAttribute", err) &&
         sym(d, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", err) &&
         sym(d, d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2",
             err) &&
         sym(d, d.cuCtxSetCurrent, "cuCtxSetCurrent", err) &&
         sym(d, d.cuCtxSynchronize, "cuCtxSynchronize", err) &&
         sym(d, d.cuModuleLoadData, "cuModuleLoadData", err) &&
         sym(d, d.cuModuleUnload, "cuModuleUnload", err) &&
         sym(d, d.cuModuleGetFunction, "cuModuleGetFunction", err) &&
         sym(d, d.cuFuncSetAttribute, "cuFuncSetAttribute", err) &&
         sym(d, d.cuMemAlloc, "cuMemAlloc_v2", err) &&
         sym(d, d.cuMemFree, "cuMemFree_v2", err) &&
         sym(d, d.cuMemGetInfo, "cuMemGetInfo_v2", err) &&
         sym(d, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2", err) &&
         sym(d, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", err) &&
         sym(d, d.cuMemHostAlloc, "cuMemHostAlloc", err) &&
         sym(d, d.cuMemFreeHost, "cuMemFreeHost", err) &&
         sym(d, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2", err) &&
         sym(d, d.cuMemsetD8, "cuMemsetD8_v2", err) &&
         sym(d, d.cuMemcpyDtoD, "cuMemcpyDtoD_v2", err) &&
         sym(d, d.cuLaunchKernel, "cuLaunchKernel", err) &&
         sym(d, d.cuGetErrorName, "cuGetErrorName", err) &&
         sym(d, d.cuGetErrorString, "cuGetErrorString", err) &&
         sym(d, d.cuStreamCreate, "cuStreamCreate", err) &&
         sym(d, d.cuStreamDestroy, "cuStreamDestroy_v2", err) &&
         sym(d, d.cuStreamSynchronize, "cuStreamSynchronize", err) &&
         sym(d, d.cuStreamBeginCapture, "cuStreamBeginCapture_v2", err) &&
         sym(d, d.cuStreamEndCapture, "cuStreamEndCapture", err) &&
         sym(d, d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags",
             err) &&
         sym(d, d.cuGraphLaunch, "cuGraphLaunch", err) &&
         sym(d, d.cuGraphExecDestroy, "cuGraphExecDestroy", err) &&
         sym(d, d.cuGraphDestroy, "cuGraphDestroy", err) && loadEvents(d);
}

/// `call` (about `what`) failed unless r is CUDA_SUCCESS: the message in
/// `err`.
bool checkResult(const Driver &d, CUresult r, const char *call,
                 const std::string &what, std::string &err) {
  if (r == CUDA_SUCCESS)
    return true;
  err = std::string(call) + (what.empty() ? "" : " (" + what + ")") +
        " failed: " + d.describe(r);
  return false;
}

/// Bulk uploads (UploadStream): pinned staging slots (cuMemHostAlloc), the
/// copies on a non-blocking stream of their own (cuMemcpyHtoDAsync: DMA
/// from pinned memory while host threads fill the next slot), an event per
/// slot recorded after its copies so that a slot is written again only once
/// they are done (a stream synchronize where the driver lacks events).
class CudaUploadStream : public UploadStream {
public:
  explicit CudaUploadStream(const Driver &d) : d_(d) {}
  ~CudaUploadStream() override {
    if (stream_) // after an error, copies may still be reading the slots
      d_.cuStreamSynchronize(stream_);
    for (CUevent e : events_)
      if (e)
        d_.cuEventDestroy(e);
    if (stream_)
      d_.cuStreamDestroy(stream_);
    for (uint8_t *p : slots_)
      if (p)
        d_.cuMemFreeHost(p);
  }
  bool open(size_t slots, uint64_t slotBytes, std::string &err) {
    // The destinations were zeroed by cuMemsetD8 on the legacy default
    // stream, which a non-blocking stream does not wait for.
    if (!checkResult(d_, d_.cuCtxSynchronize(), "cuCtxSynchronize",
                     "before uploading weights", err))
      return false;
    CUstream s = nullptr;
    if (!checkResult(d_, d_.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING),
                     "cuStreamCreate", "weight uploads", err))
      return false;
    stream_ = s;
    slots_.assign(slots, nullptr);
    pending_.assign(slots, false);
    for (uint8_t *&p : slots_) {
      void *h = nullptr;
      if (!checkResult(
              d_, d_.cuMemHostAlloc(&h, slotBytes, 0), "cuMemHostAlloc",
              std::to_string(slotBytes) + "-byte pinned staging slot", err))
        return false;
      p = static_cast<uint8_t *>(h);
    }
    if (!d_.cuEventCreate || !d_.cuEventRecord || !d_.cuEventSynchronize ||
        !d_.cuEventDestroy)
      return true;
    events_.assign(slots, nullptr);
    for (CUevent &e : events_)
      if (!checkResult(d_, d_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING),
                       "cuEventCreate", "weight upload slot", err)) {
        e = nullptr;
        return false;
      }
    return true;
  }
  uint8_t *hostFor(size_t slot, uint64_t staged, uint64_t) override {
    return slots_[slot] + staged;
  }
  bool acquire(size_t slot, std::string &err) override {
    if (!pending_[slot])
      return true;
    pending_[slot] = false;
    return events_.empty()
               ? checkResult(d_, d_.cuStreamSynchronize(stream_),
                             "cuStreamSynchronize", "weight uploads", err)
               : checkResult(d_, d_.cuEventSynchronize(events_[slot]),
                             "cuEventSynchronize", "weight upload slot", err);
  }
  bool send(size_t slot, const std::vector<UploadCopy> &copies,
            std::string &err) override {
    pending_[slot] = true;
    for (const UploadCopy &c : copies)
      if (!checkResult(d_,
                       d_.cuMemcpyHtoDAsync(c.device, slots_[slot] + c.staged,
                                            c.bytes, stream_),
                       "cuMemcpyHtoDAsync", std::to_string(c.bytes) + " bytes",
                       err))
        return false;
    return events_.empty() ||
           checkResult(d_, d_.cuEventRecord(events_[slot], stream_),
                       "cuEventRecord", "weight upload slot", err);
  }
  bool finish(std::string &err) override {
    pending_.assign(pending_.size(), false);
    return checkResult(d_, d_.cuStreamSynchronize(stream_),
                       "cuStreamSynchronize", "weight uploads", err);
  }

private:
  const Driver &d_;
  CUstream stream_ = nullptr;
  std::vector<uint8_t *> slots_;
  std::vector<CUevent> events_; // empty: the driver has no events
  std::vector<bool> pending_;   // copies sent, not yet waited for
};

class CudaBackend : public Backend {
public:
  Driver d{};
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  int ordinal = 0, ccMajor = 0, ccMinor = 0, maxSmemOptin = 0, smCount_ = 0;
  std::unordered_map<void *, int64_t>
      smemGranted; // kernel -> opted-in dynamic shared memory
  std::string devName;
  // Everything runs on the legacy default stream (uploads and downloads are
  // synchronous copies, ordered with the launches); a graph is recorded on
  // its own stream and replayed on the default stream.
  CUstream captureStream = nullptr;
  bool capturing = false;
  bool gridOverlap = false; // setGridOverlap: the artifact's kernels allow it
  // Lanes of the graph being captured (launch_lanes.h): lane 0 is
  // captureStream, lane l > 0 laneStreams[l - 1], forked from the capture's
  // start (forkEvent) at its first launch and joined back at the end.
  unsigned lane = 0;
  std::vector<CUstream> laneStreams;
  std::vector<bool> laneForked;
  std::vector<CUevent> stepEvents, joinEvents;
  CUevent forkEvent = nullptr;
  static constexpr unsigned kLanes = 4;

  ~CudaBackend() override {
    for (CUstream s : laneStreams)
      d.cuStreamDestroy(s);
    for (CUevent e : stepEvents)
      d.cuEventDestroy(e);
    for (CUevent e : joinEvents)
      if (e)
        d.cuEventDestroy(e);
    if (forkEvent)
      d.cuEventDestroy(forkEvent);
    if (captureStream)
      d.cuStreamDestroy(captureStream);
    if (ctx)
      d.cuDevicePrimaryCtxRelease(dev);
    // libcuda stays loaded: unloading the driver while other code may use it is
    // unsafe.
  }
  bool check(CUresult r, const char *call, const std::string &what,
             std::string &err) const {
    return checkResult(d, r, call, what, err);
  }
  bool init(int ord, std::string &err) {
    ordinal = ord;
    if (!loadDriver(d, err))
      return false;
    CUresult r = d.cuInit(0);
    if (r != CUDA_SUCCESS) {
      err = "no CUDA device available: cuInit failed: " + d.describe(r);
      return false;
    }
    int n = 0;
    if (!check(d.cuDeviceGetCount(&n), "cuDeviceGetCount", "", err))
      return false;
    if (n == 0) {
      err = "no CUDA device available (driver reports 0 devices)";
      return false;
    }
    if (ord >= n) {
      err = "no CUDA device cuda:" + std::to_string(ord) + " (only " +
            std::to_string(n) + " device(s))";
      return false;
    }
    if (!check(d.cuDeviceGet(&dev, ord), "cuDeviceGet",
               "cuda:" + std::to_string(ord), err))
      return false;
    char name[256] = {0};
    d.cuDeviceGetName(name, sizeof name - 1, dev);
    devName = name;
    if (!check(d.cuDeviceGetAttribute(
                   &ccMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
               "cuDeviceGetAttribute", "compute capability", err) ||
        !check(d.cuDeviceGetAttribute(
                   &ccMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
               "cuDeviceGetAttribute", "compute capability", err) ||
        !check(d.cuDeviceGetAttribute(
                   &maxSmemOptin,
                   CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev),
               "cuDeviceGetAttribute", "max shared memory", err) ||
        !check(d.cuDeviceGetAttribute(
                   &smCount_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
               "cuDeviceGetAttribute", "multiprocessor count", err))
      return false;
    if (!check(d.cuDevicePrimaryCtxRetain(&ctx, dev),
               "cuDevicePrimaryCtxRetain", "cuda:" + std::to_string(ord),
               err)) {
      ctx = nullptr;
      return false;
    }
    return check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", "", err);
  }
  int64_t smCount() const override { return smCount_; }
  bool makeCurrent(std::string &err) override {
    return check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent",
                 "cuda:" + std::to_string(ordinal), err);
  }
  bool memoryInfo(uint64_t &freeBytes, uint64_t &totalBytes) override {
    size_t f = 0, t = 0;
    if (d.cuMemGetInfo(&f, &t) != 0)
      return false;
    freeBytes = f;
    totalBytes = t;
    return true;
  }
  std::string name() const override {
    return "cuda:" + std::to_string(ordinal) + " (" + devName + ", sm_" +
           std::to_string(ccMajor) + std::to_string(ccMinor) + ")";
  }
  bool supportsTarget(const std::string &target,
                      std::string &why) const override {
    // "cuda-sm_XY" runs on compute capability X.Y or newer X.*; "cuda-sm_XYa"
    // only on X.Y exactly.
    if (target.rfind("cuda-sm_", 0) != 0) {
      why = "target '" + target + "' is not a CUDA target";
      return false;
    }
    std::string v = target.substr(8);
    bool archSpecific = !v.empty() && v.back() == 'a';
    if (archSpecific)
      v.pop_back();
    if (v.size() < 2 ||
        v.find_first_not_of("0123456789") != std::string::npos) {
      why = "unrecognised CUDA target '" + target + "'";
      return false;
    }
    int major = atoi(v.substr(0, v.size() - 1).c_str()), minor = v.back() - '0';
    bool ok = archSpecific ? (ccMajor == major && ccMinor == minor)
                           : (ccMajor == major && ccMinor >= minor);
    if (!ok) {
      why = "target '" + target + "' needs compute capability " +
            std::to_string(major) + "." + std::to_string(minor) +
            (archSpecific ? " exactly" : "") + " but " + name() + " has " +
            std::to_string(ccMajor) + "." + std::to_string(ccMinor);
      return false;
    }
    return true;
  }
  bool alloc(size_t bytes, uint64_t &ptr, std::string &err) override {
    CUdeviceptr p = 0;
    if (!check(d.cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc",
               std::to_string(bytes) + " bytes", err))
      return false;
    if (!check(d.cuMemsetD8(p, 0, bytes), "cuMemsetD8", "", err)) {
      d.cuMemFree(p);
      return false;
    }
    ptr = p;
    return true;
  }
  void release(uint64_t ptr) override { d.cuMemFree(CUdeviceptr(ptr)); }
  bool upload(uint64_t dst, const void *src, size_t n,
              std::string &err) override {
    return !n || check(d.cuMemcpyHtoD(dst, src, n), "cuMemcpyHtoD",
                       std::to_string(n) + " bytes", err);
  }
  bool download(void *dst, uint64_t src, size_t n, std::string &err) override {
    return !n || check(d.cuMemcpyDtoH(dst, src, n), "cuMemcpyDtoH",
                       std::to_string(n) + " bytes", err);
  }
  std::unique_ptr<UploadStream> openUploadStream(size_t slots,
                                                 uint64_t slotBytes,
                                                 std::string &err) override {
    auto s = std::make_unique<CudaUploadStream>(d);
    if (!s->open(slots, slotBytes, err))
      return nullptr;
    return s;
  }
  bool copy(uint64_t dst, uint64_t src, size_t n, std::string &err) override {
    return !n || check(d.cuMemcpyDtoD(dst, src, n), "cuMemcpyDtoD",
                       std::to_string(n) + " bytes", err);
  }
  bool zero(uint64_t dst, size_t n, std::string &err) override {
    return !n || check(d.cuMemsetD8(dst, 0, n), "cuMemsetD8", "", err);
  }
  bool loadObject(const artifact::KernelObject &obj, size_t index,
                  void *&module, std::string &err) override {
    CUmodule m = nullptr;
    // cuModuleLoadData needs a NUL-terminated image for PTX; cubins are
    // self-delimiting.
    std::vector<uint8_t> image(obj.data);
    image.push_back(0);
    if (!check(d.cuModuleLoadData(&m, image.data()), "cuModuleLoadData",
               "kernel object " + std::to_string(index) + " (" + obj.target +
                   ")",
               err))
      return false;
    module = m;
    return true;
  }
  void unloadObject(void *module) override {
    d.cuModuleUnload(static_cast<CUmodule>(module));
  }
  bool getKernel(void *module, const std::string &name, void *&fn,
                 std::string &err) override {
    CUfunction f = nullptr;
    if (!check(d.cuModuleGetFunction(&f, static_cast<CUmodule>(module),
                                     name.c_str()),
               "cuModuleGetFunction", "kernel '" + name + "'", err))
      return false;
    fn = f;
    return true;
  }
  bool launch(void *fn, const std::string &name, const int64_t grid[3],
              const int64_t block[3], int64_t smem, void **params,
              size_t numArgs, std::string &err) override {
    for (int i = 0; i < 3; ++i)
      if (grid[i] > 0x7fffffff || block[i] > 1024) {
        err = "launch dims out of range for kernel '" + name + "'";
        return false;
      }
    if (smem > maxSmemOptin) {
      err = "kernel '" + name + "' asks for " + std::to_string(smem) +
            " bytes of dynamic shared memory; " + name_() + " allows at most " +
            std::to_string(maxSmemOptin);
      return false;
    }
    CUfunction f = static_cast<CUfunction>(fn);
    // The 48 KB default covers static plus dynamic shared memory, and every
    // generated kernel has a little static shared memory (the dynamic
    // array's symbol): exactly 48 KB of dynamic shared memory already needs
    // the opt-in. Set once per kernel and size.
    if (smem > 0) {
      int64_t &granted = smemGranted[fn];
      if (granted < smem) {
        if (!check(d.cuFuncSetAttribute(
                       f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                       int(smem)),
                   "cuFuncSetAttribute",
                   "kernel '" + name + "', MAX_DYNAMIC_SHARED_SIZE_BYTES=" +
                       std::to_string(smem),
                   err))
          return false;
        granted = smem;
      }
    }
    params[numArgs] = nullptr;
    if (capturing && gridOverlap && d.cuLaunchKernelEx)
      return launchOverlapped(f, name, grid, block, smem, params, err);
    return check(d.cuLaunchKernel(
                     f, unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2]),
                     unsigned(block[0]), unsigned(block[1]), unsigned(block[2]),
                     unsigned(smem), capturing ? laneStream(lane) : nullptr,
                     params, nullptr),
                 "cuLaunchKernel", "kernel '" + name + "'", err);
  }
  /// A launch into the graph being captured that may start while the
  /// kernel before it drains (its kernel waits for it: griddepcontrol).
  bool launchOverlapped(CUfunction f, const std::string &name,
                        const int64_t grid[3], const int64_t block[3],
                        int64_t smem, void **params, std::string &err) {
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg{unsigned(grid[0]),
                       unsigned(grid[1]),
                       unsigned(grid[2]),
                       unsigned(block[0]),
                       unsigned(block[1]),
                       unsigned(block[2]),
                       unsigned(smem),
                       laneStream(lane),
                       &attr,
                       1};
    return check(d.cuLaunchKernelEx(&cfg, f, params, nullptr),
                 "cuLaunchKernelEx", "kernel '" + name + "'", err);
  }
  std::string name_() const { return name(); }
  bool supportsGraphs() const override { return true; }
  void setGridOverlap(bool on) override { gridOverlap = on; }
  bool beginCapture(std::string &err) override {
    if (!captureStream) {
      if (!check(d.cuStreamCreate(&captureStream, CU_STREAM_NON_BLOCKING),
                 "cuStreamCreate", "graph capture", err))
        return false;
      makeLanes();
    }
    if (!check(d.cuStreamBeginCapture(captureStream,
                                      CU_STREAM_CAPTURE_MODE_RELAXED),
               "cuStreamBeginCapture", "", err))
      return false;
    capturing = true;
    lane = 0;
    laneForked.assign(laneStreams.size(), false);
    // The capture's start, where the other lanes fork from.
    return graphLanes() == 1 ||
           check(d.cuEventRecord(forkEvent, captureStream), "cuEventRecord",
                 "graph capture fork", err);
  }
  /// Every lane's stream exists (makeLanes succeeded).
  unsigned graphLanes() const override {
    return laneStreams.size() + 1 == kLanes ? kLanes : 1;
  }
  /// Creates the lanes' streams and events, once, where the driver has the
  /// event functions; until they all exist a capture has one lane.
  void makeLanes() {
    if (!d.cuStreamWaitEvent || !d.cuEventCreate || !d.cuEventRecord ||
        !d.cuEventDestroy || !laneStreams.empty())
      return;
    std::string ignored;
    if (!check(d.cuEventCreate(&forkEvent, CU_EVENT_DISABLE_TIMING),
               "cuEventCreate", "", ignored))
      return;
    joinEvents.assign(kLanes, nullptr);
    for (unsigned l = 1; l < kLanes; ++l) {
      CUstream st = nullptr;
      if (!check(d.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING),
                 "cuStreamCreate", "", ignored) ||
          !check(d.cuEventCreate(&joinEvents[l], CU_EVENT_DISABLE_TIMING),
                 "cuEventCreate", "", ignored)) {
        if (st)
          d.cuStreamDestroy(st);
        return;
      }
      laneStreams.push_back(st);
    }
  }
  CUstream laneStream(unsigned l) const {
    return l == 0 ? captureStream : laneStreams[l - 1];
  }
  bool useLane(unsigned l, const std::vector<size_t> &waitFor,
               std::string &err) override {
    if (!capturing || l >= graphLanes()) {
      err = "lane " + std::to_string(l) + " outside a capture of " +
            std::to_string(graphLanes()) + " lanes";
      return false;
    }
    lane = l;
    CUstream st = laneStream(l);
    if (l > 0 && !laneForked[l - 1]) {
      if (!check(d.cuStreamWaitEvent(st, forkEvent, 0), "cuStreamWaitEvent",
                 "graph lane fork", err))
        return false;
      laneForked[l - 1] = true;
    }
    for (size_t step : waitFor) {
      if (step >= stepEvents.size()) {
        err = "lane wait for launch " + std::to_string(step) +
              ", which no event marks";
        return false;
      }
      if (!check(d.cuStreamWaitEvent(st, stepEvents[step], 0),
                 "cuStreamWaitEvent", "graph lane wait", err))
        return false;
    }
    return true;
  }
  bool markLaunch(size_t step, std::string &err) override {
    while (stepEvents.size() <= step) {
      CUevent e = nullptr;
      if (!check(d.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                 "graph lane mark", err))
        return false;
      stepEvents.push_back(e);
    }
    return check(d.cuEventRecord(stepEvents[step], laneStream(lane)),
                 "cuEventRecord", "graph lane mark", err);
  }
  bool endCapture(void *&graph, std::string &err) override {
    if (!capturing) {
      err = "not capturing";
      return false;
    }
    capturing = false;
    lane = 0;
    // Every forked lane joins the capture's stream before it ends.
    bool joined = true;
    for (size_t l = 1; l <= laneForked.size(); ++l)
      if (laneForked[l - 1]) {
        joined = joined &&
                 check(d.cuEventRecord(joinEvents[l], laneStreams[l - 1]),
                       "cuEventRecord", "graph lane join", err) &&
                 check(d.cuStreamWaitEvent(captureStream, joinEvents[l], 0),
                       "cuStreamWaitEvent", "graph lane join", err);
        laneForked[l - 1] = false;
      }
    CUgraph g = nullptr;
    if (!check(d.cuStreamEndCapture(captureStream, &g), "cuStreamEndCapture",
               "", err))
      return false;
    if (!joined) {
      d.cuGraphDestroy(g);
      return false;
    }
    CUgraphExec exec = nullptr;
    bool ok = check(d.cuGraphInstantiateWithFlags(&exec, g, 0),
                    "cuGraphInstantiate", "", err);
    d.cuGraphDestroy(g);
    graph = exec;
    return ok;
  }
  bool launchGraph(void *graph, std::string &err) override {
    return check(d.cuGraphLaunch(static_cast<CUgraphExec>(graph), nullptr),
                 "cuGraphLaunch", "", err);
  }
  void destroyGraph(void *graph) override {
    d.cuGraphExecDestroy(static_cast<CUgraphExec>(graph));
  }
  // Timing marks: CUDA events recorded on the stream the launches use (the
  // legacy default stream; marks are never recorded while capturing).
  const char *clockName() const override { return "CUDA events"; }
  bool createMark(void *&mark, std::string &err) override {
    if (!d.cuEventCreate || !d.cuEventRecord || !d.cuEventSynchronize ||
        !d.cuEventElapsedTime || !d.cuEventDestroy) {
      err = "profiling and timing need the driver's cuEvent functions "
            "(cuEventCreate, cuEventRecord, cuEventSynchronize, "
            "cuEventElapsedTime[_v2], cuEventDestroy_v2): libcuda.so.1 lacks "
            "some";
      return false;
    }
    CUevent e = nullptr;
    if (!check(d.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate", "", err))
      return false;
    mark = e;
    return true;
  }
  bool recordMark(void *mark, std::string &err) override {
    return check(d.cuEventRecord(static_cast<CUevent>(mark), nullptr),
                 "cuEventRecord", "", err);
  }
  bool markElapsedMs(void *start, void *end, double &ms,
                     std::string &err) override {
    float f = 0.f;
    if (!check(d.cuEventSynchronize(static_cast<CUevent>(end)),
               "cuEventSynchronize", "", err) ||
        !check(d.cuEventElapsedTime(&f, static_cast<CUevent>(start),
                                    static_cast<CUevent>(end)),
               "cuEventElapsedTime", "", err))
      return false;
    ms = f;
    return true;
  }
  void destroyMark(void *mark) override {
    d.cuEventDestroy(static_cast<CUevent>(mark));
  }
  bool supportsTensorMaps(std::string &why) const override {
    if (!d.cuTensorMapEncodeTiled) {
      why = "libcuda.so.1 lacks cuTensorMapEncodeTiled (driver older than "
            "CUDA 12)";
      return false;
    }
    if (ccMajor < 9) {
      why = "tensor maps need compute capability 9.0 or newer but " + name() +
            " has " + std::to_string(ccMajor) + "." + std::to_string(ccMinor);
      return false;
    }
    return true;
  }
  bool encodeTensorMap(const TensorMapParams &p, void *out,
                       std::string &err) override {
    std::string why;
    if (!supportsTensorMaps(why)) {
      err = why;
      return false;
    }
    if (reinterpret_cast<uintptr_t>(out) % kTensorMapAlign) {
      err = "tensor map destination is not 64-byte aligned";
      return false;
    }
    int dt;
    switch (p.dtype) {
    case artifact::DType::BF16:
      dt = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
      break;
    case artifact::DType::F16:
      dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
      break;
    case artifact::DType::F32:
      dt = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
      break;
    case artifact::DType::I32:
      dt = CU_TENSOR_MAP_DATA_TYPE_INT32;
      break;
    default:
      err = "tensor map dtype not supported";
      return false;
    }
    cuuint64_t dims[artifact::kMaxTensorMapRank] = {};
    cuuint64_t strides[artifact::kMaxTensorMapRank] = {};
    cuuint32_t box[artifact::kMaxTensorMapRank] = {};
    cuuint32_t elementStrides[artifact::kMaxTensorMapRank] = {1, 1, 1, 1, 1};
    for (uint32_t k = 0; k < p.rank; ++k) {
      dims[k] = p.dims[k];
      box[k] = p.box[k];
      if (k + 1 < p.rank)
        strides[k] = p.strides[k];
    }
    memset(out, 0, kTensorMapBytes);
    std::string what = "rank " + std::to_string(p.rank) + ", dims [";
    for (uint32_t k = 0; k < p.rank; ++k)
      what += (k ? ", " : "") + std::to_string(p.dims[k]);
    what += "], box [";
    for (uint32_t k = 0; k < p.rank; ++k)
      what += (k ? ", " : "") + std::to_string(p.box[k]);
    what += "]";
    return check(d.cuTensorMapEncodeTiled(
                     out, dt, p.rank,
                     reinterpret_cast<void *>(uintptr_t(p.address)), dims,
                     strides, box, elementStrides, int(p.interleave),
                     int(p.swizzle), int(p.l2Promotion), int(p.oobFill)),
                 "cuTensorMapEncodeTiled", what, err);
  }
  bool synchronize(std::string &err) override {
    return check(d.cuCtxSynchronize(), "cuCtxSynchronize",
                 "a kernel failed asynchronously", err);
  }
};

} // namespace

std::unique_ptr<Backend> createCudaBackend(int ordinal, std::string &err) {
  auto b = std::make_unique<CudaBackend>();
  if (!b->init(ordinal, err))
    return nullptr;
  return b;
}

} // namespace rt
} // namespace k3
