// REQUIRES: ptxas
// L2 prefetches ahead of the grouped MoE GEMMs' refills (config
// `prefetch`; MoEGroupedKernel.cpp, prefetchAhead): the thread that loads
// k-step kt's TMA tiles into a stage also prefetches step kt + prefetch's
// into L2 (k3gpu.tma_prefetch_tile, cp.async.bulk.prefetch.tensor) while
// that step is one of the tile's, in the one-warpgroup schedule and in the
// persistent producer. 8 bf16 experts, top-2, D 256, I 128: the gate/up
// GEMM has 4 k-steps, the down GEMM 2.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.prefetch=2" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.tile=128x256x64,moe_grouped_wgmma.warps=12,moe_grouped_wgmma.blocks_per_sm=1,moe_grouped_wgmma.stages=3,moe_grouped_wgmma.prefetch=1" --k3-outline-kernels | FileCheck %s --check-prefix=PERSISTENT
// RUN: k3-opt %S/cuda-moe-grouped-cluster.mlir --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.cluster=2,moe_grouped_down.stages=3,moe_grouped_down.blocks_per_sm=2,moe_grouped_wgmma.prefetch=2" --k3-outline-kernels | FileCheck %s --check-prefix=PAIRS
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda" --k3-outline-kernels | FileCheck %s --check-prefix=NONE
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_wgmma.prefetch=9" 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_dispatch.prefetch=2" 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// RANGE: error: 'k3.moe_grouped_glu' op prefetch must be in [0, 8] k-steps, got 9
// KIND: error: 'k3.moe_dispatch' op prefetch applies to moe_grouped_wgmma and glu_wgmma with bf16 weights, got moe_dispatch_rows

// The gate/up GEMM: the prologue's loads of steps 0 and 1 prefetch steps 2
// and 3 (both weight maps, coordinates (k, n, expert)); each refill's load
// of step kt + 2 prefetches kt + 4, past its 4 steps.
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK: nvgpu.tma.async.load
// CHECK: arith.cmpi slt, %{{.*}}, %c4
// CHECK: k3gpu.tma_prefetch_tile %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}]
// CHECK-NEXT: k3gpu.tma_prefetch_tile %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}]
// The down GEMM's rows come by TMA too: they are prefetched with its
// weights.
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK: k3gpu.tma_prefetch_tile %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}]
// CHECK-NEXT: k3gpu.tma_prefetch_tile %{{.*}}[%{{.*}}, %{{.*}}]

// PERSISTENT-LABEL: gpu.func @moe_grouped_glu_1(
// PERSISTENT: nvvm.setmaxregister
// PERSISTENT: nvgpu.tma.async.load
// PERSISTENT: k3gpu.tma_prefetch_tile
// PERSISTENT-LABEL: gpu.func @moe_grouped_down_2(
// PERSISTENT: nvvm.setmaxregister
// PERSISTENT: k3gpu.tma_prefetch_tile

// In cluster pairs (the model of cuda-moe-grouped-cluster.mlir) each block
// prefetches the half of the rows it loads:
// 64 rows past the tile's first times its rank.
// PAIRS-LABEL: gpu.func @moe_grouped_down_2(
// PAIRS: k3gpu.tma_prefetch_tile %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}]
// PAIRS-NEXT: %{{.*}} = arith.constant 64
// PAIRS-NEXT: %[[HALF:.*]] = arith.muli %block_id_y, %c64
// PAIRS-NEXT: %[[FIRST:.*]] = arith.addi %{{.*}}, %[[HALF]]
// PAIRS-NEXT: k3gpu.tma_prefetch_tile %{{.*}}[%{{.*}}, %[[FIRST]]]

// NONE-NOT: k3gpu.tma_prefetch_tile

// PTX: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX: cp.async.bulk.prefetch.tensor.3d.L2.global.tile
// PTXAS: Function properties for moe_grouped_down_2
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_glu_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>},
    %xf: tensor<?x256xf32> {k3.name = "xf", k3.dims = array<i64: -1, 256>})
    -> (tensor<?x256xbf16> {k3.name = "y"}, tensor<?x256xf32> {k3.name = "yf"}) {
  %w1 = k3.weight "w1" : tensor<8x128x256xbf16>
  %w3 = k3.weight "w3" : tensor<8x128x256xbf16>
  %w2 = k3.weight "w2" : tensor<8x256x128xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x256xbf16>, tensor<8x128x256xbf16>, tensor<8x256x128xbf16>) -> tensor<?x256xbf16>
  %yf = k3.moe_experts silu %xf, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xf32>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x256xbf16>, tensor<8x128x256xbf16>, tensor<8x256x128xbf16>) -> tensor<?x256xf32>
  return %y, %yf : tensor<?x256xbf16>, tensor<?x256xf32>
}
