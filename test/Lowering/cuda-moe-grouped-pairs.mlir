// REQUIRES: ptxas
// The grouped gate/up GEMM's persistent schedule in cluster pairs that
// share the weights (config cluster = 2 with scheduler counter;
// lowering/cuda/MoEGroupedPersistent.cpp, "Pairs"): 8 bf16 experts, top-2,
// D 256, I 256, so each expert's row tiles have C = 2 column tiles of 256
// (128 gate and 128 up channels). A cluster per two SMs (grid y = rank,
// nvvm.cluster_dim [1, 2, 1]); rank 0 claims each pair tile from the
// counter, fences at cluster scope and arrives on rank 1's claim barrier,
// whose producer threads wait on it and read the claim from rank 0's
// shared memory (ld.shared::cluster). Rank 1 counts no block done. The
// holder of a pair tile's expert computes the block's row tile and column
// tile (the slot's fourth field: the column tile, plus C for a shared
// weight tile). Shared: rank r loads map r (W1 or W3) into both blocks
// (multicast mask 0b11); solo: both maps locally. Each consumer warp's
// lanes 0 and 1 release a stage to both blocks' producers. Each block's
// results go through its own shared tiles after the 4 stages and out by
// TMA stores, as unpaired (230400 bytes).
// RUN: k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_glu.tile=128x256x64,moe_grouped_glu.warps=12,moe_grouped_glu.blocks_per_sm=1,moe_grouped_glu.stages=4,moe_grouped_glu.scheduler=counter,moe_grouped_glu.cluster=2" --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// Pairs need the persistent tile and the counter, bf16 weights, and an
// even count of column tiles.
// RUN: not k3-opt %s --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_glu.tile=128x256x64,moe_grouped_glu.warps=12,moe_grouped_glu.blocks_per_sm=1,moe_grouped_glu.stages=4,moe_grouped_glu.cluster=2" 2>&1 | FileCheck %s --check-prefix=STRIDED
// RUN: sed -e '/"w[13]"/s/8x256x256/8x384x256/; /"w2"/s/8x256x256/8x256x384/; s/tensor<8x256x256xbf16>, tensor<8x256x256xbf16>, tensor<8x256x256xbf16>)/tensor<8x384x256xbf16>, tensor<8x384x256xbf16>, tensor<8x256x384xbf16>)/' %s > %t.odd.mlir
// RUN: not k3-opt %t.odd.mlir --k3-moe-grouped --k3-select-kernel-config="target=cuda override=moe_grouped_glu.tile=128x256x64,moe_grouped_glu.warps=12,moe_grouped_glu.blocks_per_sm=1,moe_grouped_glu.stages=4,moe_grouped_glu.scheduler=counter,moe_grouped_glu.cluster=2" 2>&1 | FileCheck %s --check-prefix=ODD
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// The artifact launches half an SM count of pairs, grid y 2.
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %s --k3-compile="target=cuda output=%t.k3bin max-tokens=64 max-seqs=1 kernel-config=moe_grouped_glu.tile=128x256x64,moe_grouped_glu.warps=12,moe_grouped_glu.blocks_per_sm=1,moe_grouped_glu.stages=4,moe_grouped_glu.scheduler=counter,moe_grouped_glu.cluster=2" -o /dev/null
// RUN: k3-run %t.k3bin --plan | FileCheck %s --check-prefix=PLAN

// STRIDED: error: 'k3.moe_grouped_glu' op cluster 2 of k3.moe_grouped_glu pairs the persistent schedule's blocks: tile [128, 256, 64] and scheduler counter
// ODD: error: 'k3.moe_grouped_glu' op cluster 2 of k3.moe_grouped_glu gives a solo pair tile two column tiles: the intermediate width must be a multiple of 256, got 384

// CHECK-LABEL: gpu.func @moe_grouped_glu_1(
// CHECK-SAME: grid_symbol = device_sm_count, grid_scale = 1, grid_offset = 0, grid_divisor = 2
// CHECK-SAME: dynamic_smem = 230400, cluster_y = 2>
// CHECK-SAME: nvvm.cluster_dim = array<i32: 1, 2, 1>
// CHECK: %[[RANK:.*]] = gpu.block_id  y
// CHECK: nvgpu.mbarrier.init %[[CLAIMED:[0-9]+]][%c0{{.*}}], %c1_{{[0-9]+}}, {{.*}}num_barriers = 2>
// CHECK-NEXT: arith.constant
// CHECK-NEXT: arith.constant
// CHECK-NEXT: nvgpu.mbarrier.init %[[CLAIMED]][%c1{{.*}}], %c1_{{[0-9]+}}, {{.*}}num_barriers = 2>
// Empty barriers: a release per consumer warp of each block (2 x 4 x 2).
// CHECK: nvgpu.mbarrier.init %{{.*}}[%c0{{.*}}], %c16,
// CHECK: nvvm.fence.mbarrier.init
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// The producer: rank 0's claim, handed to rank 1.
// CHECK: nvvm.setmaxregister {{ *}}decrease 56
// CHECK: scf.while
// CHECK: memref.atomic_rmw addi
// CHECK: nvvm.fence.sc.cluster
// CHECK: k3gpu.mbarrier_arrive_cluster %[[CLAIMED]][%{{.*}}], %c1_i32
// CHECK: scf.if
// CHECK: nvvm.barrier id = %c2_i32 number_of_threads = %c128_i32
// CHECK: } else {
// CHECK: nvgpu.mbarrier.try_wait.parity %[[CLAIMED]]
// CHECK-NEXT: nvvm.fence.sc.cluster
// CHECK: k3gpu.cluster_load %{{.*}}[%{{.*}}], %c0_i32 : memref<2xi32, #gpu.address_space<workgroup>> -> vector<1xi32>
// CHECK: scf.condition
// The loads: a shared tile's half by the rank (multicast), else both maps.
// CHECK: nvgpu.mbarrier.arrive.expect_tx %{{.*}}[%{{.*}}], %c32768
// CHECK: scf.if
// CHECK: nvgpu.tma.async.load {{.*}} multicast_mask = %c3_i16
// CHECK: nvgpu.tma.async.load {{.*}} multicast_mask = %c3_i16
// CHECK: } else {
// CHECK-COUNT-2: nvgpu.tma.async.load
// CHECK: k3gpu.mbarrier_arrive_copies
// Rank 0 alone counts the pair done.
// CHECK: arith.cmpi eq, %[[RANK]], %c0{{.*}} : index
// CHECK: memref.atomic_rmw addi
// The consumers release each stage to both blocks by lane.
// CHECK: nvvm.setmaxregister {{ *}}increase 224
// CHECK: nvgpu.warpgroup.mma {{.*}} -> <fragmented = vector<64x256xf32>>
// CHECK: k3gpu.mbarrier_arrive_cluster
// CHECK: k3gpu.mbarrier_arrive_cluster
// CHECK: nvgpu.tma.async.store
// Neither block exits while its peer may still reach it.
// CHECK: nvvm.cluster.arrive
// CHECK-NEXT: nvvm.cluster.wait
// CHECK: gpu.return

// PLAN: moe_grouped_glu_{{[0-9]+}} grid [ceil_div(device_sm_count, 2), 2, 1]

// PTX: .reqnctapercluster 1, 2, 1
// PTX-DAG: fence.sc.cluster
// PTX-DAG: mapa.shared::cluster
// PTX-DAG: ld.shared::cluster
// PTX-DAG: mbarrier.arrive.shared::cluster
// PTX-DAG: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster
// PTX-DAG: cp.async.mbarrier.arrive.noinc.shared
// PTX-DAG: cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group

// PTXAS: Function properties for moe_grouped_glu_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %x: tensor<?x256xbf16> {k3.name = "x", k3.dims = array<i64: -1, 256>},
    %idx: tensor<?x2xi32> {k3.name = "idx", k3.dims = array<i64: -1, 2>},
    %wts: tensor<?x2xf32> {k3.name = "wts", k3.dims = array<i64: -1, 2>})
    -> (tensor<?x256xbf16> {k3.name = "y"}) {
  %w1 = k3.weight "w1" : tensor<8x256x256xbf16>
  %w3 = k3.weight "w3" : tensor<8x256x256xbf16>
  %w2 = k3.weight "w2" : tensor<8x256x256xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x256xbf16>, tensor<?x2xi32>, tensor<?x2xf32>, tensor<8x256x256xbf16>, tensor<8x256x256xbf16>, tensor<8x256x256xbf16>) -> tensor<?x256xbf16>
  return %y : tensor<?x256xbf16>
}
