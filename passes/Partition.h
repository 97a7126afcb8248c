//===- Partition.h - k3-partition's pieces ----------------------*- C++ -*-===//
//
// k3-partition (Partition.cpp) splits the MLP blocks itself and the
// attention heads through PartitionHeads.cpp; both slice weights and sum
// partial outputs the same way.
//
//===----------------------------------------------------------------------===//
#ifndef K3_PASSES_PARTITION_H
#define K3_PASSES_PARTITION_H

#include "dialects/K3/K3Dialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::k3 {

/// The groups' names in collectives and weight shards.
constexpr StringLiteral kTensorParallel = "tp";
constexpr StringLiteral kExpertParallel = "ep";
constexpr StringLiteral kContextParallel = "cp";

/// Gives weight `w` its rank's slice along `dim` of `parts`: its type
/// shrinks there and it carries a #k3.weight_shard (with `extent`, the
/// checkpoint's size along `dim`, when that is longer than the slices
/// cover). A weight already sliced the same way is left as is; another
/// split of it is an error.
LogicalResult shardWeight(WeightOp w, int64_t dim, int64_t parts,
                          int64_t extent = 0,
                          StringRef group = kTensorParallel);

/// Sums the ranks' partial outputs of `op` (its first result): its uses
/// read a `k3.all_reduce sum` over `group` (of `size` ranks) instead.
void allReduceResult(Operation *op, int64_t size,
                     StringRef group = kTensorParallel);

/// `fn`'s entry input `k3.rank.<group>` (tensor<1xi32>), added the first
/// time: the runtime fills it with each rank's coordinate in the group
/// (runtime/include/k3/artifact.h, isRankInput), so one artifact serves
/// every rank.
Value rankArgument(func::FuncOp fn, StringRef group);

/// Expert parallelism over replicated tokens (PartitionExperts.cpp): each
/// rank of the `ep` group keeps `1/ep` of every k3.moe_experts' experts,
/// runs the pairs routed to them (k3.moe_local_ids, reading the entry input
/// `k3.rank.ep` that the runtime fills) and one all-reduce over `ep` sums
/// the layer's output.
LogicalResult splitExperts(ModuleOp module, int64_t ep);

/// Slices `moe`'s routed expert stacks along E over `group` (`parts`
/// ranks); the experts per rank, or failure (an indivisible count, a
/// weight with other readers).
FailureOr<int64_t> shardRoutedExperts(MoEExpertsOp moe, int64_t parts,
                                      StringRef group);

/// Form 1 of expert parallelism (every rank holds the same tokens): the
/// router's ids made the rank's own (`k3.moe_local_ids` with `rank`) and
/// one all-reduce over `group` summing the ranks' partial outputs.
LogicalResult splitExpertsOverReplicatedTokens(MoEExpertsOp moe, Value rank,
                                               int64_t parts, StringRef group);

/// Tensor parallelism over attention heads: each rank keeps `1/tp` of the
/// heads of every k3.kda and k3.latent_attention, and of everything that
/// feeds them per head (the column-split projections, short convolutions,
/// decay gates, states, output gates and norms) up to the row-split output
/// projection, whose partial output an all-reduce sums.
LogicalResult splitAttentionHeads(ModuleOp module, int64_t tp);

} // namespace mlir::k3

#endif // K3_PASSES_PARTITION_H
