//===- MoELocalIds.cpp - expert ids relative to a rank's shard --*- C++ -*-===//
//
// k3.moe_local_ids (K3MoEOps.td): expert parallelism over replicated tokens
// (docs/scaling.md). The CPU target's kernel; the CUDA target refuses it,
// because its MoE kernels (moe_dispatch_rows, moe_combine_rows, the grouped
// GEMMs and GEMVs) do not skip the ids of other ranks' experts yet.
//
//===----------------------------------------------------------------------===//
#include "lowering/kernels/Kernels.h"
#include "lowering/kernels/Operands.h"

using namespace mlir;
using namespace mlir::k3;

LogicalResult k3::emitMoELocalIds(MoELocalIdsOp op, KernelBuilder &kb, In in,
                                  Out out) {
  if (kb.forGPU())
    return op.emitOpError()
           << "(expert parallelism) runs on the CPU target only: the CUDA "
              "MoE kernels do not skip other ranks' experts yet";
  auto ops = operandsOf(op, in);
  KernelOperand indices = ops.getIndices();
  int64_t n = op.getExpertsPerRank();
  Value first =
      kb.muli(kb.loadIndex(ops.getRank().full, {kb.idx(0)}), kb.idx(n));
  kb.parallel(
      {kb.dim(indices.shape[0]), kb.idx(indices.shape[1])}, [&](ValueRange iv) {
        Value local = kb.subi(kb.loadIndex(indices.full, iv), first);
        Value mine =
            kb.andi(kb.gei(local, kb.idx(0)), kb.lti(local, kb.idx(n)));
        kb.storeIndex(kb.select(mine, local, kb.idx(-1)), out[0].full, iv);
      });
  return success();
}
