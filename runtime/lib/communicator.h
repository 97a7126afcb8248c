// Private: the communicator behind the collective launches of a partitioned
// artifact (format 1.3, docs/scaling.md). One object serves every rank of
// the world; each rank calls it from its own thread.
#ifndef K3_RT_COMMUNICATOR_H
#define K3_RT_COMMUNICATOR_H

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "k3/artifact.h"

namespace k3 {
namespace rt {

/// One collective as a rank runs it: its record, the world's partition,
/// the rank, and its input and output addresses on the rank's device with
/// `outer` and `chunk` evaluated for this call.
struct CollectiveCall {
  const artifact::Collective *collective = nullptr;
  artifact::Partition partition;
  uint32_t rank = 0;
  uint64_t in = 0, out = 0;
  uint64_t outer = 0, chunk = 0;
  uint64_t stream = 0; // the rank's CUDA stream (0: the default stream)
};

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual uint32_t worldSize() const = 0;
  /// Blocks until every member of the call's group instance has arrived
  /// and the rank's output is written; false with `err` when the world was
  /// aborted (another rank failed).
  virtual bool run(const CollectiveCall &call, std::string &err) = 0;
  /// Wakes every waiting rank with `why`: a rank that failed must call it,
  /// or its peers would wait for it forever.
  virtual void abort(const std::string &why) = 0;
  /// Ready for the next call of an entry after an abort.
  virtual void reset() = 0;
  /// Whether run() reads and writes the buffers on the host, so that the
  /// rank's kernels before it must have finished (true), or enqueues on
  /// the rank's stream after them (false: NCCL).
  virtual bool waitsOnHost() const { return true; }
};

/// The ranks of one process on the host (the CPU target): threads that meet
/// in shared memory. Reductions add in rank order (f32 for bf16 and f16,
/// rounded once), so every rank and every run gets the same bits.
std::shared_ptr<Communicator> makeHostCommunicator(uint32_t worldSize);

/// Member `me` of `n`'s output of `call` from every member's input `in`
/// (host memory, in member order): the host communicator's arithmetic,
/// which the MPI communicator applies to gathered copies.
void computeCollective(const CollectiveCall &call,
                       const std::vector<const uint8_t *> &in, uint32_t me,
                       uint32_t n);

/// This process's rank of a job started by an MPI launcher (mpirun), one
/// rank per process on the host, through Open MPI's libmpi loaded at run
/// time (MPI_Init unless the process did it); null with `err` when libmpi
/// cannot be loaded or initialised. `rank` is the process's rank in
/// MPI_COMM_WORLD, whose size is the communicator's worldSize().
std::shared_ptr<Communicator> makeMpiCommunicator(uint32_t &rank,
                                                  std::string &err);

/// Every process of `mpi`'s job (a communicator makeMpiCommunicator made)
/// gets rank 0's `n` bytes at `bytes`; false if the exchange failed.
bool mpiShareFromRankZero(Communicator &mpi, void *bytes, size_t n);

/// The GPUs `devices` (CUDA ordinals, rank r on devices[r]) of this
/// process, through NCCL loaded at run time; null with `err` when NCCL
/// cannot be loaded or initialised.
std::shared_ptr<Communicator>
makeNcclCommunicator(const std::vector<int> &devices, std::string &err);

/// Rank `rank` of `world`, one per process (the process has made the
/// rank's GPU current): rank 0 makes NCCL's unique id and `shareId` gives
/// every process rank 0's bytes (MPI, or threads in a test); null with
/// `err` when NCCL cannot be loaded or initialised.
std::shared_ptr<Communicator>
makeNcclRankCommunicator(uint32_t rank, uint32_t world,
                         const std::function<bool(void *, size_t)> &shareId,
                         std::string &err);

} // namespace rt
} // namespace k3

#endif
