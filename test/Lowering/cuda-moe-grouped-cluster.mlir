// REQUIRES: ptxas
// The grouped MoE down GEMM's one-warpgroup schedule in cluster pairs
// (config cluster = 2; lowering/cuda/MoEGroupedKernel.h, "Clusters"): 8
// bf16 experts, top-2, D 256, I 128, so each 128-row tile has two
// 128-column tiles, one pair. The grid has the pairs in x and the rank in
// y (cluster_y = 2, nvvm.cluster_dim [1, 2, 1], which ptxas states as
// .reqnctapercluster); the rows' map has 64-row boxes, and each block
// loads its half of the rows into both blocks (multicast mask 0b11) at
// the rank's 8 KiB; the barriers are initialised and fenced for the
// cluster. A step's products are issued before the step before it is
// waited for (wgmma.wait_group 4: one 64-row half's four groups), then a
// cluster barrier frees that step's stage in both blocks and it is
// refilled; so at least 3 stages.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.cluster=2,moe_grouped_down.stages=3,moe_grouped_down.blocks_per_sm=2" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// Pairs share the down GEMM's rows (by TMA): not MXFP4 weights, not an
// odd count of column tiles; the gate/up GEMM's pairs share the weights
// on its persistent schedule only (cuda-moe-grouped-pairs.mlir).
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_glu.cluster=2" 2>&1 | FileCheck %s --check-prefix=GLU
// RUN: sed -e 's/tensor<?x256xbf16>/tensor<?x384xbf16>/g; s/x256xbf16>/x384xbf16>/g; s/tensor<8x256x128xbf16>/tensor<8x384x128xbf16>/g' %s > %t.odd.mlir
// RUN: not k3-opt %t.odd.mlir --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.cluster=2,moe_grouped_down.stages=3" 2>&1 | FileCheck %s --check-prefix=ODD
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.cluster=4" 2>&1 | FileCheck %s --check-prefix=FOUR
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.cluster=2" 2>&1 | FileCheck %s --check-prefix=STAGES
// A config edited after the selection pass meets the same rules when the
// kernels are outlined (here: the pair's stages lowered to 2 by hand).
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.cluster=2,moe_grouped_down.stages=3" -o %t.sel.mlir
// RUN: sed -e 's/stages = 3, blocks_per_sm = 3, cluster = 2/stages = 2, blocks_per_sm = 3, cluster = 2/' %t.sel.mlir > %t.edited.mlir
// RUN: not k3-opt %t.edited.mlir --k3-outline-kernels 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// The artifact launches the pairs with grid y 2 (the runtime's plan).
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %s --k3-compile="target=cuda output=%t.k3bin max-tokens=64 max-seqs=1 kernel-config=moe_grouped_down.cluster=2,moe_grouped_down.stages=3,moe_grouped_down.blocks_per_sm=2" -o /dev/null
// RUN: k3-run %t.k3bin --plan | FileCheck %s --check-prefix=PLAN

// GLU: error: 'k3.moe_grouped_glu' op cluster 2 of k3.moe_grouped_glu pairs the persistent schedule's blocks: tile [128, 256, 64] and scheduler counter
// ODD: error: 'k3.moe_grouped_down' op cluster 2 pairs 128-column tiles: the output width must be a multiple of 256, got 384
// STAGES: error: 'k3.moe_grouped_down' op cluster 2 needs at least 3 stages (a refill lands while two steps multiply), got 2
// FOUR: error: 'k3.moe_grouped_down' op cluster 4 applies, as 2, to linear_tma_wgmma's 256-column tiles

// The gate/up GEMM is as it was: no cluster.
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-NOT: cluster
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK-SAME: grid_symbol = num_tokens, grid_scale = 2, grid_offset = 1151, grid_divisor = 128, block = [128, 1, 1], dynamic_smem = 99328, cluster_y = 2>
// CHECK-SAME: k3.tensor_maps = [#k3.tensor_map<operand = 6, box = [64, 128, 1], swizzle = swizzle_128b>, #k3.tensor_map<operand = 0, box = [64, 64], swizzle = swizzle_128b>]
// CHECK-SAME: nvvm.cluster_dim = array<i32: 1, 2, 1>
// CHECK: %[[RANK:.*]] = gpu.block_id  y
// The pair's column tile: twice its pair's, plus the rank.
// CHECK: %[[TWICE:.*]] = arith.muli %{{.*}}, %c2{{.*}} : index
// CHECK-NEXT: %{{.*}} = arith.addi %[[TWICE]], %[[RANK]] : index
// CHECK: nvgpu.mbarrier.init
// CHECK: nvvm.fence.mbarrier.init
// CHECK-NEXT: nvvm.cluster.arrive.relaxed {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
// The prologue's loads: the weights' tile, then this block's half of the
// rows (8 KiB and 64 rows in by its rank) into both blocks.
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}[%{{.*}}], %c32768
// CHECK: nvgpu.tma.async.load
// CHECK: arith.muli %[[RANK]], %c8192
// CHECK: arith.muli %[[RANK]], %c64
// CHECK: nvgpu.tma.async.load {{.*}} multicast_mask = %c3_i16 : {{.*}} -> memref<64x64xbf16
// A tile of at most 64 rows (one half): step kt's products, the wait
// that leaves them alone pending, then under one condition the cluster
// barrier and the refill of step kt - 1's stage.
// CHECK: scf.for %[[KT:.*]] = %c0
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK-COUNT-4: nvgpu.warpgroup.mma
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 4
// CHECK: %[[DONE:.*]] = arith.subi %[[KT]], %c1
// CHECK: scf.if
// CHECK-NEXT: nvvm.cluster.arrive.relaxed {aligned}
// CHECK-NEXT: nvvm.cluster.wait {aligned}
// CHECK: arith.remui %[[DONE]], %c3
// CHECK: nvgpu.tma.async.load {{.*}} multicast_mask
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// Both halves: eight groups a step.
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}})
// CHECK-COUNT-8: nvgpu.warpgroup.mma
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 8
// CHECK: scf.if
// CHECK-NEXT: nvvm.cluster.arrive.relaxed {aligned}
// CHECK: nvgpu.tma.async.load {{.*}} multicast_mask
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0

// PLAN: moe_grouped_glu_{{[0-9]+}} grid [{{.*}}, 1, 1]
// PLAN: moe_grouped_down_{{[0-9]+}} grid [ceil_div(2*num_tokens+1151, 128), 2, 1] block [128, 1, 1]

// PTX: .reqnctapercluster 1, 2, 1
// PTX-DAG: fence.mbarrier_init.release.cluster
// PTX-DAG: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
// PTX-DAG: barrier.cluster.arrive.relaxed.aligned
// PTX-DAG: barrier.cluster.wait.aligned

// PTXAS: Function properties for moe_grouped_down_2
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) {
  %w1 = k3.weight "w1" : tensor<8x128x256xbf16>
  %w3 = k3.weight "w3" : tensor<8x128x256xbf16>
  %w2 = k3.weight "w2" : tensor<8x256x128xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x256xbf16>, tensor<8x128x256xbf16>, tensor<8x256x128xbf16>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
