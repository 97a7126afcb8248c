// REQUIRES: ptxas
// k3.mla_prefill_attention with kernel = mla_flash_wgmma
// (lowering/cuda/MLAFlashWGMMA.cpp) at Kimi-Linear's head dims: q [T, 4,
// 192], kv [T, 4, 256], latent [T, 576], the output gate fused. A block per
// (64-query tile, head); q, the keys' nope part and the values by TMA
// through rank-3 maps, k_pe through a rank-2 map of the latent; S by 12
// wgmma m64n64k16, P V by 4 wgmma m64n128k16 with P from registers and V
// transposed; the accumulators' registers through k3gpu.warpgroup_fragment;
// the mask only on the key tiles that need it (a branch). f32 inputs keep
// the loop nest.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=CONFIG
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --input-file=%t.ptx --check-prefix=PTX
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// Two stages: the pipelined schedule (scores of tile j in flight beside
// P V of tile j - 1, the softmax between the two waits).
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.stages=2,mla_prefill_attention.blocks_per_sm=2" --k3-outline-kernels -o %t.pipe.mlir
// RUN: FileCheck %s --input-file=%t.pipe.mlir --check-prefix=PIPE
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.pipe.mlir > %t.pipe.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.pipe.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.pipe.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.pipe.bin.mlir > %t.pipe.ptx
// RUN: FileCheck %s --input-file=%t.pipe.ptx --check-prefix=PIPE-PTX
// RUN: %ptxas -v -arch=sm_90a %t.pipe.ptx -o %t.pipe.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// Two warpgroups (128 queries a block) sharing the key and value stages.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=128x64,mla_prefill_attention.warps=8,mla_prefill_attention.stages=2,mla_prefill_attention.blocks_per_sm=1" --k3-outline-kernels | FileCheck %s --check-prefix=WG2
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=128x64" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=64x256" 2>&1 | FileCheck %s --check-prefix=BADTILE
// Head by head from T x H >= 16384 x 32 tokens (at most 16384): 4 heads
// from 16384 tokens (above), K3's 96 heads from 5462.
// RUN: sed -e 's/x4x/x96x/g; s/-1, 4, /-1, 96, /g; s/?x512xbf16/?x12288xbf16/g; s/-1, 512>/-1, 12288>/g' %s > %t.h96.mlir
// RUN: k3-opt %t.h96.mlir --k3-select-kernel-config=target=cuda --k3-outline-kernels | FileCheck %s --check-prefix=H96
// Key tiles of 128: 128-row key and value boxes, scores by m64n128, eight
// k-steps of P V; two blocks per SM hold its registers without spills.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=64x128,mla_prefill_attention.blocks_per_sm=2" --k3-outline-kernels -o %t.k128.mlir
// RUN: FileCheck %s --input-file=%t.k128.mlir --check-prefix=K128
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.k128.mlir > %t.k128.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.k128.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.k128.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.k128.bin.mlir > %t.k128.ptx
// RUN: FileCheck %s --input-file=%t.k128.ptx --check-prefix=K128-PTX
// RUN: %ptxas -v -arch=sm_90a %t.k128.ptx -o %t.k128.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// A producer warpgroup (FlashAttention-3's warp specialisation): 128
// queries in two consumer warpgroups (pipelined, taking turns) with two
// stages and with three, and 192 queries in three (serial consumers).
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=128x64,mla_prefill_attention.warps=12,mla_prefill_attention.stages=2,mla_prefill_attention.blocks_per_sm=1" --k3-outline-kernels -o %t.ws.mlir
// RUN: FileCheck %s --input-file=%t.ws.mlir --check-prefix=WS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.ws.mlir > %t.ws.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.ws.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.ws.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.ws.bin.mlir > %t.ws.ptx
// RUN: FileCheck %s --input-file=%t.ws.ptx --check-prefix=WS-PTX
// RUN: %ptxas -v -arch=sm_90a %t.ws.ptx -o %t.ws.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=128x64,mla_prefill_attention.warps=12,mla_prefill_attention.stages=3,mla_prefill_attention.blocks_per_sm=1" --k3-outline-kernels -o %t.wsp.mlir
// RUN: FileCheck %s --input-file=%t.wsp.mlir --check-prefix=WSP
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.wsp.mlir > %t.wsp.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.wsp.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.wsp.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.wsp.bin.mlir > %t.wsp.ptx
// RUN: FileCheck %s --input-file=%t.wsp.ptx --check-prefix=WSP-PTX
// RUN: %ptxas -v -arch=sm_90a %t.wsp.ptx -o %t.wsp.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=192x64,mla_prefill_attention.warps=16,mla_prefill_attention.stages=2,mla_prefill_attention.blocks_per_sm=1" --k3-outline-kernels -o %t.ws3.mlir
// RUN: FileCheck %s --input-file=%t.ws3.mlir --check-prefix=WS3
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.ws3.mlir > %t.ws3.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.ws3.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.ws3.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.ws3.bin.mlir > %t.ws3.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ws3.ptx -o %t.ws3.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=192x64,mla_prefill_attention.warps=12" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=mla_prefill_attention.tile=192x128,mla_prefill_attention.warps=16,mla_prefill_attention.blocks_per_sm=1" 2>&1 | FileCheck %s --check-prefix=BADTILE

// CONFIG-LABEL: func.func @forward(
// CONFIG: k3.mla_prefill_attention {{.*}}#k3.kernel_config<kernel = mla_flash_wgmma, tile = [64, 64], warps = 4, stages = 1, blocks_per_sm = 3>
// CONFIG-LABEL: func.func @f32_inputs(
// CONFIG: k3.mla_prefill_attention {{.*}}#k3.kernel_config<kernel = loop_nest

// CHECK-LABEL: gpu.func @mla_prefill_attention_0(
// CHECK-SAME: %[[QMAP:[^:]*]]: !llvm.ptr, %[[KVMAP:[^:]*]]: !llvm.ptr, %[[LMAP:[^:]*]]: !llvm.ptr)
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 4, grid_offset = 252, grid_divisor = 64, block = [128, 1, 1], dynamic_smem = 66560>
// CHECK-SAME: k3.tensor_maps = [#k3.tensor_map<operand = 0, box = [64, 1, 64], swizzle = swizzle_128b>, #k3.tensor_map<operand = 1, box = [64, 1, 64], swizzle = swizzle_128b>, #k3.tensor_map<operand = 2, box = [64, 64], swizzle = swizzle_128b>]
// From 16384 tokens on, blocks go head by head (head = bid / tiles, the
// divisor at least 1), else all heads of a tile together (head = bid % H);
// spare blocks past the tiles or the heads find no tile.
// CHECK: %[[BID:.*]] = gpu.block_id x
// CHECK: %[[TILES:.*]] = arith.divui %{{.*}}, %c64
// CHECK: %[[MAJOR:.*]] = arith.cmpi sge, %{{.*}}, %c16384
// CHECK: %[[PERHEAD:.*]] = arith.maxsi %[[TILES]], %c1{{.*}} : index
// CHECK-DAG: arith.remui %[[BID]], %c4
// CHECK-DAG: arith.divui %[[BID]], %[[PERHEAD]]
// CHECK-DAG: arith.divui %[[BID]], %c4
// CHECK-DAG: arith.remui %[[BID]], %[[PERHEAD]]
// CHECK: scf.if
// CHECK-COUNT-3: nvgpu.tma.async.load %{{.*}} : <tensor = memref<64x1x64xbf16
// CHECK: scf.for
// CHECK: k3gpu.warpgroup_mma_chain{{ ?}}[{{([^,]*, ){11}[^,]*}}], [{{.*}}], %{{.*}} {overwrite} : {{.*}} -> <fragmented = vector<64x64xf32>>
// CHECK: k3gpu.warpgroup_fragment %{{.*}} -> vector<32xf32>
// CHECK: scf.if
// CHECK: arith.select
// CHECK: math.fma
// CHECK: math.exp2
// CHECK: k3gpu.warpgroup_accumulator %{{.*}} : vector<64xf32> -> <fragmented = vector<64x128xf32>>
// CHECK-NOT: nvvm.fence.proxy
// CHECK: k3gpu.warpgroup_mma_chain{{ ?}}[], [{{([^,]*, ){3}[^,]*}}], %{{.*}} registers({{.*}} : vector<4xi32>, vector<4xi32>, vector<4xi32>, vector<4xi32>) {transposeB} : [], {{.*}} -> <fragmented = vector<64x128xf32>>
// CHECK: vector.store {{.*}} : memref<?x512xbf16>, vector<2xbf16>

// One fence, 12 products, one wait for S (the first overwrites: scale-d
// 0); P V with A from registers and the value operand transposed
// (imm-trans-b = 1); nothing goes through shared memory but TMA's loads.
// The keys, values and queries arrive by TMA (3-d boxes of q and kv, 2-d
// of the latent's k_pe) completing mbarriers waited on by parity.
// PTX: mbarrier.init.shared.b64
// PTX: cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
// PTX: mbarrier.try_wait.parity.shared.b64
// PTX: wgmma.fence.sync.aligned;
// PTX: setp.ne.b32 p, 0, 0;
// PTX-NEXT: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// PTX-NOT: wgmma.wait_group
// PTX-COUNT-11: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// PTX: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}}, {%r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}, %r{{[0-9]+}}}, %rd{{[0-9]+}}, p, 1, 1, 1;
// PTX-NOT: st.shared

// PTXAS: Function properties for mla_prefill_attention_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// PTXAS-NOT: serialized

// WG2-LABEL: gpu.func @mla_prefill_attention_0(
// WG2-SAME: grid_divisor = 128, block = [256, 1, 1], dynamic_smem = 132096
// WG2: %[[TID:.*]] = gpu.thread_id x
// WG2: arith.divui %[[TID]], %c128
// WG2-COUNT-6: nvgpu.tma.async.load %{{.*}} : <tensor = memref<64x1x64xbf16
// WG2: scf.for
// Warp-specialised: 384 threads; thread 0 of warpgroup 0 loads q and then
// every key tile's keys and values, each after the stage's free barrier
// (every consumer thread's arrive: 256) let it; the consumers wait for
// the stages' full barriers and arrive on the free ones, no block barrier
// after the roles split (setmaxnreg 40 and 232).
// WS-LABEL: gpu.func @mla_prefill_attention_0(
// WS-SAME: grid_divisor = 128, block = [384, 1, 1], dynamic_smem = 132096
// WS: nvgpu.mbarrier.init %{{.*}}[%{{.*}}], %c256
// WS: gpu.barrier
// WS: scf.if
// WS: nvvm.setmaxregister decrease 40
// WS: scf.for
// WS: nvgpu.mbarrier.try_wait.parity
// WS: nvgpu.tma.async.load
// WS: } else {
// WS: nvvm.setmaxregister increase 232
// WS-NOT: gpu.barrier
// WS: nvvm.barrier.arrive id = %{{.*}} number_of_threads = %c256_i32
// WS: scf.for
// WS: nvvm.barrier id = %{{.*}} number_of_threads = %c256_i32
// WS: nvgpu.mbarrier.arrive
// WS: nvgpu.mbarrier.arrive
// WS-NOT: gpu.barrier
// WS: vector.store
// WS-PTX: setmaxnreg.dec.sync.aligned.u32 40;
// WS-PTX: setmaxnreg.inc.sync.aligned.u32 232;
// WS-PTX: mbarrier.arrive.shared.b64
// Three stages: the pipelined consumers take turns (FlashAttention-3's
// ping-pong): the last warpgroup opens turn 0 (named barrier 1), and in
// the loop each waits for its turn before its products and passes it on
// after issuing them (256 threads: its own and the other's).
// WSP-LABEL: gpu.func @mla_prefill_attention_0(
// WSP-SAME: block = [384, 1, 1], dynamic_smem = 173056
// WSP: nvvm.setmaxregister increase 232
// WSP: nvvm.barrier.arrive id = %{{.*}} number_of_threads = %c256_i32
// WSP: scf.for
// WSP: nvvm.barrier id = %{{.*}} number_of_threads = %c256_i32
// WSP: k3gpu.warpgroup_mma_chain{{.*}} {async, overwrite} :
// WSP: k3gpu.warpgroup_mma_chain{{.*}} registers({{.*}}) {async, transposeB} :
// WSP: nvvm.barrier.arrive id = %{{.*}} number_of_threads = %c256_i32
// WSP: k3gpu.warpgroup_mma_wait %{{.*}} {pending = 1 : i64}
// WSP: nvgpu.mbarrier.arrive
// WSP-PTX: bar.arrive 1, 256;
// WSP-PTX: bar.sync {{.*}}, 256;
// WSP-PTX: bar.arrive {{.*}}, 256;
// WS3-LABEL: gpu.func @mla_prefill_attention_0(
// WS3-SAME: grid_divisor = 192, block = [512, 1, 1], dynamic_smem = 156672
// WS3: nvvm.setmaxregister decrease 24
// WS3: nvvm.setmaxregister increase 160

// BADTILE: error: 'k3.mla_prefill_attention' op mla_flash_wgmma has the tile [64 or 128 queries, 64 or 128 keys] with a warpgroup (4 warps) per 64 queries

// H96-LABEL: gpu.func @mla_prefill_attention_0(
// H96: arith.cmpi sge, %{{.*}}, %c5462

// K128-LABEL: gpu.func @mla_prefill_attention_0(
// K128-SAME: dynamic_smem = 107520
// K128-SAME: k3.tensor_maps = [#k3.tensor_map<operand = 0, box = [64, 1, 64], swizzle = swizzle_128b>, #k3.tensor_map<operand = 1, box = [64, 1, 128], swizzle = swizzle_128b>, #k3.tensor_map<operand = 2, box = [64, 128], swizzle = swizzle_128b>]
// K128: nvgpu.tma.async.load %{{.*}} : <tensor = memref<128x1x64xbf16
// K128: k3gpu.warpgroup_mma_chain{{ ?}}[{{([^,]*, ){11}[^,]*}}], [{{.*}}], %{{.*}} {overwrite} : {{.*}} -> <fragmented = vector<64x128xf32>>
// K128: k3gpu.warpgroup_fragment %{{.*}} -> vector<64xf32>
// K128: k3gpu.warpgroup_mma_chain{{ ?}}[], [{{([^,]*, ){7}[^,]*}}], %{{.*}} registers({{.*}}) {transposeB}
// K128-PTX-COUNT-12: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16
// K128-PTX-COUNT-8: wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, p, 1, 1, 1;

// Tile 0's scores waited for before the loop; in the loop tile j's scores
// and tile j - 1's P V are both async, the scores retired first (one group
// left in flight), the P V after the softmax; the last P V after the loop.
// PIPE-LABEL: gpu.func @mla_prefill_attention_0(
// PIPE-SAME: dynamic_smem = 107520
// PIPE: k3gpu.warpgroup_mma_chain{{.*}} {overwrite} :
// PIPE: scf.for
// PIPE: k3gpu.warpgroup_mma_chain{{.*}} {async, overwrite} :
// PIPE: k3gpu.warpgroup_accumulator %{{.*}} : vector<64xf32> -> <fragmented = vector<64x128xf32>>
// PIPE: k3gpu.warpgroup_mma_chain{{.*}} registers({{.*}}) {async, transposeB} :
// PIPE: k3gpu.warpgroup_mma_wait %{{.*}} {pending = 1 : i64} : !nvgpu.warpgroup.accumulator<fragmented = vector<64x64xf32>>
// PIPE: math.exp2
// PIPE: k3gpu.warpgroup_mma_wait %{{.*}} {pending = 0 : i64} : !nvgpu.warpgroup.accumulator<fragmented = vector<64x128xf32>>
// PIPE: scf.yield
// PIPE: k3gpu.warpgroup_mma_chain{{.*}} registers({{.*}}) {transposeB} :
// PIPE-PTX: wgmma.wait_group.sync.aligned 0;
// PIPE-PTX: wgmma.commit_group.sync.aligned;
// PIPE-PTX-NOT: wgmma.wait_group
// PIPE-PTX: wgmma.commit_group.sync.aligned;
// PIPE-PTX-NEXT: wgmma.wait_group.sync.aligned 1;
// PIPE-PTX: ex2.approx
// PIPE-PTX: wgmma.wait_group.sync.aligned 0;

func.func @forward(%q: tensor<?x4x192xbf16> {k3.name = "q", k3.dims = array<i64: -1, 4, 192>}, %kv: tensor<?x4x256xbf16> {k3.name = "kv", k3.dims = array<i64: -1, 4, 256>},
                   %lat: tensor<?x576xbf16> {k3.name = "latent", k3.dims = array<i64: -1, 576>}, %g: tensor<?x512xbf16> {k3.name = "gate", k3.dims = array<i64: -1, 512>},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x4x128xbf16> {k3.name = "o"}) {
  %o = k3.mla_prefill_attention %q, %kv, %lat gate(%g) cu_seqlens(%cu)
      {qk_nope_head_dim = 128 : i64, qk_rope_head_dim = 64 : i64, v_head_dim = 128 : i64, scale = 0.07216878364870323 : f64}
      : (tensor<?x4x192xbf16>, tensor<?x4x256xbf16>, tensor<?x576xbf16>, tensor<?x512xbf16>, tensor<?xi32>) -> tensor<?x4x128xbf16>
  return %o : tensor<?x4x128xbf16>
}

func.func @f32_inputs(%q: tensor<?x4x192xf32> {k3.name = "q", k3.dims = array<i64: -1, 4, 192>}, %kv: tensor<?x4x256xf32> {k3.name = "kv", k3.dims = array<i64: -1, 4, 256>},
                      %lat: tensor<?x576xf32> {k3.name = "latent", k3.dims = array<i64: -1, 576>}) -> (tensor<?x4x128xf32> {k3.name = "o"}) {
  %o = k3.mla_prefill_attention %q, %kv, %lat
      {qk_nope_head_dim = 128 : i64, qk_rope_head_dim = 64 : i64, v_head_dim = 128 : i64, scale = 0.07216878364870323 : f64}
      : (tensor<?x4x192xf32>, tensor<?x4x256xf32>, tensor<?x576xf32>) -> tensor<?x4x128xf32>
  return %o : tensor<?x4x128xf32>
}
