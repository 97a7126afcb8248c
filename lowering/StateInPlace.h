//===- StateInPlace.h - ops that update their state in place ----*- C++ -*-===//
//
// A result written back to the state it was computed from (k3.state_read
// "s" -> op -> k3.state_write "s") normally lands in a buffer of its own
// and a copy launch moves it into the state: per decode step of
// Kimi-Linear-48B 87 copies (conv states, KDA states, latent caches) of
// ~700 launches, and latent attention copied the whole cache besides
// (bench/results/profile-gpu/kl48b-decode-B1-20261202T2207Z-db42aea.txt).
// Where the op's kernel reads every element of the state before any
// thread writes it, or writes only elements that nothing reads, the
// result can take the state's buffer instead (k3-outline-kernels marks the
// op `k3.state_in_place` and drops the copy).
//
//===----------------------------------------------------------------------===//
#ifndef K3_LOWERING_STATEINPLACE_H
#define K3_LOWERING_STATEINPLACE_H

#include "dialects/K3/K3Dialect.h"

namespace mlir::k3 {

/// The k3.state_write that `result` may reach without a copy: a use of
/// `result`, writing the state that its op reads through a k3.state_read
/// used by that op alone, and an op whose kernel (its k3.kernel_config)
/// is safe on one buffer for the two. Other uses of `result` (which then
/// read the state's buffer) need that read and write to be the state's
/// only ones in the function: the last tokens' attention reads the cache
/// that the state takes from k3.latent_cache_append. Null otherwise.
StateWriteOp stateWrittenInPlace(OpResult result);

/// Whether `op` was marked to update its state in place (its kernel then
/// skips copying the old contents).
bool updatesStateInPlace(Operation *op);

/// Whether `result` is an updated state (a result that could take its
/// state operand's buffer, by the rules above) that nothing reads.
bool isUnreadState(OpResult result);

/// Whether `op` was marked k3.unread_state (isUnreadState). Only the GPU
/// latent-attention kernels (LatentAttentionSplit, LatentAttentionRows)
/// act on the mark: they then write none of the updated cache, neither the
/// old rows nor the new. Other kernels, and every CPU loop nest, still write
/// their state in full.
bool leavesStateUnwritten(Operation *op);

} // namespace mlir::k3

#endif // K3_LOWERING_STATEINPLACE_H
