// RUN: k3-opt %s --convert-k3gpu-to-nvvm | FileCheck %s
// Each k3gpu op becomes its NVVM instruction; the fragment rows become the
// instruction's 32-bit registers.

// CHECK-LABEL: func @mma_bf16
// CHECK-COUNT-4: llvm.bitcast %{{.*}} : vector<2xbf16> to i32
// CHECK-COUNT-2: llvm.bitcast %{{.*}} : vector<2xbf16> to i32
// CHECK: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
func.func @mma_bf16(%a: vector<4x2xbf16>, %b: vector<2x2xbf16>,
                    %c: vector<2x2xf32>) -> vector<2x2xf32> {
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<4x2xbf16>, vector<2x2xbf16> -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// CHECK-LABEL: func @mma_tf32
// CHECK-COUNT-6: llvm.bitcast %{{.*}} : vector<1xf32> to i32
// CHECK: nvvm.mma.sync {{.*}}multiplicandAPtxType = #nvvm.mma_type<tf32>{{.*}}shape = #nvvm.shape<m = 16, n = 8, k = 8>
func.func @mma_tf32(%a: vector<4x1xf32>, %b: vector<2x1xf32>,
                    %c: vector<2x2xf32>) -> vector<2x2xf32> {
  %d = k3gpu.mma_sync %a, %b, %c
      : vector<4x1xf32>, vector<2x1xf32> -> vector<2x2xf32>
  return %d : vector<2x2xf32>
}

// CHECK-LABEL: func @ballot
// CHECK: %[[ALL:.*]] = llvm.mlir.constant(-1 : i32) : i32
// CHECK: %[[MASK:.*]] = nvvm.vote.sync ballot %[[ALL]], %{{.*}} -> i32
// CHECK: llvm.intr.ctpop(%[[MASK]]) : (i32) -> i32
func.func @ballot(%p: i1) -> i32 {
  %m = k3gpu.ballot_count %p : i32
  return %m : i32
}

// The unaligned CTA barrier: barrier.sync 0, not bar.sync (aligned).
// CHECK-LABEL: func @barrier_sync
// CHECK: %[[ID:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK: llvm.call_intrinsic "llvm.nvvm.barrier.cta.sync.all"(%[[ID]]) : (i32) -> ()
// CHECK-NOT: nvvm.barrier
func.func @barrier_sync() {
  k3gpu.barrier_sync
  return
}

// CHECK-LABEL: func @rcp
// CHECK: nvvm.rcp.approx.ftz.f %{{.*}} : f32
func.func @rcp(%x: f32) -> f32 {
  %r = k3gpu.rcp_approx %x : f32
  return %r : f32
}

// CHECK-LABEL: func @lg2
// CHECK: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"(%{{.*}}) : (f32) -> f32
func.func @lg2(%x: f32) -> f32 {
  %r = k3gpu.lg2_approx %x : f32
  return %r : f32
}

// A thread's registers of a warpgroup accumulator: the struct that
// convert-nvgpu-to-nvvm gives it, member by member.
// CHECK-LABEL: func @fragment
// CHECK: %[[S:.*]] = builtin.unrealized_conversion_cast %{{.*}} : !nvgpu.warpgroup.accumulator<fragmented = vector<64x8xf32>> to !llvm.struct<(struct<(f32, f32, f32, f32)>)>
// CHECK: llvm.extractvalue %[[S]][0, 0]
// CHECK: llvm.extractvalue %[[S]][0, 3]
// CHECK: llvm.insertelement
func.func @fragment(%acc: !nvgpu.warpgroup.accumulator<fragmented = vector<64x8xf32>>) -> vector<4xf32> {
  %v = k3gpu.warpgroup_fragment %acc : !nvgpu.warpgroup.accumulator<fragmented = vector<64x8xf32>> -> vector<4xf32>
  return %v : vector<4xf32>
}

// CHECK-LABEL: func @accumulator
// CHECK: llvm.extractelement
// CHECK: llvm.insertvalue %{{.*}}, %{{.*}}[0, 3] : !llvm.struct<(struct<(f32, f32, f32, f32)>)>
func.func @accumulator(%v: vector<4xf32>) -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x8xf32>> {
  %acc = k3gpu.warpgroup_accumulator %v : vector<4xf32> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x8xf32>>
  return %acc : !nvgpu.warpgroup.accumulator<fragmented = vector<64x8xf32>>
}

// A chain of products: one fence, the wgmma in order (the first with
// scale-d 0 under `overwrite`, B K-major: column-major in NVVM's terms),
// one commit, one wait.
// CHECK-LABEL: func @chain
// CHECK: nvvm.wgmma.fence.aligned
// CHECK-NEXT: nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>, <wrapped>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-NEXT: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>, <wrapped>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>]
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
func.func @chain(%a: !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>,
                 %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                 %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>)
    -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> {
  %d = k3gpu.warpgroup_mma_chain [%a, %a], [%b, %b], %c {overwrite}
      : [!nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>, !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>],
        [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>, !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return %d : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
}

// An MN-major B (transposeB) is row-major in NVVM's terms (imm-trans-b 1).
// CHECK-LABEL: func @chain_transposed
// CHECK: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>, <wrapped>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
func.func @chain_transposed(%a: !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>,
                            %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                            %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>)
    -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> {
  %d = k3gpu.warpgroup_mma_chain [%a], [%b], %c {transposeB}
      : [!nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>], [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return %d : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
}

// A from registers: NVVM's wgmma op takes descriptors only, so each step is
// its PTX in an inline asm: the 32 accumulators as results tied to the 32
// inputs, then A's four registers ($64..$67) and B's descriptor ($68);
// scale-d by a predicate (0 for the first step under `overwrite`).
// CHECK-LABEL: func @chain_registers
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: llvm.inline_asm has_side_effects {{.*}}"{\0A.reg .pred p;\0Asetp.ne.b32 p, 0, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, {{.*}}, $31}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;\0A}", "{{(=f,)+}}0,{{.*}},31,r,r,r,r,l"
// CHECK: setp.ne.b32 p, 1, 0;
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
func.func @chain_registers(%r: vector<4xi32>,
                           %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                           %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>)
    -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> {
  %d = k3gpu.warpgroup_mma_chain [], [%b, %b], %c registers(%r, %r : vector<4xi32>, vector<4xi32>) {overwrite, transposeB}
      : [], [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>, !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return %d : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
}

// An async chain commits its group and leaves it in flight; the wait
// retires groups down to `pending` and passes each accumulator register
// through one empty side-effecting asm, so no read of them moves above it.
// CHECK-LABEL: func @chain_async_wait
// CHECK: nvvm.wgmma.mma_async
// CHECK-NEXT: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: nvvm.wgmma.wait.group.sync.aligned
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att "", "{{(=f,)+}}0,1,{{.*}},31"
func.func @chain_async_wait(%a: !nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>,
                            %b: !nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>,
                            %c: !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>)
    -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> {
  %d = k3gpu.warpgroup_mma_chain [%a], [%b], %c {overwrite, async}
      : [!nvgpu.warpgroup.descriptor<tensor = memref<64x16xbf16, 3>>], [!nvgpu.warpgroup.descriptor<tensor = memref<16x64xbf16, 3>>],
        !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>> -> !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  %e = k3gpu.warpgroup_mma_wait %d {pending = 1}
      : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
  return %e : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
}

// An arrive on barrier 2 of the group in the cluster's block 1: the
// barrier's shared address, mapped into that block, an arrive there with
// the default semantics (release at CTA scope; no cluster-scope fence).
// CHECK-LABEL: func @mbarrier_arrive_cluster
// CHECK: %[[PTR:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<3>, i64) -> !llvm.ptr<3>, i64
// CHECK: %[[REMOTE:.*]] = nvvm.mapa %[[PTR]], %{{.*}} : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK-NOT: mem_scope<cluster>
// CHECK: nvvm.mbarrier.arrive %[[REMOTE]] : !llvm.ptr<7>
func.func @mbarrier_arrive_cluster(%rank: i32) {
  %bars = nvgpu.mbarrier.create -> !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 4>
  %c2 = arith.constant 2 : index
  k3gpu.mbarrier_arrive_cluster %bars[%c2], %rank : !nvgpu.mbarrier.group<memorySpace = #gpu.address_space<workgroup>, num_barriers = 4>
  return
}

// A vector load from block 1's shared memory: the element's shared
// address, mapped into that block, one 16-byte load there.
// CHECK-LABEL: func @cluster_load
// CHECK: %[[PTR:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr<3>, i64) -> !llvm.ptr<3>, f32
// CHECK: %[[REMOTE:.*]] = nvvm.mapa %[[PTR]], %{{.*}} : !llvm.ptr<3> -> !llvm.ptr<7>
// CHECK: llvm.load %[[REMOTE]] {alignment = 16 : i64} : !llvm.ptr<7> -> vector<4xf32>
func.func @cluster_load(%tile: memref<128x128xf32, #gpu.address_space<workgroup>>,
                        %r: index, %c: index, %rank: i32) -> vector<4xf32> {
  %v = k3gpu.cluster_load %tile[%r, %c], %rank
      : memref<128x128xf32, #gpu.address_space<workgroup>> -> vector<4xf32>
  return %v : vector<4xf32>
}

// An L2 prefetch of a tensor map's box: the descriptor's generic address
// and the coordinates as i32, innermost first, in tile mode.
// CHECK-LABEL: func @tma_prefetch_tile
// CHECK: %[[K:.*]] = llvm.trunc %{{.*}} : i64 to i32
// CHECK: %[[N:.*]] = llvm.trunc %{{.*}} : i64 to i32
// CHECK: %[[E:.*]] = llvm.trunc %{{.*}} : i64 to i32
// CHECK: nvvm.cp.async.bulk.tensor.prefetch %{{.*}}, box[%[[K]], %[[N]], %[[E]]] : !llvm.ptr
func.func @tma_prefetch_tile(
    %map: !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>,
    %k: index, %n: index, %e: index) {
  k3gpu.tma_prefetch_tile %map[%k, %n, %e]
      : !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, 3>, swizzle = swizzle_128b, l2promo = none, oob = zero, interleave = none>
  return
}
