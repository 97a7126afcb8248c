//===- K3CollectiveOps.td - collectives of an SPMD program --*- tablegen -*-===//
//
// A model partitioned over ranks (issue 19: tensor, expert and context
// parallelism) is one SPMD program: every rank runs the same ops on its
// own shard, and these ops are where ranks meet. Each names its group
// (`tp`, `ep` or `cp`: the ranks that split one axis) and the group's size,
// so that its result type follows from its operand's without knowing the
// rank; the runtime maps a group to a communicator (NCCL on the GPU, an
// in-process one on the CPU). Every rank of the group must execute the op,
// in the same order: the ops are not Pure, so no pass removes, merges or
// moves one on some ranks only. Verifiers in K3CollectiveOps.cpp; the
// rationale in docs/scaling.md.
//
//===----------------------------------------------------------------------===//

#ifndef K3_COLLECTIVE_OPS_TD
#define K3_COLLECTIVE_OPS_TD

def K3_CollectiveTensor : RankedTensorOf<[F32, BF16, F16, I32]>;

class K3_CollectiveOp<string mnemonic> : K3_Op<mnemonic> {
  let hasVerifier = 1;
}

def K3_AllReduceOp : K3_CollectiveOp<"all_reduce"> {
  let summary = "the elementwise sum (or max) over the group's ranks";
  let description = [{
    Every rank gives `input` and receives, at every index, the `reduction`
    of the group's `group_size` ranks' elements there. The result has the
    operand's type. A row-split projection's partial sums meet here (TP:
    one per block).

    ```mlir
    %y = k3.all_reduce sum %x {group = "tp", group_size = 2 : i64}
        : (tensor<?x2304xf32>) -> tensor<?x2304xf32>
    ```
  }];
  let arguments = (ins K3_ReductionKindAttr:$reduction,
                       K3_CollectiveTensor:$input, StrAttr:$group,
                       I64Attr:$group_size);
  let results = (outs K3_CollectiveTensor:$result);
  let assemblyFormat = [{
    $reduction $input attr-dict `:` functional-type(operands, results)
  }];
}

def K3_AllGatherOp : K3_CollectiveOp<"all_gather"> {
  let summary = "the ranks' shards concatenated along one dimension";
  let description = [{
    Every rank gives `input` and receives the group's `group_size` inputs
    concatenated along `dim` in rank order: that dimension is `group_size`
    times the operand's, the others are the operand's. CP's per-segment
    KDA states (h_ext, M) meet here before the fold.

    ```mlir
    %all = k3.all_gather %x {group = "cp", group_size = 2 : i64, dim = 0 : i64}
        : (tensor<32x128x128xf32>) -> tensor<64x128x128xf32>
    ```
  }];
  let arguments = (ins K3_CollectiveTensor:$input, StrAttr:$group,
                       I64Attr:$group_size, I64Attr:$dim);
  let results = (outs K3_CollectiveTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` functional-type(operands, results)
  }];
}

def K3_ReduceScatterOp : K3_CollectiveOp<"reduce_scatter"> {
  let summary = "the reduction over the ranks, each keeping one shard";
  let description = [{
    The `reduction` over the group's ranks, cut along `dim` into
    `group_size` equal shards: rank `r` receives shard `r`. `dim` of the
    operand must be a multiple of `group_size` where it is static; the
    result's is the operand's divided by it. With an all-gather after it,
    the other form of TP's all-reduce.

    ```mlir
    %s = k3.reduce_scatter sum %x {group = "tp", group_size = 4 : i64, dim = 1 : i64}
        : (tensor<?x2304xf32>) -> tensor<?x576xf32>
    ```
  }];
  let arguments = (ins K3_ReductionKindAttr:$reduction,
                       K3_CollectiveTensor:$input, StrAttr:$group,
                       I64Attr:$group_size, I64Attr:$dim);
  let results = (outs K3_CollectiveTensor:$result);
  let assemblyFormat = [{
    $reduction $input attr-dict `:` functional-type(operands, results)
  }];
}

def K3_AllToAllOp : K3_CollectiveOp<"all_to_all"> {
  let summary = "shard j of each rank's input sent to rank j";
  let description = [{
    Each rank cuts `input` along `split_dim` into `group_size` equal shards
    and sends shard `j` to rank `j`; it receives one shard from every rank
    and concatenates them along `concat_dim` in rank order. The result's
    `split_dim` is the operand's divided by `group_size` (a multiple where
    static) and its `concat_dim` multiplied by it (with `split_dim ==
    concat_dim` the shape is unchanged). EP's dispatch and combine move
    rows between the ranks that hold their experts this way, in buffers
    sized by max-tokens x top-k per rank, so that no routing overflows.

    ```mlir
    %r = k3.all_to_all %rows {group = "ep", group_size = 2 : i64,
        split_dim = 0 : i64, concat_dim = 0 : i64}
        : (tensor<256x3584xbf16>) -> tensor<256x3584xbf16>
    ```
  }];
  let arguments = (ins K3_CollectiveTensor:$input, StrAttr:$group,
                       I64Attr:$group_size, I64Attr:$split_dim,
                       I64Attr:$concat_dim);
  let results = (outs K3_CollectiveTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` functional-type(operands, results)
  }];
}

#endif // K3_COLLECTIVE_OPS_TD
