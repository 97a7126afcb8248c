//===- LastTokenRows.h - moving a last-token selection up -------*- C++ -*-===//
//
// k3-last-token-logits selects each sequence's last row (k3.last_tokens)
// before the row-wise ops that only the logits need (RowWise.h). Two steps
// move such a selection further up the graph, each where only the
// selection reads what it moves past:
// - a row-wise op with one result: the op runs on its operands' selected
//   rows (the last MLA layer's query projection);
// - the MLA attention (k3.latent_attention with a cache): the call's
//   latents go to the cache first (k3.latent_cache_append), then the last
//   tokens alone attend over it (k3.last_token_context gives their
//   positions), one query a sequence, which k3-mla-expand leaves in the
//   latent form of a decode step. A prefill's last layer then reads its
//   keys from the cache once instead of expanding and attending over every
//   token (in the 4-layer Kimi-Linear-48B cut at T = 8192 on an H100 the
//   expanded attention alone took 1.25 ms of 16.06:
//   bench/results/profile-gpu/cut4-prefill-T8191-nvidia-h100-20261206T2346Z-bb5a891.txt).
//
//===----------------------------------------------------------------------===//
#ifndef K3_PASSES_LASTTOKENROWS_H
#define K3_PASSES_LASTTOKENROWS_H

#include "dialects/K3/K3Dialect.h"

namespace mlir::k3 {

/// `t` with its leading (token) dimension dynamic: the rows become N.
RankedTensorType withDynamicRows(Type t);

/// Whether k3.last_tokens can select `v`'s rows: [T, D] floats.
bool selectableRows(Value v);

/// Moves `select` one step up where one of the steps above applies (then
/// `select` is erased); returns whether it did.
bool moveSelectionUp(LastTokensOp select);

} // namespace mlir::k3

#endif // K3_PASSES_LASTTOKENROWS_H
