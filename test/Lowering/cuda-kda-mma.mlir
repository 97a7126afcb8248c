// REQUIRES: ptxas
// The bf16 k3.kda on target=cuda after k3-kda-mma-split: the operand
// kernel (lowering/cuda/KDAMMAOperands.cpp: H blocks of 4 warps per
// 16-token window, the in-chunk products on the tensor cores, dynamic shared
// memory) and the chain (KDAMMARecurrence.cpp: a block of W = 8 warps per
// (sequence, head, 16 W value columns), three cp.async stages, fragments by
// ldmatrix, every product an mma.sync with bf16 operands and f32
// accumulators). How many warps of a block are active is chosen at run
// time from the sequences: the grid has N H V / (16 W) blocks plus one per
// SM (the target's; 16 with the override) for a split slice.
// RUN: k3-opt %s --k3-kda-mma-split --k3-select-kernel-config="target=cuda override=target.sm_count=16" --k3-outline-kernels | FileCheck %s --check-prefix=SMALLGPU
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=target.sm_count=0" 2>&1 | FileCheck %s --check-prefix=BADSMS
// RUN: k3-opt %s --k3-kda-mma-split --k3-select-kernel-config=target=cuda --k3-outline-kernels -mlir-print-local-scope -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// The tuning options (docs/kda-cuda.md): 2 warps per chain block, 2 stages,
// the operand kernel capped for 4 blocks per SM.
// RUN: k3-opt %s --k3-kda-mma-split --k3-select-kernel-config="target=cuda override=kda_mma_recurrence.warps=2,kda_mma_recurrence.stages=2,kda_mma_operands.blocks_per_sm=4" --k3-outline-kernels | FileCheck %s --check-prefix=TUNED
// Values outside their ranges are errors, not clamped.
// RUN: not k3-opt %s --k3-kda-mma-split --k3-select-kernel-config="target=cuda override=kda_mma_recurrence.warps=3" 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: not k3-opt %s --k3-kda-mma-split --k3-select-kernel-config="target=cuda override=kda_mma_recurrence.stages=5" 2>&1 | FileCheck %s --check-prefix=BADSTAGES
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=kda.tile=32xx" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-scf-to-cf,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// K = V = 192 (6 channels per lane: the operand kernel's vector loads take 2
// channels each, a power of two dividing 6, so that they stay aligned):
// assembles, and the loads are 4-byte bf16 pairs, not 12-byte vectors.
// RUN: sed -e 's/128/192/g' -e 's/512xf32/768xf32/g' %s > %t.k192.mlir
// RUN: k3-opt %t.k192.mlir --k3-kda-mma-split --k3-select-kernel-config=target=cuda --k3-outline-kernels -mlir-print-local-scope -o %t.k192.out.mlir
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.k192.out.mlir > %t.k192.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.k192.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-scf-to-cf,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.k192.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.k192.bin.mlir > %t.k192.ptx
// RUN: FileCheck %s --check-prefix=K192 --input-file=%t.k192.ptx
// RUN: %ptxas -arch=sm_90a %t.k192.ptx -o %t.k192.cubin

// Kimi Linear's unbounded softplus gate: the operand kernel forms its
// in-chunk products on the tensor cores by levels of a binary split of the
// chunk, each block's decays factored about the token between its rows
// and columns (ex2 of G differences, then mma.sync), no shuffles for
// channel sums; 4 blocks per SM; it assembles without spills.
// RUN: sed -e 's/gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64/gate_kind = #k3<decay_gate neg_softplus>/' %s > %t.sp.mlir
// RUN: k3-opt %t.sp.mlir --k3-kda-mma-split --k3-select-kernel-config=target=cuda --k3-outline-kernels -mlir-print-local-scope -o %t.sp.out.mlir
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.sp.out.mlir > %t.sp.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.sp.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-scf-to-cf,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.sp.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.sp.bin.mlir > %t.sp.ptx
// RUN: FileCheck %s --check-prefix=SOFTPLUS --input-file=%t.sp.ptx
// RUN: FileCheck %s --check-prefix=CHAIN --input-file=%t.sp.ptx
// RUN: %ptxas -v -arch=sm_90a %t.sp.ptx -o %t.sp.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// The config rules: the operand kernel has 4 warps capped for 5 blocks per
// SM; the chain takes the fewest warps whose blocks fit the SMs (here 1) and
// 3 stages.
// CHECK-LABEL: gpu.func @kda_mma_operands_0(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = kda_mma_operands, tile = [16], warps = 4, blocks_per_sm = 5>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 4, grid_offset = 60, grid_divisor = 16, block = [128, 1, 1], dynamic_smem = {{[0-9]+}}>
// CHECK-SAME: nvvm.minctasm = 5
// CHECK: gpu.dynamic_shared_memory
// The 32-ary search over cu_seqlens: a ballot count per round.
// CHECK: scf.while
// CHECK: k3gpu.ballot_count
// The channels' loads: a lane's 4 bf16 channels in one 8-byte load.
// CHECK: vector.load {{.*}} {alignment = 8 : i64} : memref<?xbf16>, vector<4xbf16>
// CHECK: gpu.barrier
// CHECK: k3gpu.rcp_approx
// CHECK: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false} : memref<16x{{[0-9]+}}xbf16, #gpu.address_space<workgroup>> -> vector<4x2xbf16>
// CHECK: k3gpu.mma_sync {{.*}} : vector<4x2xbf16>, vector<2x2xbf16> -> vector<2x2xf32>
// CHECK: gpu.barrier

// CHECK-LABEL: gpu.func @kda_mma_recurrence_1(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = kda_mma_chain, tile = [16, 16], warps = 8, stages = 3, blocks_per_sm = 1>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 4, grid_offset = 132, grid_divisor = 1, block = [256, 1, 1]
// One block per SM: the launch bounds let ptxas spend up to 255 registers
// (with fewer it serialised the ldmatrix loads; KernelPatterns.cpp).
// CHECK-SAME: nvvm.maxntid = array<i32: 256, 1, 1>, nvvm.minctasm = 1
// The split: 2, 4, 8 blocks a slice while N H s <= 132 (selects, largest
// last), the active warps W / s; blocks past the items return.
// CHECK: arith.cmpi slt, %{{.*}}, %c133
// CHECK: arith.cmpi slt, %{{.*}}, %c133
// CHECK: arith.cmpi slt, %{{.*}}, %c133
// CHECK: arith.remui %block_id_x, %[[SPLIT:.*]] : index
// CHECK: arith.divui %c8{{.*}}, %[[SPLIT]] : index
// CHECK: scf.if
// CHECK: gpu.dynamic_shared_memory
// Three stages: chunks 0 and 1 issued ahead (a group each: 16-byte copies
// of packed rows and v, zero-filled past the sequence); per chunk one wait
// (chunk c landed, c + 1 may be pending), one barrier, chunk c + 2 issued,
// 52 mma (32 with the state, v^T's tile by ldmatrix.trans, then 20).
// CHECK: nvgpu.device_async_copy {{.*}}, 4, %{{.*}} {bypassL1} : memref<?xi32> to memref<{{[0-9]+}}xi32, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_copy {{.*}}, 8, %{{.*}} {bypassL1} : memref<?xbf16> to memref<{{[0-9]+}}xbf16, #gpu.address_space<workgroup>>
// CHECK: nvgpu.device_async_create_group {k3.all_issued}
// CHECK: nvgpu.device_async_create_group {k3.all_issued}
// The active warps' loop, with the products; the others' after it, with
// the same copies and barriers only.
// CHECK: scf.if
// CHECK: scf.for
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK: nvgpu.device_async_copy
// CHECK: nvgpu.device_async_create_group {k3.all_issued}
// CHECK-NOT: gpu.barrier
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false} : memref<16x{{[0-9]+}}xbf16, #gpu.address_space<workgroup>> -> vector<4x2xbf16>
// CHECK-NOT: gpu.barrier
// CHECK: k3gpu.mma_sync {{.*}} : vector<4x2xbf16>, vector<2x2xbf16> -> vector<2x2xf32>
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-31: k3gpu.mma_sync
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = true}
// CHECK-COUNT-20: k3gpu.mma_sync
// CHECK-NOT: gpu.barrier
// CHECK: scf.yield
// CHECK-NOT: k3gpu.mma_sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 0 : i32}
// CHECK: } else {
// CHECK: scf.for
// CHECK-NOT: k3gpu.mma_sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 1 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK-NOT: k3gpu.mma_sync
// CHECK: nvgpu.device_async_wait %{{.*}} {numGroups = 0 : i32}
// CHECK-NOT: k3gpu.mma_sync
// CHECK: gpu.return

// TUNED-LABEL: gpu.func @kda_mma_operands_0(
// TUNED-SAME: blocks_per_sm = 4
// TUNED-SAME: nvvm.minctasm = 4
// TUNED-LABEL: gpu.func @kda_mma_recurrence_1(
// TUNED-SAME: k3.kernel_config = #k3.kernel_config<kernel = kda_mma_chain, tile = [16, 16], warps = 2, stages = 2, blocks_per_sm = 1>
// TUNED-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 16, grid_offset = 132, grid_divisor = 1, block = [64, 1, 1]
// TUNED: nvgpu.device_async_create_group {k3.all_issued}
// TUNED-NOT: nvgpu.device_async_create_group
// TUNED: scf.for
// TUNED: nvgpu.device_async_wait %{{.*}} {numGroups = 0 : i32}

// SMALLGPU-LABEL: gpu.func @kda_mma_recurrence_1(
// SMALLGPU-SAME: k3.kernel_config = #k3.kernel_config<kernel = kda_mma_chain, tile = [16, 16], warps = 8, stages = 3, blocks_per_sm = 1>
// SMALLGPU-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 4, grid_offset = 16, grid_divisor = 1, block = [256, 1, 1]
// SMALLGPU: arith.cmpi slt, %{{.*}}, %c17
// A tile of a whole block's 128 columns never splits: no extra blocks.
// RUN: k3-opt %s --k3-kda-mma-split --k3-select-kernel-config="target=cuda override=kda_mma_recurrence.tile=16x128" --k3-outline-kernels | FileCheck %s --check-prefix=NOSPLIT
// NOSPLIT-LABEL: gpu.func @kda_mma_recurrence_1(
// NOSPLIT-SAME: tile = [16, 128], warps = 8
// NOSPLIT-SAME: grid_scale = 4, grid_offset = 0
// NOSPLIT-NOT: arith.cmpi slt, %{{.*}}, %c133
// Tiles that are not [16, 16 x a power of two up to 16 W] are errors.
// RUN: not k3-opt %s --k3-kda-mma-split --k3-select-kernel-config="target=cuda override=kda_mma_recurrence.tile=16x48" 2>&1 | FileCheck %s --check-prefix=BADCOLS
// RUN: not k3-opt %s --k3-kda-mma-split --k3-select-kernel-config="target=cuda override=kda_mma_recurrence.warps=2,kda_mma_recurrence.tile=16x64" 2>&1 | FileCheck %s --check-prefix=BADCOLS
// RUN: not k3-opt %s --k3-kda-mma-split --k3-select-kernel-config="target=cuda override=kda_mma_recurrence.tile=16" 2>&1 | FileCheck %s --check-prefix=BADRANK
// BADCOLS: op kda_mma_chain tile[1] (the fewest value columns a block takes) must be 16 times a power of two up to 16 warps
// BADRANK: op kda_mma_chain tile must be [16, columns], got 1 sizes

// BADWARPS: error: 'k3.kda_mma_recurrence' op kda_mma_chain warps must be 1, 2, 4 or 8, got 3
// BADSMS: error: sm_count must be in [1, 1024], got 0
// BADSTAGES: error: 'k3.kda_mma_recurrence' op kda_mma_chain stages must be in [2, 4], got 5
// BADTILE: error: override kda.tile needs positive sizes joined by x, got '32xx'

// PTX: .entry kda_mma_operands_0
// PTX: ld.global.v4.b16
// PTX: rcp.approx.ftz.f32
// PTX: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: .entry kda_mma_recurrence_1
// PTX: cp.async.cg.shared.global
// PTX: cp.async.wait_group 1
// PTX: ldmatrix.sync.aligned.m8n8.x4.shared.b16
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16
// PTX-NOT: ld.local
// PTX-NOT: st.local

// K192: .entry kda_mma_operands_0
// K192-NOT: ld.global.v4.b16
// K192: ld.global.v2.b16
// K192: .entry kda_mma_recurrence_1

// SOFTPLUS: .entry kda_mma_operands_0
// SOFTPLUS: .minnctapersm 4
// The six product tiles (levels 8, 4, 2, 1 and the two diagonal halves),
// each its own mma.sync, all before the chain's entry.
// SOFTPLUS-COUNT-6: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// SOFTPLUS: .entry kda_mma_recurrence_1
// SOFTPLUS: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32

// The chain's active and staging warps reach the per-chunk barrier from
// different loops: the unaligned barrier.sync, never the aligned bar.sync.
// CHAIN: .entry kda_mma_recurrence_1
// CHAIN-NOT: bar.sync
// CHAIN: barrier.sync 0;
// CHAIN-NOT: bar.sync

// ptxas compiles the entries in reverse order; neither spills.
// PTXAS: Compiling entry function 'kda_mma_recurrence_1' for 'sm_90a'
// PTXAS-NEXT: Function properties for kda_mma_recurrence_1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS: Compiling entry function 'kda_mma_operands_0' for 'sm_90a'
// PTXAS-NEXT: Function properties for kda_mma_operands_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %q: tensor<1x?x4x128xbf16> {k3.name = "q", k3.dims = array<i64: 1, -1, 4, 128>},
    %k: tensor<1x?x4x128xbf16> {k3.name = "k", k3.dims = array<i64: 1, -1, 4, 128>},
    %v: tensor<1x?x4x128xbf16> {k3.name = "v", k3.dims = array<i64: 1, -1, 4, 128>},
    %g: tensor<1x?x4x128xbf16> {k3.name = "g", k3.dims = array<i64: 1, -1, 4, 128>},
    %beta: tensor<1x?x4xbf16> {k3.name = "beta", k3.dims = array<i64: 1, -1, 4>},
    %s0: tensor<?x4x128x128xf32> {k3.name = "initial_state", k3.dims = array<i64: -2, 4, 128, 128>},
    %alog: tensor<4xf32> {k3.name = "A_log"},
    %dtb: tensor<512xf32> {k3.name = "dt_bias"},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<1x?x4x128xbf16> {k3.name = "o"}, tensor<?x4x128x128xf32> {k3.name = "final_state"}) {
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.08838834764831845 : f64, use_qk_l2norm, use_beta_sigmoid,
       gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}
      : (tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>, tensor<1x?x4x128xbf16>,
         tensor<1x?x4xbf16>, tensor<?x4x128x128xf32>, tensor<?xi32>, tensor<4xf32>, tensor<512xf32>)
      -> (tensor<1x?x4x128xbf16>, tensor<?x4x128x128xf32>)
  return %o, %s : tensor<1x?x4x128xbf16>, tensor<?x4x128x128xf32>
}
