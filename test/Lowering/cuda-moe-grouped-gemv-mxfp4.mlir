// REQUIRES: ptxas
// The decode MoE GEMVs on MXFP4 experts (lowering/cuda/MoEGroupedGEMV.cpp,
// MXFP4WarpMMA.h): a warp multiplies 16 rows of each weight by the tile's
// tokens on the tensor cores (mma.sync m16n8k16, bf16). Lane (g, c) loads
// 16 code bytes (one 32-element block) and the scale byte of rows g and
// g + 8 per 128-element step, the next step's before it decodes this one
// (loop-carried), and x's block for token g (zeros past the tile). Codes
// become bf16x2 by mask and shift and two bf16x2 multiplies (2^126, the
// block's scale); the sums meet in the mma, so there is no warp reduction,
// and each lane stores its fragment. 8 MXFP4 experts, top-2, D 2304, I 128.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_glu.tile=2x4" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// MXFP4 defaults: 16 rows per warp, the dispatch's 4-row tiles, 4 warps.
// CONFIG: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4], warps = 4>
// CONFIG: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_gemv, tile = [16, 4], warps = 4>
// BADTILE: error: 'k3.moe_grouped_glu' op moe_grouped_gemv with MXFP4 weights has the tile R = 16 and TT in [1, 8], got [2, 4]

// The kernel takes each weight as its bytes (codes, then scales).
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-SAME: memref<i8>
// CHECK: vector.load {{.*}} : memref<{{[0-9]+}}xi8>, vector<16xi8>
// CHECK: scf.for {{.*}} iter_args
// CHECK: vector.load {{.*}} : memref<{{[0-9]+}}xi8>, vector<16xi8>
// CHECK: arith.andi {{.*}} : i32
// CHECK: vector.bitcast {{.*}} : vector<1xi32> to vector<2xbf16>
// CHECK: arith.mulf {{.*}} : vector<2xbf16>
// CHECK: k3gpu.mma_sync
// CHECK: scf.yield
// CHECK-NOT: gpu.shuffle
// CHECK: memref.store {{.*}} : memref<?x128xbf16>
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK: k3gpu.mma_sync
// CHECK: memref.store {{.*}} : memref<?x2304xbf16>

// PTX: ld.global.v4.{{[bu]}}32
// PTX: mul.rn.bf16x2
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32

// PTXAS: Function properties for moe_grouped_down_2
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_glu_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x2304xbf16> {k3.name = "x", k3.dims = array<i64: -1, 2304>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>})
    -> (tensor<?x2304xbf16> {k3.name = "y"}) attributes {k3.decode} {
  %w1 = k3.weight "w1" : tensor<8x128x2304xf4E2M1FN>
  %w3 = k3.weight "w3" : tensor<8x128x2304xf4E2M1FN>
  %w2 = k3.weight "w2" : tensor<8x2304x128xf4E2M1FN>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x2304xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x2304xf4E2M1FN>, tensor<8x128x2304xf4E2M1FN>, tensor<8x2304x128xf4E2M1FN>) -> tensor<?x2304xbf16>
  return %y : tensor<?x2304xbf16>
}
