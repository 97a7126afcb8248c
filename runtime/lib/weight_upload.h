// Private: uploading many bytes (a checkpoint's weights) through a
// backend's UploadStream. The bytes are cut into chunks that fit a staging
// slot; host threads convert a chunk into its slot while the copies of the
// chunks before it run, and a slot is written again only once its copies
// are done.
#ifndef K3_RT_WEIGHT_UPLOAD_H
#define K3_RT_WEIGHT_UPLOAD_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend.h"

namespace k3 {
namespace rt {

/// One destination: parts of partElements[i] elements of `elementBytes`
/// bytes each, laid end to end from device address `device` (a stacked
/// expert weight: one part per expert; other weights: one part).
struct UploadTarget {
  std::string name; // for errors
  uint64_t device = 0;
  uint64_t elementBytes = 1;
  std::vector<uint64_t> partElements;
};

/// Elements [first, first + count) of part `part` of target `target`: bytes
/// [dstOffset, dstOffset + count * elementBytes) of the target, staged from
/// byte `staged` of its chunk's slot.
struct UploadPiece {
  size_t target = 0, part = 0;
  uint64_t first = 0, count = 0;
  uint64_t dstOffset = 0;
  uint64_t staged = 0;
};

/// The pieces staged in one slot at a time; `used`: the slot's bytes up to
/// the end of the last piece.
struct UploadChunk {
  std::vector<UploadPiece> pieces;
  uint64_t used = 0;
};

/// Where a piece starts in a slot: converted elements are stored as typed
/// values (aligned), and aligned copies are the fast ones.
constexpr uint64_t kPieceAlign = 64;

/// The targets, in order, packed into chunks of at most `slotBytes`: small
/// parts share a chunk, a part that does not fit the rest of a slot is cut
/// at an element boundary and continues in the next (a weight larger than
/// a slot spans several). False (with `err`) when an element is larger
/// than a slot.
bool planChunks(const std::vector<UploadTarget> &targets, uint64_t slotBytes,
                std::vector<UploadChunk> &chunks, std::string &err);

/// A chunk's pieces dealt out to at most `threads` shares of about equal
/// bytes, cut at element boundaries; fewer shares where a share would be
/// smaller than `minShareBytes` (starting a thread costs more).
std::vector<std::vector<UploadPiece>>
shareOut(const std::vector<UploadTarget> &targets, const UploadChunk &chunk,
         unsigned threads, uint64_t minShareBytes);

/// The copies that send a filled chunk: one per piece, pieces of one target
/// adjacent in both the slot and the target merged.
std::vector<UploadCopy> copiesOf(const std::vector<UploadTarget> &targets,
                                 const UploadChunk &chunk);

/// Writes the piece's elements, converted, at `out`; false with `err`.
/// Called from several threads at once.
using FillFn =
    std::function<bool(const UploadPiece &piece, void *out, std::string &err)>;
/// Bytes filled and sent so far, of `total`.
using ProgressFn = std::function<void(uint64_t done, uint64_t total)>;

struct UploadOptions {
  size_t slots = 4;
  uint64_t slotBytes = uint64_t(64) << 20;
  unsigned threads = 1;                       // converting a chunk
  uint64_t minShareBytes = uint64_t(1) << 20; // per thread
  ProgressFn progress; // at most every progressSeconds, and once at the end
  double progressSeconds = 0.1;
};

enum class UploadStatus { Ok, FillFailed, DeviceFailed };

/// The chunks through `stream`, slots round robin: acquire a slot, fill it
/// on opt.threads threads (all joined before anything else happens), send
/// it; finish. FillFailed carries the fill's error, DeviceFailed the
/// stream's.
UploadStatus runUpload(UploadStream &stream,
                       const std::vector<UploadTarget> &targets,
                       const std::vector<UploadChunk> &chunks,
                       const FillFn &fill, const UploadOptions &opt,
                       std::string &err);

/// Plans the chunks, opens `be`'s upload stream with slots no larger and no
/// more than the plan needs, and runs it (the stream closed on return).
UploadStatus uploadTargets(Backend &be,
                           const std::vector<UploadTarget> &targets,
                           const FillFn &fill, const UploadOptions &opt,
                           std::string &err);

/// Threads that convert a checkpoint: K3_LOAD_THREADS when set (1 to
/// 256), else the host's cores up to 8 (enough to outrun the copies from a
/// warm page cache). False with `err` on a malformed K3_LOAD_THREADS.
bool uploadThreads(unsigned &threads, std::string &err);

} // namespace rt
} // namespace k3

#endif
