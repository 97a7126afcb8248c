// REQUIRES: ptxas
// k3.glu_gate_up with kernel = glu_wgmma (lowering/cuda/MoEGroupedWGMMA.cpp,
// its one-expert form): bf16 x [T, 256] and W_gate, W_up [192, 256]. A block
// per 128-row tile and 64 channels: the weights by TMA through rank-2 maps
// (64 k x 64 rows of W_gate above the same rows of W_up), x's rows by
// cp.async, the GLU in the epilogue. In a decode entry the GEMV form
// (glu_gemv, lowering/cuda/MoEGroupedGEMV.cpp).
// RUN: k3-opt %s --k3-split-glu-mlp --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-split-glu-mlp --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --input-file=%t.ptx --check-prefix=PTX
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CONFIG-LABEL: func.func @forward(
// CONFIG: k3.glu_gate_up {{.*}}#k3.kernel_config<kernel = glu_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>
// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma
// CONFIG-LABEL: func.func @forward_decode(
// CONFIG: k3.glu_gate_up {{.*}}#k3.kernel_config<kernel = glu_gemv, tile = [16, 8, 8], warps = 8, blocks_per_sm = 2>
// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_gemv

// CHECK-LABEL: gpu.func @glu_gate_up_0(
// CHECK-SAME: %{{.*}}: i64, %{{.*}}: i64, %[[GMAP:.*]]: !llvm.ptr, %[[UMAP:.*]]: !llvm.ptr)
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 3, grid_offset = 381, grid_divisor = 128, block = [128, 1, 1], dynamic_smem = 70656>
// CHECK-SAME: k3.tensor_maps = [#k3.tensor_map<operand = 1, box = [64, 64], swizzle = swizzle_128b>, #k3.tensor_map<operand = 2, box = [64, 64], swizzle = swizzle_128b>]
// CHECK: builtin.unrealized_conversion_cast %[[GMAP]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<64x64xbf16, #gpu.address_space<workgroup>>
// CHECK-COUNT-8: nvgpu.device_async_copy
// CHECK: nvgpu.tma.async.load %{{.*}}[%{{.*}}, %{{.*}}], %{{.*}}[%{{.*}}] to %{{.*}} : <tensor = memref<64x64xbf16
// CHECK: scf.for
// CHECK-COUNT-8: nvgpu.warpgroup.mma
// CHECK: vector.store {{.*}} : memref<?x192xbf16>, vector<2xbf16>

// The structure of the assembly: mbarriers set up once, TMA loads completing them
// by transaction bytes, a parity wait before the products, wgmma.
// PTX-LABEL: .entry glu_gate_up_0(
// PTX: mbarrier.init.shared.b64
// PTX: mbarrier.arrive.expect_tx.shared.b64
// PTX: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX: mbarrier.try_wait.parity.shared.b64
// PTX: wgmma.fence.sync.aligned
// PTX: wgmma.mma_async.sync.aligned.m64n{{[0-9]+}}k16.f32.bf16.bf16
// PTX: wgmma.commit_group.sync.aligned
// PTX: wgmma.wait_group.sync.aligned
// PTXAS: Function properties for glu_gate_up_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(%x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) {
  %wg = k3.weight "wg" : tensor<192x256xbf16>
  %wu = k3.weight "wu" : tensor<192x256xbf16>
  %wd = k3.weight "wd" : tensor<256x192xbf16>
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd : (tensor<?x256xbf16>, tensor<192x256xbf16>, tensor<192x256xbf16>, tensor<256x192xbf16>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}

func.func @forward_decode(%x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -2, 256>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) attributes {k3.decode} {
  %wg = k3.weight "wg" : tensor<192x256xbf16>
  %wu = k3.weight "wu" : tensor<192x256xbf16>
  %wd = k3.weight "wd" : tensor<256x192xbf16>
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd : (tensor<?x256xbf16>, tensor<192x256xbf16>, tensor<192x256xbf16>, tensor<256x192xbf16>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
