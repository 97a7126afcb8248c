// REQUIRES: ptxas
// The grouped MoE GEMMs with MXFP4 experts (f4E2M1FN, docs/mxfp4.md) on
// the tensor cores (lowering/cuda/MoEGroupedWGMMA.cpp, MXFP4Tile.h): 8
// experts, top-2, D 256, I 128. No tensor maps: each thread stages one
// weight row per k-step by cp.async (two 16-byte copies of codes, the
// 4-byte word of its scales) into 36-byte rows after the stages' tiles,
// and once its group landed decodes it to the stage's bf16 tile in the
// 128-byte swizzle (bf16x2 multiplies, 16-byte stores) before the proxy
// fence; then wgmma m64n128k16 as for bf16 weights.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// The warp-specialised schedule does not take MXFP4 weights.
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_glu.tile=128x256x64,moe_grouped_glu.warps=12,moe_grouped_glu.stages=4,moe_grouped_glu.blocks_per_sm=1" 2>&1 | FileCheck %s --check-prefix=WIDE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CONFIG: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 3, blocks_per_sm = 2>
// CONFIG: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 3, blocks_per_sm = 2>
// WIDE: error: 'k3.moe_grouped_glu' op moe_grouped_wgmma with MXFP4 weights has the tile [128, 128, 64] with one warpgroup (4 warps)

// Three stages of 32 KiB tiles, then 3 x 128 x 36 staged bytes, 1 KiB to
// align.
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-NOT: k3.tensor_maps
// CHECK-SAME: dynamic_smem = 113152
// CHECK: llvm.mlir.zero : !llvm.ptr
// CHECK: builtin.unrealized_conversion_cast %{{.*}} : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<1x64x64xbf16, #gpu.address_space<workgroup>>, swizzle = swizzle_128b
// CHECK: nvgpu.device_async_copy {{.*}}], 16, %{{.*}} {bypassL1} : memref<139264xi8> to memref<4608xi8
// CHECK: nvgpu.device_async_copy {{.*}}], 4 : memref<139264xi8> to memref<4608xi8
// Step 0 decoded before the main loop (its group landed: 2 of 3 pending),
// then each step's products issued, step kt + 1's row decoded (1 pending)
// while they run, one drain, one barrier, the copies of step kt + 3.
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 2 : i32}
// CHECK: scf.for
// CHECK-COUNT-4: vector.store {{.*}} : memref<128x64xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: gpu.barrier
// CHECK: scf.for
// CHECK-NOT: nvgpu.mbarrier.try_wait.parity
// CHECK-COUNT-8: nvgpu.warpgroup.mma {{.*}}{waitGroup = 8 : i64}
// CHECK-NOT: nvvm.wgmma.wait.group.sync.aligned
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK: scf.for
// CHECK-COUNT-4: vector.store {{.*}} : memref<128x64xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK: nvvm.fence.proxy
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: gpu.barrier
// CHECK: scf.yield
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK-NOT: k3.tensor_maps
// CHECK-SAME: dynamic_smem = 113152
// CHECK: nvgpu.device_async_copy {{.*}}], 4 : memref<139264xi8> to memref<4608xi8

// PTX: cp.async.cg.shared.global {{.*}}, 16;
// PTX: cp.async.ca.shared.global {{.*}}, 4;
// PTX: mul.rn.bf16x2
// PTX: st.shared.v4.b32
// PTX: fence.proxy.async.shared::cta
// PTX: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// PTX-NOT: cp.async.bulk.tensor

// PTXAS: Function properties for moe_grouped_down_2
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Function properties for moe_grouped_glu_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) {
  %w1 = k3.weight "w1" : tensor<8x128x256xf4E2M1FN>
  %w3 = k3.weight "w3" : tensor<8x128x256xf4E2M1FN>
  %w2 = k3.weight "w2" : tensor<8x256x128xf4E2M1FN>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x128x256xf4E2M1FN>, tensor<8x128x256xf4E2M1FN>, tensor<8x256x128xf4E2M1FN>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
