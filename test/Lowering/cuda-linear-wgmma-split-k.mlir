// REQUIRES: ptxas
// linear_tma_wgmma's [128, 128, 64] tile with K split over a cluster
// (cluster = 4; lowering/cuda/LinearWGMMA.cpp): bf16 x [T, 1024] and W
// [256, 1024], bf16 y. The 4 blocks of a tile form a cluster along y (grid
// y 4, nvvm.cluster_dim); rank r (block index y) streams k-steps [4 r,
// 4 r + 4) of the 16 and stores its partial f32 tile in its shared
// memory after its 4 stages (136 KiB a block, one an SM); after a cluster
// barrier each sums rows [32 r, 32 r + 32) of the
// four tiles in rank order (k3gpu.cluster_load: mapa, ld.shared::cluster)
// and writes them; a second cluster barrier keeps every block's tile alive
// until the others read it.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,linear.cluster=4,linear.stages=4,linear.blocks_per_sm=1" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// Its limits: 2, 4 or 8 blocks, each the same number of 64-column steps;
// the partial tile beside the stages leaves room for one block an SM.
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,linear.cluster=4" 2>&1 | FileCheck %s --check-prefix=FIT
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,linear.cluster=3" 2>&1 | FileCheck %s --check-prefix=THREE
// RUN: sed -e 's/1024/1088/g' %s | not k3-opt --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,linear.cluster=2" 2>&1 | FileCheck %s --check-prefix=UNEVEN
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// FIT: error: 'k3.linear' op linear_tma_wgmma with K split needs 136192 bytes of shared memory a block: 3 blocks per SM do not fit the target's 233472
// THREE: error: 'k3.linear' op cluster 3 of linear_tma_wgmma's [128, 128, 64] tile splits K: 2, 4 or 8 blocks, each an equal number of 64-column steps (K = 1024)
// UNEVEN: error: 'k3.linear' op cluster 2 of linear_tma_wgmma's [128, 128, 64] tile splits K: 2, 4 or 8 blocks, each an equal number of 64-column steps (K = 1088)

// CHECK-LABEL: gpu.func @linear_0(
// CHECK-SAME: dynamic_smem = 201728, cluster_y = 4>
// CHECK-SAME: nvvm.cluster_dim = array<i32: 1, 4, 1>
// CHECK: %[[RANK:.*]] = gpu.block_id  y
// CHECK: arith.muli %[[RANK]], %c4{{(_[0-9]+)?}} : index
// CHECK: nvgpu.tma.async.load
// CHECK: scf.for %{{.*}} = %c0{{(_[0-9]+)?}} to %c4{{(_[0-9]+)?}} step %c1{{(_[0-9]+)?}} iter_args
// CHECK: nvgpu.warpgroup.mma
// CHECK: nvgpu.warpgroup.mma.store
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// CHECK: arith.muli %[[RANK]], %c32{{(_[0-9]+)?}} : index
// CHECK: k3gpu.cluster_load %{{.*}}, %c0_i32{{(_[0-9]+)?}} :
// CHECK: k3gpu.cluster_load %{{.*}}, %c1_i32{{(_[0-9]+)?}} :
// CHECK: k3gpu.cluster_load %{{.*}}, %c2_i32{{(_[0-9]+)?}} :
// CHECK: k3gpu.cluster_load %{{.*}}, %c3_i32{{(_[0-9]+)?}} :
// CHECK: arith.truncf %{{.*}} : vector<4xf32> to vector<4xbf16>
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait

// PTX-DAG: .reqnctapercluster 1, 4, 1
// PTX-DAG: mapa.shared::cluster
// PTX-DAG: ld.shared::cluster.v4.{{b32|f32}}
// PTX-DAG: barrier.cluster.arrive
// PTX-DAG: barrier.cluster.wait

// PTXAS: Function properties for linear_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x1024xbf16> {k3.name = "x", k3.dims = array<i64: -1, 1024>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) {
  %w = k3.weight "w" : tensor<256x1024xbf16>
  %y = k3.linear %x, %w : (tensor<?x1024xbf16>, tensor<256x1024xbf16>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
