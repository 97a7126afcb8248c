// REQUIRES: ptxas
// k3.linear with kernel = linear_tma_wgmma (lowering/cuda/LinearWGMMA.cpp):
// bf16 x [T, 512] and W [256, 512], f32 y. One warpgroup per 128 x 128 tile;
// thread 0 streams 128 x 64 tiles of x and W by TMA into 2 stages (128-byte
// swizzle), each completing an mbarrier; wgmma m64n128k16 on both halves;
// the tensor maps are two extra parameters (#k3.tensor_map).
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: FileCheck %s --check-prefix=BANDS --input-file=%t.mlir
// The kernel covers only bf16 inputs with whole 128 x 64 weight tiles: the
// f32 linear keeps its default (3xTF32).
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma" | FileCheck %s --check-prefix=CONFIG
// Tuning and its limits.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,linear.stages=4" | FileCheck %s --check-prefix=STAGES
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,linear.stages=7" 2>&1 | FileCheck %s --check-prefix=BADSTAGES
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,target.smem_per_block=65536" 2>&1 | FileCheck %s --check-prefix=SMEM
// The tile order (raster, lowering/cuda/TileRaster.h): bands of 16 row
// tiles by default, row-major with raster = 0; a kernel without a grid of
// output tiles refuses it.
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,linear.raster=65" 2>&1 | FileCheck %s --check-prefix=BADRASTER
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_gemv,linear.raster=4" 2>&1 | FileCheck %s --check-prefix=RASTERKIND
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=linear.kernel=linear_tma_wgmma,linear.raster=0" --k3-outline-kernels | FileCheck %s --check-prefix=ROWMAJOR
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3, raster = 16>{{.*}}tensor<256x512xbf16>
// CONFIG: k3.linear {{.*}}#k3.kernel_config<kernel = linear_mma_3xtf32, {{.*}}tensor<256x512xf32>
// STAGES: #k3.kernel_config<kernel = linear_tma_wgmma, tile = [128, 128, 64], warps = 4, stages = 4, blocks_per_sm = 3, raster = 16>
// BADSTAGES: error: 'k3.linear' op linear_tma_wgmma stages must be in [2, 6], got 7
// SMEM: error: 'k3.linear' op linear_tma_wgmma needs 70656 bytes of shared memory, the target has 65536
// BADRASTER: error: 'k3.linear' op raster must be in [0, 64] row tiles, got 65
// RASTERKIND: error: 'k3.linear' op raster applies to linear_tma_wgmma and glu_wgmma, not linear_gemv (an override for the prefill's GEMMs alone: <op>@prefill.raster=N)

// Bands of 16 row tiles over the 2 column tiles: a band spans 32 tiles; a
// block's row tile is the band's first plus its place in the band modulo
// the band's row tiles (at least 1), its column tile the quotient.
// BANDS-LABEL: gpu.func @linear_0(
// BANDS: arith.divui %block_id_x, %c32{{(_[0-9]+)?}} : index
// BANDS: arith.minsi
// BANDS: %[[BANDROWS:.*]] = arith.maxsi
// BANDS: %[[LOCAL:.*]] = arith.remui %block_id_x, %c32{{(_[0-9]+)?}} : index
// BANDS: arith.remui %[[LOCAL]], %[[BANDROWS]] : index
// BANDS: arith.divui %[[LOCAL]], %[[BANDROWS]] : index
// ROWMAJOR-LABEL: gpu.func @linear_0(
// ROWMAJOR-NOT: arith.maxsi
// ROWMAJOR: nvgpu.tma.async.load

// CHECK-LABEL: gpu.func @linear_0(
// CHECK-SAME: %{{.*}}: i64, %{{.*}}: i64, %[[XMAP:.*]]: !llvm.ptr, %[[WMAP:.*]]: !llvm.ptr)
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 2, grid_offset = 254, grid_divisor = 128, block = [128, 1, 1], dynamic_smem = 70656>
// CHECK-SAME: k3.tensor_maps = [#k3.tensor_map<operand = 0, box = [64, 128], swizzle = swizzle_128b>, #k3.tensor_map<operand = 1, box = [64, 128], swizzle = swizzle_128b>]
// CHECK: builtin.unrealized_conversion_cast %[[XMAP]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<128x64xbf16, #gpu.address_space<workgroup>>, swizzle = swizzle_128b
// CHECK: nvgpu.mbarrier.create
// CHECK-COUNT-2: nvgpu.mbarrier.init
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}, %{{.*}}
// CHECK: nvgpu.tma.async.load
// CHECK: nvgpu.tma.async.load
// CHECK: scf.for
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK-COUNT-8: nvgpu.warpgroup.mma {{.*}}{waitGroup = 8 : i64}
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: gpu.barrier
// CHECK: nvgpu.tma.async.load
// CHECK: scf.yield
// CHECK-COUNT-2: nvgpu.warpgroup.mma.store
// CHECK: vector.store

// N = 40, one partial column tile: TMA fills W's rows 40..127 with zeros
// and the epilogue stores the columns < 40 (bf16 here).
// CHECK-LABEL: gpu.func @linear_2(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 1, grid_offset = 127, grid_divisor = 128, block = [128, 1, 1], dynamic_smem = 70656>
// CHECK: arith.truncf {{.*}} : vector<4xf32> to vector<4xbf16>

// PTX: mbarrier.init.shared.b64
// PTX: cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX: mbarrier.try_wait.parity.shared.b64
// PTX: wgmma.fence.sync.aligned
// PTX: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// PTX: wgmma.wait_group.sync.aligned 0

// PTXAS: Function properties for linear_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x512xbf16> {k3.name = "x", k3.dims = array<i64: -1, 512>},
    %xf: tensor<?x512xf32> {k3.name = "xf", k3.dims = array<i64: -1, 512>})
    -> (tensor<?x256xf32> {k3.name = "y"}, tensor<?x256xf32> {k3.name = "yf"},
        tensor<?x40xbf16> {k3.name = "yp"}) {
  %w = k3.weight "w" : tensor<256x512xbf16>
  %y = k3.linear %x, %w : (tensor<?x512xbf16>, tensor<256x512xbf16>) -> tensor<?x256xf32>
  %wf = k3.weight "wf" : tensor<256x512xf32>
  %yf = k3.linear %xf, %wf : (tensor<?x512xf32>, tensor<256x512xf32>) -> tensor<?x256xf32>
  %wp = k3.weight "wp" : tensor<40x512xbf16>
  %yp = k3.linear %x, %wp : (tensor<?x512xbf16>, tensor<40x512xbf16>) -> tensor<?x40xbf16>
  return %y, %yf, %yp : tensor<?x256xf32>, tensor<?x256xf32>, tensor<?x40xbf16>
}
