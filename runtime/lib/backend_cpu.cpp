// CPU backend: host memory, kernel objects are ELF shared objects loaded with
// dlopen from an anonymous memfd (or an unlinked temp file as a fallback).
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#include "backend.h"
#include "k3/kernel_abi.h"

namespace k3 {
namespace rt {
namespace {

struct CpuModule {
  void *handle = nullptr;
  int fd = -1; // kept open while loaded so the /proc/self/fd path stays unique
};

bool writeAll(int fd, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

/// Device memory is host memory: a checkpoint is converted straight into
/// its weights, with no staging and nothing to copy or wait for.
class DirectUploadStream : public UploadStream {
public:
  uint8_t *hostFor(size_t, uint64_t, uint64_t device) override {
    return reinterpret_cast<uint8_t *>(device);
  }
  bool acquire(size_t, std::string &) override { return true; }
  bool send(size_t, const std::vector<UploadCopy> &, std::string &) override {
    return true;
  }
  bool finish(std::string &) override { return true; }
};

class CpuBackend : public Backend {
public:
  std::string name() const override { return "cpu"; }
  bool supportsTarget(const std::string &target,
                      std::string &why) const override {
#if defined(__x86_64__)
    if (target == artifact::kTargetCpuX86_64)
      return true;
#endif
    why = "target '" + target + "' does not run on the cpu device of this host";
    return false;
  }
  bool alloc(size_t bytes, uint64_t &ptr, std::string &err) override {
    size_t n = (bytes + 255) & ~size_t(255);
    if (n == 0)
      n = 256;
    void *p = std::aligned_alloc(256, n);
    if (!p) {
      err = "out of host memory allocating " + std::to_string(bytes) + " bytes";
      return false;
    }
    memset(p, 0, n);
    ptr = reinterpret_cast<uint64_t>(p);
    return true;
  }
  void release(uint64_t ptr) override {
    std::free(reinterpret_cast<void *>(ptr));
  }
  bool upload(uint64_t dst, const void *src, size_t n, std::string &) override {
    if (n)
      memcpy(reinterpret_cast<void *>(dst), src, n);
    return true;
  }
  std::unique_ptr<UploadStream> openUploadStream(size_t, uint64_t,
                                                 std::string &) override {
    return std::make_unique<DirectUploadStream>();
  }
  bool download(void *dst, uint64_t src, size_t n, std::string &) override {
    if (n)
      memcpy(dst, reinterpret_cast<const void *>(src), n);
    return true;
  }
  bool copy(uint64_t dst, uint64_t src, size_t n, std::string &) override {
    if (n)
      memmove(reinterpret_cast<void *>(dst),
              reinterpret_cast<const void *>(src), n);
    return true;
  }
  bool zero(uint64_t dst, size_t n, std::string &) override {
    if (n)
      memset(reinterpret_cast<void *>(dst), 0, n);
    return true;
  }
  bool loadObject(const artifact::KernelObject &obj, size_t index,
                  void *&module, std::string &err) override {
    std::string what =
        "kernel object " + std::to_string(index) + " (" + obj.target + ")";
    if (obj.data.size() < 4 || memcmp(obj.data.data(),
                                      "\x7f"
                                      "ELF",
                                      4) != 0) {
      err = what + " is not an ELF shared object";
      return false;
    }
    auto *m = new CpuModule();
    std::string path;
#if defined(MFD_CLOEXEC)
    m->fd = memfd_create(("k3-kernels-" + std::to_string(index)).c_str(),
                         MFD_CLOEXEC);
    if (m->fd >= 0) {
      if (!writeAll(m->fd, obj.data.data(), obj.data.size())) {
        err = what + ": writing memfd failed: " + strerror(errno);
        ::close(m->fd);
        delete m;
        return false;
      }
      path = "/proc/self/fd/" + std::to_string(m->fd);
      if (void *h = dlopen(path.c_str(),
                           RTLD_NOW | RTLD_LOCAL |
                               RTLD_NOLOAD)) { // name taken: use a temp file
        dlclose(h);
        path.clear();
      }
    }
#endif
    bool tempFile = false;
    if (path.empty()) {
      if (m->fd >= 0) {
        ::close(m->fd);
        m->fd = -1;
      }
      const char *tmp = getenv("TMPDIR");
      std::string tmpl =
          std::string(tmp && *tmp ? tmp : "/tmp") + "/k3-kernels-XXXXXX";
      std::vector<char> buf(tmpl.begin(), tmpl.end());
      buf.push_back(0);
      int fd = mkstemp(buf.data());
      if (fd < 0) {
        err = what + ": cannot create a temp file in " + tmpl + ": " +
              strerror(errno);
        delete m;
        return false;
      }
      path = buf.data();
      bool ok = writeAll(fd, obj.data.data(), obj.data.size());
      ::close(fd);
      if (!ok) {
        err = what + ": writing " + path + " failed";
        unlink(path.c_str());
        delete m;
        return false;
      }
      tempFile = true;
    }
    m->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (tempFile)
      unlink(path.c_str());
    if (!m->handle) {
      const char *e = dlerror();
      err = what + ": dlopen failed: " + (e ? e : "unknown error");
      if (m->fd >= 0)
        ::close(m->fd);
      delete m;
      return false;
    }
    module = m;
    return true;
  }
  void unloadObject(void *module) override {
    auto *m = static_cast<CpuModule *>(module);
    if (!m)
      return;
    if (m->handle)
      dlclose(m->handle);
    if (m->fd >= 0)
      ::close(m->fd);
    delete m;
  }
  bool getKernel(void *module, const std::string &name, void *&fn,
                 std::string &err) override {
    auto *m = static_cast<CpuModule *>(module);
    dlerror();
    fn = dlsym(m->handle, name.c_str());
    if (!fn) {
      err = "kernel symbol '" + name + "' not found in the shared object";
      return false;
    }
    return true;
  }
  bool launch(void *fn, const std::string &name, const int64_t grid[3],
              const int64_t block[3], int64_t smem, void **params,
              size_t numArgs, std::string &err) override {
    if (capturing) {
      // Argument slots are 8 bytes (kernel_abi.h); their values are kept.
      RecordedLaunch l{fn,
                       name,
                       {grid[0], grid[1], grid[2]},
                       {block[0], block[1], block[2]},
                       smem,
                       {}};
      for (size_t i = 0; i < numArgs; ++i) {
        uint64_t v = 0;
        memcpy(&v, params[i], sizeof v);
        l.args.push_back(v);
      }
      recording.push_back(std::move(l));
      return true;
    }
    return run(fn, grid, block, smem, params, numArgs);
  }
  bool run(void *fn, const int64_t grid[3], const int64_t block[3],
           int64_t smem, void **params, size_t numArgs) {
    auto kernel = reinterpret_cast<k3_cpu_kernel_fn>(fn);
    k3_cpu_launch_context ctx;
    memset(&ctx, 0, sizeof ctx);
    for (int i = 0; i < 3; ++i) {
      ctx.grid_dim[i] = grid[i];
      ctx.block_dim[i] = block[i];
    }
    ctx.shared_mem_bytes = smem;
    std::vector<uint8_t> shared(size_t(smem > 0 ? smem : 0));
    params[numArgs] = &ctx;
    for (int64_t z = 0; z < grid[2]; ++z)
      for (int64_t y = 0; y < grid[1]; ++y)
        for (int64_t x = 0; x < grid[0]; ++x) {
          ctx.block_id[0] = x;
          ctx.block_id[1] = y;
          ctx.block_id[2] = z;
          if (smem > 0) {
            memset(shared.data(), 0, shared.size());
            ctx.shared_mem = shared.data();
          }
          kernel(params);
        }
    return true;
  }
  bool synchronize(std::string &) override { return true; }

  // Launch graphs: the launches with their argument values, replayed in
  // order (the session then skips evaluating launch dimensions and
  // arguments; mainly, the CPU runs the same graph logic as CUDA).
  struct RecordedLaunch {
    void *fn;
    std::string name;
    int64_t grid[3], block[3], smem;
    std::vector<uint64_t> args;
  };
  bool capturing = false;
  std::vector<RecordedLaunch> recording;
  bool supportsGraphs() const override { return true; }
  bool beginCapture(std::string &err) override {
    if (capturing) {
      err = "already capturing";
      return false;
    }
    capturing = true;
    recording.clear();
    return true;
  }
  bool endCapture(void *&graph, std::string &err) override {
    if (!capturing) {
      err = "not capturing";
      return false;
    }
    capturing = false;
    graph = new std::vector<RecordedLaunch>(std::move(recording));
    recording.clear();
    return true;
  }
  bool launchGraph(void *graph, std::string &err) override {
    std::vector<void *> params;
    for (RecordedLaunch &l :
         *static_cast<std::vector<RecordedLaunch> *>(graph)) {
      params.assign(l.args.size() + 1, nullptr);
      for (size_t i = 0; i < l.args.size(); ++i)
        params[i] = &l.args[i];
      if (!run(l.fn, l.grid, l.block, l.smem, params.data(), l.args.size()))
        return false;
    }
    return true;
  }
  void destroyGraph(void *graph) override {
    delete static_cast<std::vector<RecordedLaunch> *>(graph);
  }
};

} // namespace

std::unique_ptr<Backend> createCpuBackend(std::string &) {
  return std::make_unique<CpuBackend>();
}

} // namespace rt
} // namespace k3
