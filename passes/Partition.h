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
#include "mlir/IR/BuiltinOps.h"

namespace mlir::k3 {

/// The tensor-parallel group's name in collectives and weight shards.
constexpr StringLiteral kTensorParallel = "tp";

/// Gives weight `w` its rank's slice along `dim` of `parts`: its type
/// shrinks there and it carries a #k3.weight_shard (with `extent`, the
/// checkpoint's size along `dim`, when that is longer than the slices
/// cover). A weight already sliced the same way is left as is; another
/// split of it is an error.
LogicalResult shardWeight(WeightOp w, int64_t dim, int64_t parts,
                          int64_t extent = 0);

/// Sums the ranks' partial outputs of `op` (its first result): its uses
/// read a `k3.all_reduce sum` over the tensor-parallel group instead.
void allReduceResult(Operation *op, int64_t tp);

/// Tensor parallelism over attention heads: each rank keeps `1/tp` of the
/// heads of every k3.kda and k3.latent_attention, and of everything that
/// feeds them per head (the column-split projections, short convolutions,
/// decay gates, states, output gates and norms) up to the row-split output
/// projection, whose partial output an all-reduce sums.
LogicalResult splitAttentionHeads(ModuleOp module, int64_t tp);

} // namespace mlir::k3

#endif // K3_PASSES_PARTITION_H
