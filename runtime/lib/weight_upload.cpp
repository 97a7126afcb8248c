// Staged, pipelined bulk uploads (weight_upload.h): chunk planning, the
// threads that fill a chunk, and the slot rotation over an UploadStream.
#include "weight_upload.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <system_error>
#include <thread>

namespace k3 {
namespace rt {

namespace {

uint64_t alignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/// `p` without its first `k` elements.
UploadPiece advance(UploadPiece p, uint64_t k, uint64_t elementBytes) {
  p.first += k;
  p.count -= k;
  p.dstOffset += k * elementBytes;
  p.staged += k * elementBytes;
  return p;
}

uint64_t pieceBytes(const std::vector<UploadTarget> &targets,
                    const UploadPiece &p) {
  return p.count * targets[p.target].elementBytes;
}

uint64_t chunkBytes(const std::vector<UploadTarget> &targets,
                    const UploadChunk &c) {
  uint64_t n = 0;
  for (const UploadPiece &p : c.pieces)
    n += pieceBytes(targets, p);
  return n;
}

} // namespace

bool planChunks(const std::vector<UploadTarget> &targets, uint64_t slotBytes,
                std::vector<UploadChunk> &chunks, std::string &err) {
  chunks.assign(1, UploadChunk());
  for (size_t t = 0; t < targets.size(); ++t) {
    const uint64_t eb = targets[t].elementBytes;
    if (eb == 0 || eb > slotBytes) {
      err = "weight '" + targets[t].name + "': " + std::to_string(eb) +
            "-byte elements do not fit a " + std::to_string(slotBytes) +
            "-byte staging slot";
      return false;
    }
    uint64_t partOffset = 0;
    for (size_t p = 0; p < targets[t].partElements.size(); ++p) {
      const uint64_t n = targets[t].partElements[p];
      for (uint64_t first = 0; first < n;) {
        UploadChunk &c = chunks.back();
        uint64_t at = c.pieces.empty() ? 0 : alignUp(c.used, kPieceAlign);
        uint64_t room = at < slotBytes ? (slotBytes - at) / eb : 0;
        if (room == 0) { // the slot is full: the rest goes to the next one
          chunks.emplace_back();
          continue;
        }
        uint64_t take = std::min(n - first, room);
        c.pieces.push_back({t, p, first, take, partOffset + first * eb, at});
        c.used = at + take * eb;
        first += take;
      }
      partOffset += n * eb;
    }
  }
  if (chunks.back().pieces.empty())
    chunks.pop_back();
  return true;
}

std::vector<std::vector<UploadPiece>>
shareOut(const std::vector<UploadTarget> &targets, const UploadChunk &chunk,
         unsigned threads, uint64_t minShareBytes) {
  const uint64_t total = chunkBytes(targets, chunk);
  uint64_t shares = std::max<uint64_t>(1, threads);
  if (minShareBytes)
    shares = std::max<uint64_t>(
        1, std::min(shares, total / std::max<uint64_t>(1, minShareBytes)));
  const uint64_t perShare =
      std::max<uint64_t>(1, (total + shares - 1) / shares);
  std::vector<std::vector<UploadPiece>> out(1);
  uint64_t budget = perShare;
  for (UploadPiece rest : chunk.pieces) {
    const uint64_t eb = targets[rest.target].elementBytes;
    while (rest.count) {
      if (budget == 0 && out.size() < shares) {
        out.emplace_back();
        budget = perShare;
      }
      // At least one element, so that every share makes progress.
      uint64_t take =
          budget ? std::min(rest.count, std::max<uint64_t>(1, budget / eb))
                 : rest.count;
      UploadPiece head = rest;
      head.count = take;
      out.back().push_back(head);
      budget -= std::min(budget, take * eb);
      rest = advance(rest, take, eb);
    }
  }
  if (out.back().empty())
    out.pop_back();
  return out;
}

std::vector<UploadCopy> copiesOf(const std::vector<UploadTarget> &targets,
                                 const UploadChunk &chunk) {
  std::vector<UploadCopy> copies;
  size_t lastTarget = 0;
  for (const UploadPiece &p : chunk.pieces) {
    UploadCopy c{p.staged, targets[p.target].device + p.dstOffset,
                 pieceBytes(targets, p)};
    // Only within one target: two weights adjacent in device addresses can
    // be two allocations, and one copy across both is an invalid argument
    // to cuMemcpyHtoDAsync (CUDA_ERROR_INVALID_VALUE on the H200).
    bool sameTarget = !copies.empty() && lastTarget == p.target;
    lastTarget = p.target;
    if (sameTarget) {
      UploadCopy &last = copies.back();
      if (last.staged + last.bytes == c.staged &&
          last.device + last.bytes == c.device) {
        last.bytes += c.bytes;
        continue;
      }
    }
    copies.push_back(c);
  }
  return copies;
}

namespace {

/// Fills one share of a chunk; never throws (it runs on its own thread).
void fillShare(UploadStream &stream, size_t slot,
               const std::vector<UploadTarget> &targets,
               const std::vector<UploadPiece> &share, const FillFn &fill,
               std::string &err) {
  try {
    for (const UploadPiece &p : share) {
      uint8_t *out = stream.hostFor(slot, p.staged,
                                    targets[p.target].device + p.dstOffset);
      if (!fill(p, out, err)) {
        if (err.empty())
          err = "converting weight '" + targets[p.target].name + "' failed";
        return;
      }
    }
  } catch (const std::exception &e) {
    err = std::string("converting weights: ") + e.what();
  } catch (...) {
    err = "converting weights: internal error";
  }
}

/// Fills a chunk's slot: the first share on this thread, the others on
/// threads of their own (where one cannot start, this thread does its
/// share); every thread is joined before returning.
bool fillChunk(UploadStream &stream, size_t slot,
               const std::vector<UploadTarget> &targets,
               const UploadChunk &chunk, const FillFn &fill,
               const UploadOptions &opt, std::string &err) {
  std::vector<std::vector<UploadPiece>> shares =
      shareOut(targets, chunk, opt.threads, opt.minShareBytes);
  std::vector<std::string> errs(shares.size());
  std::vector<std::thread> threads;
  std::vector<size_t> here = {0};
  for (size_t s = 1; s < shares.size(); ++s) {
    try {
      threads.emplace_back(fillShare, std::ref(stream), slot,
                           std::cref(targets), std::cref(shares[s]),
                           std::cref(fill), std::ref(errs[s]));
    } catch (const std::system_error &) {
      here.push_back(s);
    }
  }
  for (size_t s : here)
    fillShare(stream, slot, targets, shares[s], fill, errs[s]);
  for (std::thread &t : threads)
    t.join();
  for (const std::string &e : errs)
    if (!e.empty()) {
      err = e;
      return false;
    }
  return true;
}

/// Calls opt.progress at most every opt.progressSeconds (a terminal line
/// redrawn more often only flickers), and always when `final`.
class ProgressReport {
public:
  ProgressReport(const UploadOptions &opt, uint64_t total)
      : opt_(opt), total_(total), last_(std::chrono::steady_clock::now()) {}
  void operator()(uint64_t done, bool final) {
    if (!opt_.progress)
      return;
    auto now = std::chrono::steady_clock::now();
    if (!final && std::chrono::duration<double>(now - last_).count() <
                      opt_.progressSeconds)
      return;
    last_ = now;
    opt_.progress(done, total_);
  }

private:
  const UploadOptions &opt_;
  uint64_t total_;
  std::chrono::steady_clock::time_point last_;
};

} // namespace

UploadStatus runUpload(UploadStream &stream,
                       const std::vector<UploadTarget> &targets,
                       const std::vector<UploadChunk> &chunks,
                       const FillFn &fill, const UploadOptions &opt,
                       std::string &err) {
  uint64_t total = 0, done = 0;
  for (const UploadChunk &c : chunks)
    total += chunkBytes(targets, c);
  ProgressReport report(opt, total);
  const size_t slots = std::max<size_t>(1, opt.slots);
  for (size_t c = 0; c < chunks.size(); ++c) {
    size_t slot = c % slots;
    if (!stream.acquire(slot, err))
      return UploadStatus::DeviceFailed;
    if (!fillChunk(stream, slot, targets, chunks[c], fill, opt, err))
      return UploadStatus::FillFailed;
    if (!stream.send(slot, copiesOf(targets, chunks[c]), err))
      return UploadStatus::DeviceFailed;
    done += chunkBytes(targets, chunks[c]);
    report(done, false);
  }
  if (!stream.finish(err))
    return UploadStatus::DeviceFailed;
  report(done, true);
  return UploadStatus::Ok;
}

UploadStatus uploadTargets(Backend &be,
                           const std::vector<UploadTarget> &targets,
                           const FillFn &fill, const UploadOptions &opt,
                           std::string &err) {
  std::vector<UploadChunk> chunks;
  if (!planChunks(targets, opt.slotBytes, chunks, err))
    return UploadStatus::FillFailed;
  UploadOptions sized = opt;
  sized.slots = std::max<size_t>(1, std::min(opt.slots, chunks.size()));
  // A small checkpoint needs no 64 MiB of pinned memory: one slot its size.
  if (chunks.size() == 1)
    sized.slotBytes = alignUp(chunks[0].used, 4096);
  if (chunks.empty()) {
    ProgressReport(sized, 0)(0, true);
    return UploadStatus::Ok;
  }
  std::unique_ptr<UploadStream> stream =
      be.openUploadStream(sized.slots, sized.slotBytes, err);
  if (!stream)
    return UploadStatus::DeviceFailed;
  return runUpload(*stream, targets, chunks, fill, sized, err);
}

bool uploadThreads(unsigned &threads, std::string &err) {
  if (const char *v = std::getenv("K3_LOAD_THREADS")) {
    char *end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (!*v || *end || n < 1 || n > 256) {
      err = std::string("K3_LOAD_THREADS must be a number from 1 to 256, "
                        "got '") +
            v + "'";
      return false;
    }
    threads = unsigned(n);
    return true;
  }
  threads = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  return true;
}

/// openSynchronousUploadStream's stream: ordinary host memory, each copy a
/// synchronous Backend::upload (nothing is in flight between calls).
class SynchronousUploadStream : public UploadStream {
public:
  SynchronousUploadStream(Backend &be, size_t slots, uint64_t slotBytes)
      : be_(be), slots_(slots, std::vector<uint8_t>(slotBytes)) {}
  uint8_t *hostFor(size_t slot, uint64_t staged, uint64_t) override {
    return slots_[slot].data() + staged;
  }
  bool acquire(size_t, std::string &) override { return true; }
  bool send(size_t slot, const std::vector<UploadCopy> &copies,
            std::string &err) override {
    for (const UploadCopy &c : copies)
      if (!be_.upload(c.device, slots_[slot].data() + c.staged, c.bytes, err))
        return false;
    return true;
  }
  bool finish(std::string &) override { return true; }

private:
  Backend &be_;
  std::vector<std::vector<uint8_t>> slots_;
};

std::unique_ptr<UploadStream>
openSynchronousUploadStream(Backend &be, size_t slots, uint64_t slotBytes) {
  return std::make_unique<SynchronousUploadStream>(be, slots, slotBytes);
}

} // namespace rt
} // namespace k3
