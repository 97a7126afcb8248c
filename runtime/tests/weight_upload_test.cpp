// Staged checkpoint uploads (runtime/lib/weight_upload.h): chunk planning
// (weights larger than a slot, weights across chunk boundaries, the parts
// of a stacked weight), the threads' shares, the copies, and the pipeline
// over a fake stream whose copies land late (as DMA does) and over the CPU
// backend's direct stream.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <vector>

#include "../lib/backend.h"
#include "../lib/weight_upload.h"

using namespace k3::rt;

namespace {

UploadTarget target(const std::string &name, uint64_t elementBytes,
                    std::vector<uint64_t> parts, uint64_t device = 0) {
  UploadTarget t;
  t.name = name;
  t.elementBytes = elementBytes;
  t.partElements = std::move(parts);
  t.device = device;
  return t;
}

/// The planner's promises: every part covered once, in order, by pieces
/// that fit their slot, start aligned and do not overlap; the target's
/// bytes end to end.
void expectValidPlan(const std::vector<UploadTarget> &targets,
                     const std::vector<UploadChunk> &chunks,
                     uint64_t slotBytes) {
  std::map<std::pair<size_t, size_t>, uint64_t> next; // (target, part)
  size_t lastTarget = 0, lastPart = 0;
  for (const UploadChunk &c : chunks) {
    ASSERT_FALSE(c.pieces.empty());
    uint64_t end = 0;
    for (const UploadPiece &p : c.pieces) {
      uint64_t eb = targets[p.target].elementBytes;
      EXPECT_GT(p.count, 0u);
      EXPECT_EQ(p.staged % kPieceAlign, 0u);
      EXPECT_GE(p.staged, end) << "pieces overlap in a slot";
      end = p.staged + p.count * eb;
      EXPECT_LE(end, slotBytes);
      uint64_t partOffset = 0;
      for (size_t q = 0; q < p.part; ++q)
        partOffset += targets[p.target].partElements[q] * eb;
      EXPECT_EQ(p.dstOffset, partOffset + p.first * eb);
      EXPECT_EQ(p.first, (next[{p.target, p.part}])) << "gap or repeat";
      next[{p.target, p.part}] = p.first + p.count;
      EXPECT_TRUE(p.target > lastTarget ||
                  (p.target == lastTarget && p.part >= lastPart))
          << "out of order";
      lastTarget = p.target;
      lastPart = p.part;
    }
    EXPECT_EQ(c.used, end);
  }
  for (size_t t = 0; t < targets.size(); ++t)
    for (size_t p = 0; p < targets[t].partElements.size(); ++p)
      EXPECT_EQ((next[{t, p}]), targets[t].partElements[p])
          << "target " << t << " part " << p;
}

TEST(WeightUpload, WeightLargerThanASlotIsCutAtElements) {
  std::vector<UploadTarget> ts = {target("big", 2, {1000})};
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks(ts, 256, chunks, err)) << err;
  ASSERT_EQ(chunks.size(), 8u); // 7 x 128 elements + 104
  for (size_t c = 0; c < chunks.size(); ++c) {
    ASSERT_EQ(chunks[c].pieces.size(), 1u);
    const UploadPiece &p = chunks[c].pieces[0];
    EXPECT_EQ(p.first, 128 * c);
    EXPECT_EQ(p.count, c < 7 ? 128u : 104u);
    EXPECT_EQ(p.staged, 0u);
    EXPECT_EQ(p.dstOffset, 256 * c);
  }
  expectValidPlan(ts, chunks, 256);
}

TEST(WeightUpload, SmallWeightsShareAChunkAndOneContinuesInTheNext) {
  std::vector<UploadTarget> ts = {target("a", 4, {10}), target("b", 2, {3}),
                                  target("c", 4, {100})};
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks(ts, 512, chunks, err)) << err;
  ASSERT_EQ(chunks.size(), 2u);
  ASSERT_EQ(chunks[0].pieces.size(), 3u);
  EXPECT_EQ(chunks[0].pieces[1].staged, 64u);  // after a's 40 bytes
  EXPECT_EQ(chunks[0].pieces[2].staged, 128u); // after b's 6
  EXPECT_EQ(chunks[0].pieces[2].count, 96u);   // what fits: 384 bytes
  EXPECT_EQ(chunks[0].used, 512u);
  ASSERT_EQ(chunks[1].pieces.size(), 1u);
  EXPECT_EQ(chunks[1].pieces[0].target, 2u);
  EXPECT_EQ(chunks[1].pieces[0].first, 96u);
  EXPECT_EQ(chunks[1].pieces[0].count, 4u);
  EXPECT_EQ(chunks[1].pieces[0].dstOffset, 384u);
  expectValidPlan(ts, chunks, 512);
}

TEST(WeightUpload, PartsOfAStackedWeight) {
  // 4 experts of 96 bytes: two per 256-byte slot, whole.
  std::vector<UploadTarget> ts = {target("experts", 2, {48, 48, 48, 48})};
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks(ts, 256, chunks, err)) << err;
  ASSERT_EQ(chunks.size(), 2u);
  for (size_t c = 0; c < 2; ++c) {
    ASSERT_EQ(chunks[c].pieces.size(), 2u);
    EXPECT_EQ(chunks[c].pieces[0].part, 2 * c);
    EXPECT_EQ(chunks[c].pieces[1].staged, 128u);
    EXPECT_EQ(chunks[c].pieces[1].dstOffset, 96 * (2 * c + 1));
  }
  expectValidPlan(ts, chunks, 256);
  // 200-byte experts in 300-byte slots: parts cut across chunk boundaries.
  ts = {target("e", 2, {100, 100, 100, 100, 100}), target("tail", 4, {7})};
  ASSERT_TRUE(planChunks(ts, 300, chunks, err)) << err;
  expectValidPlan(ts, chunks, 300);
  ASSERT_GE(chunks[0].pieces.size(), 2u);
  EXPECT_EQ(chunks[0].pieces[1].part, 1u);
  EXPECT_EQ(chunks[0].pieces[1].count, 22u); // (300 - 256) / 2
  EXPECT_EQ(chunks[1].pieces[0].part, 1u);
  EXPECT_EQ(chunks[1].pieces[0].first, 22u);
}

TEST(WeightUpload, EmptyWeightsAndTooLargeElements) {
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks({target("none", 2, {}), target("zero", 4, {0})}, 64,
                         chunks, err));
  EXPECT_TRUE(chunks.empty());
  EXPECT_FALSE(planChunks({target("w", 8, {4})}, 4, chunks, err));
  EXPECT_NE(err.find("weight 'w': 8-byte elements do not fit a 4-byte"),
            std::string::npos)
      << err;
}

TEST(WeightUpload, SharesAreEvenAndCutAtElements) {
  std::vector<UploadTarget> ts = {target("a", 4, {1001}), target("b", 2, {7})};
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks(ts, 1 << 20, chunks, err));
  ASSERT_EQ(chunks.size(), 1u);
  auto shares = shareOut(ts, chunks[0], 3, 1);
  ASSERT_EQ(shares.size(), 3u);
  uint64_t total = 0;
  std::vector<uint64_t> next(2, 0);
  for (auto &share : shares) {
    uint64_t bytes = 0;
    for (const UploadPiece &p : share) {
      uint64_t eb = ts[p.target].elementBytes;
      bytes += p.count * eb;
      EXPECT_EQ(p.first, next[p.target]);
      EXPECT_EQ(p.dstOffset, p.first * eb);
      EXPECT_EQ(p.staged, chunks[0].pieces[p.target].staged + p.first * eb);
      next[p.target] = p.first + p.count;
    }
    EXPECT_NEAR(double(bytes), 4018.0 / 3, 4.0);
    total += bytes;
  }
  EXPECT_EQ(total, 4018u);
  EXPECT_EQ(next, (std::vector<uint64_t>{1001, 7}));
  // Below the minimum share: one thread.
  EXPECT_EQ(shareOut(ts, chunks[0], 8, 1 << 20).size(), 1u);
  EXPECT_EQ(shareOut(ts, chunks[0], 8, 2000).size(), 2u);
}

TEST(WeightUpload, CopiesMergeAdjacentParts) {
  std::vector<UploadTarget> ts = {
      target("experts", 2, {32, 32, 32}, 0x10000),
      target("odd", 2, {3, 3}, 0x20000)}; // 6-byte parts: staged apart
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks(ts, 4096, chunks, err));
  ASSERT_EQ(chunks.size(), 1u);
  std::vector<UploadCopy> copies = copiesOf(ts, chunks[0]);
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_EQ(copies[0].device, 0x10000u);
  EXPECT_EQ(copies[0].bytes, 192u);
  EXPECT_EQ(copies[1].device, 0x20000u);
  EXPECT_EQ(copies[2].device, 0x20006u);
  EXPECT_EQ(copies[2].staged, 256u);
}

// Two weights adjacent in device addresses may be two allocations: one copy
// across both is CUDA_ERROR_INVALID_VALUE, so each target gets its own.
TEST(WeightUpload, CopiesNeverSpanTwoWeights) {
  std::vector<UploadTarget> ts = {target("bias", 4, {16}, 0x10000),
                                  target("w", 4, {16}, 0x10040)};
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks(ts, 4096, chunks, err));
  ASSERT_EQ(chunks.size(), 1u);
  std::vector<UploadCopy> copies = copiesOf(ts, chunks[0]);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].device, 0x10000u);
  EXPECT_EQ(copies[0].bytes, 64u);
  EXPECT_EQ(copies[1].device, 0x10040u);
  EXPECT_EQ(copies[1].bytes, 64u);
}

/// A stream whose copies land only when their slot is acquired again or at
/// finish (as DMA may): a slot written before acquire() would corrupt what
/// lands. "Device" addresses are host addresses.
class LateCopyStream : public UploadStream {
public:
  LateCopyStream(size_t slots, uint64_t slotBytes)
      : slots_(slots, std::vector<uint8_t>(slotBytes)), pending_(slots),
        inFlight_(slots) {}
  uint8_t *hostFor(size_t slot, uint64_t staged, uint64_t) override {
    if (inFlight_[slot])
      writesInFlight++;
    return slots_[slot].data() + staged;
  }
  bool acquire(size_t slot, std::string &) override {
    acquired.push_back(slot);
    land(slot);
    return true;
  }
  bool send(size_t slot, const std::vector<UploadCopy> &copies,
            std::string &err) override {
    if (++sends == failOnSend) {
      err = "copy failed";
      return false;
    }
    pending_[slot] = copies;
    inFlight_[slot] = 1;
    return true;
  }
  bool finish(std::string &) override {
    for (size_t s = 0; s < slots_.size(); ++s)
      land(s);
    finished = true;
    return true;
  }
  std::atomic<int> writesInFlight{0};
  std::vector<size_t> acquired;
  int sends = 0, failOnSend = -1;
  bool finished = false;

private:
  void land(size_t slot) {
    for (const UploadCopy &c : pending_[slot])
      std::memcpy(reinterpret_cast<void *>(c.device),
                  slots_[slot].data() + c.staged, c.bytes);
    pending_[slot].clear();
    inFlight_[slot] = 0;
  }
  std::vector<std::vector<uint8_t>> slots_;
  std::vector<std::vector<UploadCopy>> pending_;
  std::vector<char> inFlight_;
};

/// Byte k of element i of part p of target t: what the fill writes.
uint8_t patternByte(size_t t, size_t p, uint64_t i, uint64_t k) {
  return uint8_t(31 * t + 17 * p + 7 * i + k + 1);
}

bool fillPattern(const std::vector<UploadTarget> &ts, const UploadPiece &p,
                 void *out, std::string &) {
  uint64_t eb = ts[p.target].elementBytes;
  for (uint64_t i = 0; i < p.count; ++i)
    for (uint64_t k = 0; k < eb; ++k)
      static_cast<uint8_t *>(out)[i * eb + k] =
          patternByte(p.target, p.part, p.first + i, k);
  return true;
}

/// Targets whose "device" memory is `mem` (one vector each).
std::vector<UploadTarget>
patternTargets(std::vector<std::vector<uint8_t>> &mem) {
  std::vector<UploadTarget> ts = {
      target("big", 2, {700}), target("small", 4, {5}),
      target("experts", 2, {90, 90, 90, 90}), target("tail", 4, {33})};
  mem.clear();
  for (UploadTarget &t : ts) {
    uint64_t n = 0;
    for (uint64_t e : t.partElements)
      n += e * t.elementBytes;
    mem.emplace_back(n, 0);
    t.device = reinterpret_cast<uint64_t>(mem.back().data());
  }
  return ts;
}

void expectPattern(const std::vector<UploadTarget> &ts,
                   const std::vector<std::vector<uint8_t>> &mem) {
  for (size_t t = 0; t < ts.size(); ++t) {
    uint64_t at = 0;
    for (size_t p = 0; p < ts[t].partElements.size(); ++p)
      for (uint64_t i = 0; i < ts[t].partElements[p]; ++i)
        for (uint64_t k = 0; k < ts[t].elementBytes; ++k, ++at)
          ASSERT_EQ(mem[t][at], patternByte(t, p, i, k))
              << ts[t].name << " byte " << at;
  }
}

TEST(WeightUpload, PipelineLandsEveryByteAndReusesSlotsOnlyWhenDone) {
  std::vector<std::vector<uint8_t>> mem;
  std::vector<UploadTarget> ts = patternTargets(mem);
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks(ts, 256, chunks, err));
  ASSERT_GT(chunks.size(), 6u);
  UploadOptions opt;
  opt.slots = 3;
  opt.slotBytes = 256;
  opt.threads = 4;
  opt.minShareBytes = 1; // every chunk split among threads
  std::vector<std::pair<uint64_t, uint64_t>> reports;
  opt.progress = [&](uint64_t done, uint64_t total) {
    reports.push_back({done, total});
  };
  opt.progressSeconds = 0;
  LateCopyStream stream(3, 256);
  FillFn fill = [&](const UploadPiece &p, void *out, std::string &e) {
    return fillPattern(ts, p, out, e);
  };
  ASSERT_EQ(runUpload(stream, ts, chunks, fill, opt, err), UploadStatus::Ok)
      << err;
  EXPECT_TRUE(stream.finished);
  EXPECT_EQ(stream.writesInFlight.load(), 0);
  ASSERT_EQ(stream.acquired.size(), chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c)
    EXPECT_EQ(stream.acquired[c], c % 3);
  expectPattern(ts, mem);
  uint64_t total = 1400 + 20 + 720 + 132;
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back(), std::make_pair(total, total));
  for (size_t i = 1; i < reports.size(); ++i)
    EXPECT_LE(reports[i - 1].first, reports[i].first);
}

TEST(WeightUpload, FillAndCopyErrorsStopThePipeline) {
  std::vector<std::vector<uint8_t>> mem;
  std::vector<UploadTarget> ts = patternTargets(mem);
  std::vector<UploadChunk> chunks;
  std::string err;
  ASSERT_TRUE(planChunks(ts, 256, chunks, err));
  UploadOptions opt;
  opt.slots = 2;
  opt.threads = 3;
  opt.minShareBytes = 1;
  std::atomic<int> calls{0};
  FillFn failing = [&](const UploadPiece &p, void *out, std::string &e) {
    ++calls;
    if (p.target == 2 && p.part == 1) {
      e = "weight 'experts.1': bad";
      return false;
    }
    return fillPattern(ts, p, out, e);
  };
  LateCopyStream stream(2, 256);
  EXPECT_EQ(runUpload(stream, ts, chunks, failing, opt, err),
            UploadStatus::FillFailed);
  EXPECT_EQ(err, "weight 'experts.1': bad");
  EXPECT_FALSE(stream.finished);

  LateCopyStream failingCopies(2, 256);
  failingCopies.failOnSend = 3;
  FillFn fill = [&](const UploadPiece &p, void *out, std::string &e) {
    return fillPattern(ts, p, out, e);
  };
  err.clear();
  EXPECT_EQ(runUpload(failingCopies, ts, chunks, fill, opt, err),
            UploadStatus::DeviceFailed);
  EXPECT_EQ(err, "copy failed");
  EXPECT_EQ(failingCopies.sends, 3);
}

TEST(WeightUpload, CpuBackendConvertsStraightIntoTheWeights) {
  std::string err;
  std::unique_ptr<Backend> cpu = createCpuBackend(err);
  ASSERT_TRUE(cpu) << err;
  std::vector<std::vector<uint8_t>> mem;
  std::vector<UploadTarget> ts = patternTargets(mem);
  UploadOptions opt;
  opt.slotBytes = 300;
  opt.threads = 2;
  opt.minShareBytes = 1;
  FillFn fill = [&](const UploadPiece &p, void *out, std::string &e) {
    // Direct: the fill writes into the destination itself.
    EXPECT_EQ(reinterpret_cast<uint64_t>(out),
              ts[p.target].device + p.dstOffset);
    return fillPattern(ts, p, out, e);
  };
  ASSERT_EQ(uploadTargets(*cpu, ts, fill, opt, err), UploadStatus::Ok) << err;
  expectPattern(ts, mem);
}

TEST(WeightUpload, SynchronousStreamOfAnyBackend) {
  std::string err;
  std::unique_ptr<Backend> cpu = createCpuBackend(err);
  ASSERT_TRUE(cpu) << err;
  std::vector<std::vector<uint8_t>> mem;
  std::vector<UploadTarget> ts = patternTargets(mem);
  std::vector<UploadChunk> chunks;
  ASSERT_TRUE(planChunks(ts, 128, chunks, err));
  std::unique_ptr<UploadStream> stream =
      openSynchronousUploadStream(*cpu, 2, 128);
  UploadOptions opt;
  opt.slots = 2;
  FillFn fill = [&](const UploadPiece &p, void *out, std::string &e) {
    return fillPattern(ts, p, out, e);
  };
  ASSERT_EQ(runUpload(*stream, ts, chunks, fill, opt, err), UploadStatus::Ok)
      << err;
  expectPattern(ts, mem);
}

// The CUDA stream (pinned slots, async copies, an event per slot), skipped
// without a device: small slots so that every slot is reused many times
// while copies may still run; then every byte read back.
TEST(WeightUpload, CudaPinnedStreamLandsEveryByte) {
  std::string err;
  std::unique_ptr<Backend> cuda = createCudaBackend(0, err);
  if (!cuda) {
    if (err.find("no CUDA") != std::string::npos)
      GTEST_SKIP() << err;
    FAIL() << err;
  }
  std::vector<std::vector<uint8_t>> want;
  std::vector<UploadTarget> ts = patternTargets(want);
  ts.push_back(target("large", 2, {3u << 20, 3u << 20})); // 12 MiB, 2 parts
  want.emplace_back(uint64_t(12) << 20, 0);
  for (size_t t = 0; t < ts.size(); ++t) {
    ts[t].device = 0;
    ASSERT_TRUE(cuda->alloc(want[t].size(), ts[t].device, err)) << err;
  }
  UploadOptions opt;
  opt.slots = 3;
  opt.slotBytes = 1 << 20;
  opt.threads = 4;
  opt.minShareBytes = 4096;
  FillFn fill = [&](const UploadPiece &p, void *out, std::string &e) {
    return fillPattern(ts, p, out, e);
  };
  UploadStatus st = uploadTargets(*cuda, ts, fill, opt, err);
  std::vector<std::vector<uint8_t>> got(ts.size());
  for (size_t t = 0; t < ts.size(); ++t) {
    got[t].resize(want[t].size());
    EXPECT_TRUE(cuda->download(got[t].data(), ts[t].device, got[t].size(), err))
        << err;
    cuda->release(ts[t].device);
  }
  ASSERT_EQ(st, UploadStatus::Ok) << err;
  expectPattern(ts, got);
}

TEST(WeightUpload, LoadThreadsFromTheEnvironment) {
  // Unset again before any check: other tests load weights in this process.
  auto threadsFor = [](const char *value, unsigned &n, std::string &err) {
    setenv("K3_LOAD_THREADS", value, 1);
    bool ok = uploadThreads(n, err);
    unsetenv("K3_LOAD_THREADS");
    return ok;
  };
  unsigned n = 0;
  std::string err;
  ASSERT_TRUE(threadsFor("3", n, err)) << err;
  EXPECT_EQ(n, 3u);
  EXPECT_FALSE(threadsFor("many", n, err));
  EXPECT_NE(err.find("K3_LOAD_THREADS must be a number from 1 to 256, got "
                     "'many'"),
            std::string::npos);
  EXPECT_FALSE(threadsFor("0", n, err));
  ASSERT_TRUE(uploadThreads(n, err));
  EXPECT_GE(n, 1u);
  EXPECT_LE(n, 8u);
}

} // namespace
