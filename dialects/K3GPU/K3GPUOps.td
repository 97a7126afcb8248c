//===- K3GPUOps.td - tile-level GPU ops upstream lacks -----*- tablegen -*-===//
//
// The `k3gpu` dialect: the few warp-level operations the dedicated CUDA
// kernels (lowering/cuda/) need and MLIR 22's gpu and nvgpu dialects do
// not provide, on the same typed values as nvgpu (fragments as vectors in
// nvgpu's convention). Everything else the kernels use is upstream:
// nvgpu.ldmatrix, nvgpu.device_async_copy, vector.load/store on
// workgroup memrefs, gpu.shuffle, gpu.barrier.
//
// Rationale, op by op:
//  - k3gpu.mma_sync: nvgpu.mma.sync cannot lower bf16 operands in MLIR 22
//    ("failed to deduce operand PTX types"), and its tf32 form needs the
//    operands as f32 vectors with an attribute; this op covers exactly the
//    two shapes the kernels use, bf16 m16n8k16 and tf32 m16n8k8, with f32
//    accumulators.
//  - k3gpu.ballot_count: the gpu dialect has no warp vote; a ballot and a
//    population count is one round of a 32-ary search (gpu.subgroup_reduce
//    would be a reduction tree or REDUX, not VOTE), and math.ctpop has no
//    lowering in convert-gpu-to-nvvm.
//  - k3gpu.barrier_sync: the unaligned `barrier.sync 0`. gpu.barrier and
//    nvvm.barrier are `bar.sync 0`, the aligned barrier, which requires
//    every thread of the block at the same instruction; the KDA chain's
//    run-time split sends active and staging warps through two loops with
//    a barrier each (compute-sanitizer's synccheck flagged it).
//  - k3gpu.rcp_approx: the scalar rcp.approx.ftz.f32 (nvgpu.rcp takes
//    vectors only); the IEEE division's slow path is a call per element.
//  - k3gpu.lg2_approx: the scalar lg2.approx.ftz.f32; math.log2 lowers to
//    a 20-instruction polynomial (the KDA softplus gate takes one per
//    element, in a latency-bound kernel), and NVVM has no lg2 op.
//  - k3gpu.warpgroup_fragment / k3gpu.warpgroup_accumulator: a thread's
//    registers of an nvgpu.warpgroup.accumulator as a vector and back.
//    nvgpu can only store an accumulator to memory; flash attention
//    rescales its output accumulator and takes the softmax of its score
//    accumulator in registers, between two wgmma.
//  - k3gpu.warpgroup_mma_chain: several wgmma into one accumulator under
//    one fence, commit and wait. nvgpu.warpgroup.mma waits after each op
//    and advances a K-major B operand's descriptor as if it were MN-major,
//    so a chain over K-major tiles needs one op per k-step, and ptxas
//    serialises wgmma whose results are read between such waits (C7514).
//  - k3gpu.warpgroup_mma_wait: the wait of `async` chains, apart from
//    them, so that a kernel keeps two groups in flight and works on the
//    older one's registers while the newer one runs (FlashAttention-3's
//    softmax under the next product). nvgpu has no wgmma wait of its own.
//  - k3gpu.mbarrier_arrive_cluster: an arrive on the mbarrier of another
//    block of the cluster (`mapa`, then `mbarrier.arrive.release.cluster
//    .shared::cluster`). nvgpu's mbarrier ops reach the block's own
//    barriers only; a pipeline whose TMA loads multicast into two blocks
//    frees a stage once both blocks' consumers arrived on each producer's
//    empty barrier (CUTLASS's PipelineTmaAsync).
//
// Each op lowers to NVVM by one pattern (K3GPUToNVVM.cpp,
// populateK3GPUToNVVMConversionPatterns; pass convert-k3gpu-to-nvvm).
//
//===----------------------------------------------------------------------===//
#ifndef K3GPU_OPS
#define K3GPU_OPS

include "mlir/IR/OpBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Dialect/NVGPU/IR/NVGPUTypes.td"

def K3GPU_Dialect : Dialect {
  let name = "k3gpu";
  let cppNamespace = "::mlir::k3gpu";
  let summary = "Warp-level GPU operations the K3 CUDA kernels need beyond "
                "upstream gpu and nvgpu";
  let dependentDialects = [
    "::mlir::nvgpu::NVGPUDialect", "::mlir::vector::VectorDialect",
    "::mlir::gpu::GPUDialect"
  ];
}

class K3GPU_Op<string mnemonic, list<Trait> traits = []>
    : Op<K3GPU_Dialect, mnemonic, traits>;

def K3GPU_MmaSyncOp : K3GPU_Op<"mma_sync", [Pure,
    AllTypesMatch<["matrixC", "res"]>]> {
  let summary = "warp-level D = A B + C on the tensor cores (bf16 or tf32)";
  let description = [{
    `mma.sync.aligned.row.col` with f32 accumulators, on fragments in
    nvgpu's convention (per lane: row i of a vector<Rx2> is a register of
    two 16-bit elements, or of one 32-bit element):

     - bf16 m16n8k16: A vector<4x2xbf16>, B vector<2x2xbf16>;
     - tf32 m16n8k8: A vector<4x1xf32>, B vector<2x1xf32> (the f32 bits are
       read as tf32: the low 13 mantissa bits are ignored);

    C and the result: vector<2x2xf32>. With g = lane / 4 and t = lane % 4,
    A's rows are (row g, row g + 8, row g with k + 8, row g + 8 with k + 8;
    k pair 2 t, 2 t + 1) for bf16, B's rows (k 2 t, 2 t + 1, col g; k + 8),
    C's rows (row g, row g + 8; cols 2 t, 2 t + 1); the PTX ISA's
    "Matrix fragments for mma.m16n8k16" gives the full layout.

    ```mlir
    %d = k3gpu.mma_sync %a, %b, %c
        : vector<4x2xbf16>, vector<2x2xbf16> -> vector<2x2xf32>
    ```
  }];
  let arguments = (ins VectorOfRankAndType<[2], [BF16, F32]>:$matrixA,
                       VectorOfRankAndType<[2], [BF16, F32]>:$matrixB,
                       VectorOfRankAndType<[2], [F32]>:$matrixC);
  let results = (outs VectorOfRankAndType<[2], [F32]>:$res);
  let assemblyFormat = [{
    $matrixA `,` $matrixB `,` $matrixC attr-dict
    `:` type($matrixA) `,` type($matrixB) `->` type($res)
  }];
  let extraClassDeclaration = [{
    /// K of the m16n8k`K` shape: 16 for bf16, 8 for tf32.
    int64_t getK() {
      return getMatrixA().getType().getElementType().isBF16() ? 16 : 8;
    }
  }];
  let hasVerifier = 1;
}

def K3GPU_BallotCountOp : K3GPU_Op<"ballot_count", []> {
  let summary = "how many lanes of the warp hold a true predicate";
  let description = [{
    popc(vote.sync.ballot(pred)): the number of lanes whose `pred` is true,
    the same in every lane; every lane of the warp must execute it
    (full-warp member mask).

    ```mlir
    %n = k3gpu.ballot_count %pred : i32
    ```
  }];
  let arguments = (ins I1:$pred);
  let results = (outs I32:$res);
  let assemblyFormat = "$pred attr-dict `:` type($res)";
}

def K3GPU_BarrierSyncOp : K3GPU_Op<"barrier_sync", []> {
  let summary = "a CTA barrier that warps may reach from different instructions";
  let description = [{
    `barrier.sync 0` without `.aligned`: every non-exited thread of the CTA
    waits here, and warps may arrive at different barrier instructions of
    the program (warps on the two sides of a branch, each side with its own
    loop of barriers). `gpu.barrier` and `nvvm.barrier` lower to
    `bar.sync 0`, the aligned form, for which that is undefined behaviour
    (PTX ISA, "bar"); compute-sanitizer's synccheck reports it. Threads of
    one warp must still arrive together.

    ```mlir
    k3gpu.barrier_sync
    ```
  }];
  let assemblyFormat = "attr-dict";
}

def K3GPU_RcpApproxOp : K3GPU_Op<"rcp_approx", [Pure,
    AllTypesMatch<["in", "res"]>]> {
  let summary = "1 / x by the special-function unit (rcp.approx.ftz.f32)";
  let description = [{
    About 1 ulp; subnormal inputs and results flush to zero.

    ```mlir
    %r = k3gpu.rcp_approx %x : f32
    ```
  }];
  let arguments = (ins F32:$in);
  let results = (outs F32:$res);
  let assemblyFormat = "$in attr-dict `:` type($res)";
}

def K3GPU_Lg2ApproxOp : K3GPU_Op<"lg2_approx", [Pure,
    AllTypesMatch<["in", "res"]>]> {
  let summary = "log2(x) by the special-function unit (lg2.approx.ftz.f32)";
  let description = [{
    Absolute error about 2^-22 for x in [0.5, 2] (the PTX ISA's bound);
    subnormal inputs flush to zero, so log2 of them is -inf.

    ```mlir
    %r = k3gpu.lg2_approx %x : f32
    ```
  }];
  let arguments = (ins F32:$in);
  let results = (outs F32:$res);
  let assemblyFormat = "$in attr-dict `:` type($res)";
}

def K3GPU_WarpgroupFragmentOp : K3GPU_Op<"warpgroup_fragment", [Pure]> {
  let summary = "a thread's registers of a 64 x N wgmma accumulator";
  let description = [{
    The `N / 2` f32 registers this thread holds of a
    `!nvgpu.warpgroup.accumulator<fragmented = vector<64xNxf32>>`, in the
    order of wgmma's accumulator fragment (the PTX ISA's "Matrix fragments
    for wgmma.m64nNk16", accumulator D): with w = warp % 4, g = lane / 4,
    t = lane % 4, register `i` holds row `16 w + g + 8 ((i / 2) % 2)` and
    column `8 (i / 4) + 2 t + i % 2`.

    ```mlir
    %v = k3gpu.warpgroup_fragment %acc
        : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
          -> vector<32xf32>
    ```
  }];
  let arguments = (ins NVGPU_WarpgroupAccumulator:$accumulator);
  let results = (outs VectorOfRankAndType<[1], [F32]>:$fragment);
  let assemblyFormat = [{
    $accumulator attr-dict `:` type($accumulator) `->` type($fragment)
  }];
  let hasVerifier = 1;
}

def K3GPU_WarpgroupAccumulatorOp : K3GPU_Op<"warpgroup_accumulator",
                                            [Pure]> {
  let summary = "a 64 x N wgmma accumulator from a thread's registers";
  let description = [{
    The inverse of `k3gpu.warpgroup_fragment`: the thread's `N / 2`
    registers, in the same order, as an accumulator the next
    `nvgpu.warpgroup.mma` adds to.

    ```mlir
    %acc = k3gpu.warpgroup_accumulator %v : vector<64xf32>
        -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x128xf32>>
    ```
  }];
  let arguments = (ins VectorOfRankAndType<[1], [F32]>:$fragment);
  let results = (outs NVGPU_WarpgroupAccumulator:$accumulator);
  let assemblyFormat = [{
    $fragment attr-dict `:` type($fragment) `->` type($accumulator)
  }];
  let hasVerifier = 1;
}

def K3GPU_WarpgroupMmaChainOp : K3GPU_Op<"warpgroup_mma_chain",
    [AttrSizedOperandSegments]> {
  let summary = "D = sum_i A_i B_i (+ C) by wgmma, one fence and one wait";
  let description = [{
    One wgmma per step i (m64nNk16: A `[64, 16]`, B `[16, N]`), accumulated
    in order into `matrixC` (or into zero with `overwrite`: the first
    wgmma's scale-d is 0 and `matrixC` is not read), between one
    `wgmma.fence` and one commit, then `wgmma.wait_group 0`. B comes from
    shared memory (`descriptorsB[i]`); `transposeB`: B is MN-major there
    (imm-trans-b = 1). A comes from shared memory (`descriptorsA[i]`) or
    from registers (`registersA[i]`: the thread's four 32-bit registers of
    bf16 pairs, in the layout of the accumulator's registers that hold the
    same rows and the step's 16 columns, so that a softmax's P feeds the
    next product without shared memory, as FlashAttention-3 does); one of
    the two lists is empty.

    With `async` the chain commits its group and does not wait: its result
    (and the registers of A it reads) stay in flight until a
    `k3gpu.warpgroup_mma_wait` retires the group, and that wait's result is
    the only use the chain's result may have.

    ```mlir
    %d = k3gpu.warpgroup_mma_chain [%a0, %a1], [%b0, %b1], %c {overwrite}
        : [!descA, !descA], [!descB, !descB], !acc -> !acc
    %e = k3gpu.warpgroup_mma_chain [], [%b0], %c registers(%r0 : vector<4xi32>)
        {transposeB} : [], [!descB], !acc -> !acc
    ```
  }];
  let arguments = (ins Variadic<NVGPU_WarpgroupMatrixDescriptor>:$descriptorsA,
                       Variadic<VectorOfLengthAndType<[4], [I32]>>:$registersA,
                       Variadic<NVGPU_WarpgroupMatrixDescriptor>:$descriptorsB,
                       NVGPU_WarpgroupAccumulator:$matrixC,
                       UnitAttr:$overwrite, UnitAttr:$transposeB,
                       UnitAttr:$async);
  let results = (outs NVGPU_WarpgroupAccumulator:$matrixD);
  let assemblyFormat = [{
    `[` $descriptorsA `]` `,` `[` $descriptorsB `]` `,` $matrixC
    (`registers` `(` $registersA^ `:` type($registersA) `)`)? attr-dict
    `:` custom<BracketedTypes>(type($descriptorsA)) `,`
    `[` type($descriptorsB) `]` `,` type($matrixC) `->` type($matrixD)
  }];
  let builders = [
    OpBuilder<(ins "Type":$result, "ValueRange":$descriptorsA,
                   "ValueRange":$descriptorsB, "Value":$matrixC), [{
      build($_builder, $_state, result, descriptorsA, ValueRange(),
            descriptorsB, matrixC);
    }]>
  ];
  let hasVerifier = 1;
}

def K3GPU_WarpgroupMmaWaitOp : K3GPU_Op<"warpgroup_mma_wait",
    [AllTypesMatch<["accumulators", "results"]>]> {
  let summary = "retires async wgmma groups: wgmma.wait_group pending";
  let description = [{
    Waits until at most `pending` of this warpgroup's committed wgmma groups
    are in flight (groups retire in the order they were committed), then
    gives `accumulators` back as values the thread may read: each register
    passes through an empty asm statement after the wait, so no read of it
    is scheduled before the wait. Every accumulator must come from a group
    that this wait retires.

    ```mlir
    %s0 = k3gpu.warpgroup_mma_chain [%q], [%k], %init {overwrite, async} ...
    %o1 = k3gpu.warpgroup_mma_chain [], [%v], %o registers(%p ...) {async} ...
    %s = k3gpu.warpgroup_mma_wait %s0 {pending = 1}
        : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
    ```
  }];
  let arguments = (ins Variadic<NVGPU_WarpgroupAccumulator>:$accumulators,
                       I64Attr:$pending);
  let results = (outs Variadic<NVGPU_WarpgroupAccumulator>:$results);
  let assemblyFormat = [{
    $accumulators attr-dict `:` type($accumulators)
  }];
  let hasVerifier = 1;
}

def K3GPU_MBarrierArriveClusterOp : K3GPU_Op<"mbarrier_arrive_cluster", []> {
  let summary = "arrive on an mbarrier of a block of the cluster";
  let description = [{
    One arrive on barrier `index` of the group `barriers` as it lies in the
    shared memory of the block whose rank in the cluster is `rank` (this
    block's own rank reaches its own barrier), with PTX's default
    semantics, release at CTA scope, as CUTLASS's cluster pipelines arrive:
    a consumer signals there that the wgmma reads it waited for are done,
    and the producer that waits on the barrier then overwrites the stage
    by TMA. (A release at cluster scope would also order every earlier
    memory operation of the thread, at a fence's cost per arrive.)

    ```mlir
    k3gpu.mbarrier_arrive_cluster %bars[%stage], %rank
        : !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 4>
    ```
  }];
  let arguments = (ins NVGPU_MBarrierGroup:$barriers, Index:$index,
                       I32:$rank);
  let assemblyFormat =
      "$barriers `[` $index `]` `,` $rank attr-dict `:` type($barriers)";
}

def K3GPU_MBarrierArriveCopiesOp
    : K3GPU_Op<"mbarrier_arrive_copies", []> {
  let summary = "arrive on an mbarrier once this thread's cp.async copies land";
  let description = [{
    Makes barrier `index` of the group `barriers` track every cp.async copy
    that this thread issued before it: the barrier's arrive for this thread
    happens when they have all landed (`cp.async.mbarrier.arrive.noinc`),
    while the thread goes on. It counts as one of the arrivals that the
    barrier expects in its phase (`noinc`), so a copying producer thread
    arrives through it instead of waiting for its copy groups and arriving
    itself: the producer runs ahead to the next stage, as far as the empty
    barriers allow, as CUTLASS's cp.async warp-specialised mainloops do.

    ```mlir
    k3gpu.mbarrier_arrive_copies %bars[%stage]
        : !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 4>
    ```
  }];
  let arguments = (ins NVGPU_MBarrierGroup:$barriers, Index:$index);
  let assemblyFormat = "$barriers `[` $index `]` attr-dict `:` type($barriers)";
}

def K3GPU_ClusterLoadOp : K3GPU_Op<"cluster_load", []> {
  let summary = "a vector load from a block of the cluster's shared memory";
  let description = [{
    Loads `result` (a vector of the memref's element type) at `indices` of
    `base`, a workgroup memref, as it lies in the shared memory of the
    block whose rank in the cluster is `rank` (this block's own rank reads
    its own): `mapa` to the peer's address, then `ld.shared::cluster`. The
    address must be aligned to the vector's size. Ordering against the
    peer's writes is the caller's: a cluster barrier between them.

    ```mlir
    %v = k3gpu.cluster_load %tile[%r, %c], %rank
        : memref<128x128xf32, #gpu.address_space<workgroup>> -> vector<4xf32>
    ```
  }];
  let arguments = (ins MemRefOf<[AnyType]>:$base, Variadic<Index>:$indices,
                       I32:$rank);
  let results = (outs AnyVectorOfNonZeroRank:$result);
  let assemblyFormat = [{
    $base `[` $indices `]` `,` $rank attr-dict `:` type($base) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def K3GPU_TmaPrefetchTileOp : K3GPU_Op<"tma_prefetch_tile", []> {
  let summary = "prefetch a tensor map's box into L2";
  let description = [{
    Starts bringing the box of `tensorMap` at `coordinates` (innermost
    dimension first, as `nvgpu.tma.async.load` takes them) from global
    memory into L2, and returns at once: `cp.async.bulk.prefetch.tensor`,
    a hint with no result, no barrier and no effect on shared memory. A
    pipelined GEMM issues it a few k-steps ahead of the step whose shared
    memory stage it loads, so that the bytes in flight to the SM are not
    bounded by its stages: a weight tile read from DRAM for the first time
    then arrives from L2 when its stage is refilled. Coordinates outside
    the tensor prefetch nothing there, as the loads fill zeros there.

    ```mlir
    k3gpu.tma_prefetch_tile %map[%k, %n, %e]
        : !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>,
            swizzle = swizzle_128b, l2promo = none, oob = zero,
            interleave = none>
    ```
  }];
  let arguments = (ins NVGPU_TensorMapDescriptor:$tensorMap,
                       Variadic<Index>:$coordinates);
  let assemblyFormat = [{
    $tensorMap `[` $coordinates `]` attr-dict `:` type($tensorMap)
  }];
  let hasVerifier = 1;
}

#endif // K3GPU_OPS
