// REQUIRES: ptxas
// k3.linear_group with kernel = linear_tma_wgmma (lowering/cuda/
// LinearWGMMA.cpp), as k3-group-linears leaves a prefill's projections of
// one input on CUDA: the weights' 128-column tiles end to end in one grid
// (here 2 + 1 + 1 = 4 per row tile: N = 256, 40 and 8), each block's tile
// picking its weight's tensor map (a select over the map parameters) and
// storing to that weight's result (N = 40: a partial tile, columns < 40
// only; an f32 and two bf16 results).
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CHECK-LABEL: gpu.func @linear_group_0(
// CHECK-SAME: %[[XM:[^:]*]]: !llvm.ptr, %[[W0:[^:]*]]: !llvm.ptr, %[[W1:[^:]*]]: !llvm.ptr, %[[W2:[^:]*]]: !llvm.ptr)
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 4, grid_offset = 508, grid_divisor = 128, block = [128, 1, 1], dynamic_smem = {{[0-9]+}}>
// CHECK-SAME: k3.tensor_maps = [#k3.tensor_map<operand = 0, box = [64, 128], swizzle = swizzle_128b>, #k3.tensor_map<operand = 1, box = [64, 128], swizzle = swizzle_128b>, #k3.tensor_map<operand = 2, box = [64, 128], swizzle = swizzle_128b>, #k3.tensor_map<operand = 3, box = [64, 128], swizzle = swizzle_128b>]
// CHECK: %[[S1:.*]] = arith.select %{{.*}}, %[[W1]], %[[W0]] : !llvm.ptr
// CHECK: arith.select %{{.*}}, %[[W2]], %[[S1]] : !llvm.ptr
// CHECK: nvgpu.warpgroup.mma
// CHECK: scf.if
// CHECK: vector.store {{.*}} : memref<?x256xbf16>, vector<4xbf16>
// CHECK: scf.if
// CHECK: vector.store {{.*}} : memref<?x40xf32>, vector<4xf32>
// CHECK: scf.if
// CHECK: vector.store {{.*}} : memref<?x8xbf16>, vector<4xbf16>

// PTX: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// PTXAS: Function properties for linear_group_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(%x: tensor<?x128xbf16> {k3.name = "x", k3.dims = array<i64: -1, 128>})
    -> (tensor<?x256xbf16> {k3.name = "a"}, tensor<?x40xf32> {k3.name = "b"}, tensor<?x8xbf16> {k3.name = "c"}) {
  %w0 = k3.weight "w0" : tensor<256x128xbf16>
  %w1 = k3.weight "w1" : tensor<40x128xbf16>
  %w2 = k3.weight "w2" : tensor<8x128xbf16>
  %a, %b, %c = k3.linear_group %x, %w0, %w1, %w2
      : (tensor<?x128xbf16>, tensor<256x128xbf16>, tensor<40x128xbf16>, tensor<8x128xbf16>)
      -> (tensor<?x256xbf16>, tensor<?x40xf32>, tensor<?x8xbf16>)
  return %a, %b, %c : tensor<?x256xbf16>, tensor<?x40xf32>, tensor<?x8xbf16>
}

