// REQUIRES: ptxas
// The grouped MoE kernels (k3-moe-grouped, then the CUDA defaults): 8 bf16
// experts, top-2, D 256, I 128.
// - moe_dispatch_rows (lowering/cuda/MoEDispatchRows.cpp): a block of 16
//   warps per expert, each warp over its own contiguous range of the pairs;
//   a shared-memory histogram (atomic adds) and the warps' counts, then the
//   ordered walk with a shuffle scan per warp step (its total by lane 31).
// - moe_grouped_wgmma (lowering/cuda/MoEGroupedWGMMA.cpp), gate/up and
//   down: the weights by TMA through rank-3 tensor maps (box 64 k x 64 or
//   128 rows x 1 expert); gate/up's rows by cp.async (zero-filled past the
//   segment) and a proxy fence, down's by TMA (h [T, K, I] as [T K, I]);
//   wgmma m64n128k16; a block per (row tile, column tile) for
//   ceil(T K / 128) + E row tiles, its expert found by all of its threads
//   at once (MoESegments.h).
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// f32 activations keep the loop nests for the GEMMs (the dispatch kernel
// does not care); tuning and its limits.
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_glu.stages=4,moe_grouped_glu.blocks_per_sm=1" | FileCheck %s --check-prefix=STAGES
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_down.stages=7" 2>&1 | FileCheck %s --check-prefix=BADSTAGES
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_dispatch.warps=33" 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// CONFIG: k3.moe_dispatch {{.*}}#k3.kernel_config<kernel = moe_dispatch_rows, warps = 16>
// CONFIG: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3>
// CONFIG: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 2, blocks_per_sm = 3>
// CONFIG: k3.moe_combine {{.*}}#k3.kernel_config<kernel = moe_combine_rows, tile = [8], warps = 1>
// CONFIG: k3.moe_dispatch {{.*}}#k3.kernel_config<kernel = moe_dispatch_rows, warps = 16>
// CONFIG: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = loop_nest
// CONFIG: k3.moe_grouped_down {{.*}}#k3.kernel_config<kernel = loop_nest
// STAGES: k3.moe_grouped_glu {{.*}}#k3.kernel_config<kernel = moe_grouped_wgmma, tile = [128, 128, 64], warps = 4, stages = 4, blocks_per_sm = 1>
// BADSTAGES: error: 'k3.moe_grouped_down' op moe_grouped_wgmma stages must be in [2, 6], got 7
// BADWARPS: error: 'k3.moe_dispatch' op moe_dispatch_rows warps must be in [1, 32], got 33

// CHECK-LABEL: gpu.func @moe_dispatch_0(
// CHECK-SAME: workgroup(%[[HIST:.*]] : memref<8xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<16xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = none, grid_scale = 0, grid_offset = 8, grid_divisor = 1, block = [512, 1, 1]>
// CHECK: memref.atomic_rmw addi %{{.*}}, %[[HIST]]
// CHECK: gpu.shuffle  up
// CHECK: gpu.shuffle  idx
// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-SAME: %{{.*}}: i64, %{{.*}}: i64, %[[W1MAP:.*]]: !llvm.ptr, %[[W3MAP:.*]]: !llvm.ptr)
// CHECK-SAME: workgroup(%[[GLUSLOTS:.*]] : memref<4xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 4, grid_offset = 2302, grid_divisor = 128, block = [128, 1, 1], dynamic_smem = 70656>
// CHECK-SAME: k3.tensor_maps = [#k3.tensor_map<operand = 5, box = [64, 64, 1], swizzle = swizzle_128b>, #k3.tensor_map<operand = 6, box = [64, 64, 1], swizzle = swizzle_128b>]
// The block finds its tile's expert with all of its threads at once: the
// tables' entries of the thread's experts (and the tile count) loaded
// before any is used, the holder's one vector store, one barrier.
// CHECK: gpu.thread_id  x
// CHECK-COUNT-5: memref.load
// CHECK: scf.if
// CHECK: vector.store %{{.*}}, %[[GLUSLOTS]][%{{.*}}] {alignment = 16 : i64} : memref<4xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK: gpu.barrier
// CHECK: vector.load %[[GLUSLOTS]][%{{.*}}] {alignment = 16 : i64} : memref<4xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK: builtin.unrealized_conversion_cast %[[W1MAP]] : !llvm.ptr to !nvgpu.tensormap.descriptor<tensor = memref<1x64x64xbf16, #gpu.address_space<workgroup>>, swizzle = swizzle_128b
// CHECK-COUNT-8: nvgpu.device_async_copy
// CHECK: nvgpu.tma.async.load
// CHECK: nvgpu.tma.async.load
// A tile of at most 64 rows (an expert's last, often) runs the first half
// alone: its main loop carries one accumulator and issues 4 wgmma a stage.
// CHECK: scf.for {{.*}} -> (!nvgpu.warpgroup.accumulator<fragmented = vector<64x128xf32>>) {
// CHECK-COUNT-4: nvgpu.warpgroup.mma {{.*}}{waitGroup = 8 : i64}
// CHECK-NOT: nvgpu.warpgroup.mma {{.*}}{waitGroup
// CHECK: nvgpu.warpgroup.mma.store
// CHECK-NOT: nvgpu.warpgroup.mma.store
// CHECK: } else {
// CHECK: scf.for {{.*}} -> (!nvgpu.warpgroup.accumulator<fragmented = vector<64x128xf32>>, !nvgpu.warpgroup.accumulator<fragmented = vector<64x128xf32>>) {
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: nvgpu.mbarrier.try_wait.parity
// CHECK-COUNT-8: nvgpu.warpgroup.mma {{.*}}{waitGroup = 8 : i64}
// CHECK: scf.yield
// CHECK-COUNT-2: nvgpu.warpgroup.mma.store
// CHECK: vector.store {{.*}} : memref<?x128xbf16>, vector<2xbf16>
// CHECK-LABEL: gpu.func @moe_grouped_down_2(
// CHECK-SAME: workgroup(%[[SCALES:.*]] : memref<128xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{.*}} : memref<4xi32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: k3.tensor_maps = [#k3.tensor_map<operand = 6, box = [64, 128, 1], swizzle = swizzle_128b>, #k3.tensor_map<operand = 0, box = [64, 128], swizzle = swizzle_128b>]
// The down GEMM's rows come by TMA: no cp.async, one mbarrier for both
// tiles' bytes.
// CHECK-NOT: nvgpu.device_async_copy
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}[%{{.*}}], %c32768
// CHECK: scf.for
// CHECK: memref.store %{{.*}}, %[[SCALES]]
// CHECK: vector.store {{.*}} : memref<?x256xbf16>, vector<4xbf16>

// PTX: atom.shared.add.u32
// PTX: cp.async.cg.shared.global
// PTX: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX: fence.proxy.async.shared::cta
// PTX: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16

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
