// REQUIRES: ptxas
// The grouped MoE GEMMs' tall tiles (k3-moe-grouped tile-rows=384; config
// tile [384, 128, 64]; MoEGroupedPersistent.cpp consumeTall; docs/moe.md, "Tall tiles"): the
// dispatch cuts each expert's segment in tiles of 384 rows, so that a
// segment of up to 384 rows reads each weight tile once. A producer
// warpgroup loads the weights by TMA and the rows: the gate/up GEMM's
// gathered by cp.async (a rolled loop over the row chunks in the segment,
// in groups of 8), the down GEMM's sorted ones by TMA. Each of two
// consumers multiplies the tile's 64-row chunks c, c + 2, c + 4 that hold
// rows: one branch per count (3, 2, 1, or none, which releases the stages
// unmultiplied), on a count broadcast from lane 0 so that ptxas knows it
// uniform and keeps wgmma asynchronous.
// 8 bf16 experts, top-2, D 256, I 128: two column tiles in each GEMM.
// RUN: k3-opt %s --k3-moe-grouped="tile-rows=384" --k3-select-kernel-config="target=cuda" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.tile=384x128x64,moe_grouped_wgmma.warps=12,moe_grouped_wgmma.stages=3,moe_grouped_wgmma.blocks_per_sm=1" 2>&1 | FileCheck %s --check-prefix=ROWS
// RUN: not k3-opt %s --k3-moe-grouped="tile-rows=384" --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.tile=128x128x64,moe_grouped_wgmma.warps=4,moe_grouped_wgmma.scheduler=strided" 2>&1 | FileCheck %s --check-prefix=ROWS128
// RUN: not k3-opt %s --k3-moe-grouped="tile-rows=384" --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.blocks_per_sm=2" 2>&1 | FileCheck %s --check-prefix=BLOCKS
// RUN: not k3-opt %S/cuda-moe-grouped-mxfp4.mlir --k3-moe-grouped="tile-rows=384" --k3-select-kernel-config="target=cuda" 2>&1 | FileCheck %s --check-prefix=MXFP4
// RUN: not k3-opt %s --k3-moe-grouped="tile-rows=256" --k3-select-kernel-config="target=cuda" 2>&1 | FileCheck %s --check-prefix=ROWS256
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// ROWS: error: 'k3.moe_grouped_glu' op moe_grouped_wgmma has tiles of 384 rows but k3.moe_dispatch cuts the segments in tiles of 128 (k3-moe-grouped tile-rows)
// ROWS128: error: 'k3.moe_grouped_glu' op moe_grouped_wgmma has tiles of 128 rows but k3.moe_dispatch cuts the segments in tiles of 384 (k3-moe-grouped tile-rows)
// MXFP4: error: 'k3.moe_grouped_glu' op moe_grouped_wgmma with MXFP4 weights takes tiles of 128 rows: k3.moe_dispatch cuts the segments in tiles of 384 (k3-moe-grouped tile-rows)
// ROWS256: error: 'k3.moe_grouped_glu' op k3.moe_dispatch cuts the segments in tiles of 256 rows, which no GPU kernel takes: k3-moe-grouped tile-rows (k3-compile moe-tile-rows) must be 128 or 384 on a GPU target
// BLOCKS: error: 'k3.moe_grouped_glu' op moe_grouped_wgmma with the tall tile has one block per SM, got 2

// CHECK: k3.moe_dispatch{{.*}}tile_rows = 384
// The gate/up GEMM: 3 stages of 384 rows and 128 weight rows (64 KiB
// each) and a block per SM.
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-SAME: kernel_config<kernel = moe_grouped_wgmma, tile = [384, 128, 64], warps = 12, stages = 3, blocks_per_sm = 1, scheduler = counter>
// CHECK-SAME: grid_symbol = device_sm_count{{.*}}block = [384, 1, 1], dynamic_smem = 197632
// The producer: its row chunks in a loop whose trip count is the rows'.
// CHECK: nvvm.setmaxregister  decrease 56
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step
// CHECK: nvgpu.device_async_copy
// CHECK: nvvm.setmaxregister  increase 224
// CHECK: gpu.shuffle  idx
// Three chunks: 12 wgmma a stage, two stages' groups in flight.
// CHECK-COUNT-12: nvgpu.warpgroup.mma {{.*}}waitGroup = 24
// CHECK: nvvm.wgmma.wait.group.sync.aligned 12
// CHECK-COUNT-8: nvgpu.warpgroup.mma {{.*}}waitGroup = 16
// CHECK: nvvm.wgmma.wait.group.sync.aligned 8
// CHECK-COUNT-4: nvgpu.warpgroup.mma {{.*}}waitGroup = 8
// CHECK: nvvm.wgmma.wait.group.sync.aligned 4
// The down GEMM: the same tiles; its sorted rows by TMA, boxes of 128 rows
// (a box has at most 256), only those that the segment reaches, and the
// stage's expected bytes counted from them.
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK-SAME: tile = [384, 128, 64]
// CHECK-SAME: #k3.tensor_map<operand = 0, box = [64, 128]
// CHECK: nvvm.setmaxregister  decrease 40
// CHECK: nvgpu.mbarrier.arrive.expect_tx
// CHECK: nvgpu.tma.async.load
// CHECK: arith.cmpi slt, %c0{{.*}} : index
// CHECK: nvgpu.tma.async.load {{.*}} : <tensor = memref<128x64xbf16
// CHECK: arith.cmpi slt, %c128{{.*}} : index
// CHECK: nvgpu.tma.async.load {{.*}} : <tensor = memref<128x64xbf16
// CHECK: arith.cmpi slt, %c256{{.*}} : index
// CHECK: nvgpu.tma.async.load {{.*}} : <tensor = memref<128x64xbf16
// CHECK: nvvm.setmaxregister  increase 232
// CHECK: gpu.shuffle  idx
// CHECK-COUNT-12: nvgpu.warpgroup.mma {{.*}}waitGroup = 24

// PTXAS-NOT: C7520
// PTXAS: Function properties for moe_grouped_down_2
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_glu_1
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
