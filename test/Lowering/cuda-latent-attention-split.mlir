// REQUIRES: ptxas
// k3.latent_attention in a decode entry takes kernel = latent_attention_split
// (lowering/cuda/LatentAttentionSplit.cpp, LatentSplitAttend.cpp), three
// launches (k3.phases) at Kimi-Linear-48B's sizes (32 heads, nope 128,
// rope 64, v 128, kv_lora_rank 512): the absorbed queries into a bf16
// workspace; split-KV attention with all 32 heads of a block on the tensor
// cores (mma.sync), partial (ctx, m, l) rows into two f32 workspaces
// ([P = 132, H, R + 4] static and [T, H, R + 4]); the combine, W_v and the cache
// append. The cache is bf16 (what the bf16 precision policy makes it): the
// tiles come by cp.async straight into a ring of 4 bf16 tiles.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// The outline's launch: the op's two results, then the three workspaces.
// RUN: FileCheck %s --check-prefix=LAUNCH --input-file=%t.mlir
// An f32 cache (the f32 policy) is copied into an f32 staging tile and
// converted into two bf16 tiles.
// RUN: sed -e 's/576xbf16/576xf32/g' %s | k3-opt --k3-select-kernel-config=target=cuda --k3-outline-kernels | FileCheck %s --check-prefix=F32
// Prefill (no k3.decode, T queries) keeps the block per (token, heads).
// RUN: sed -e 's/attributes {k3.decode} //; s/i64: -2, 32, 192/i64: -1, 32, 192/; s/i64: -2, 576/i64: -1, 576/' %s | k3-opt --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=PREFILL
// A prefill's attention of one query a sequence (the last tokens',
// k3-last-token-logits) is a decode step's: split-KV.
// RUN: sed -e 's/attributes {k3.decode} //' %s | k3-opt --k3-select-kernel-config=target=cuda | FileCheck %s --check-prefix=LASTROWS
// Tiles that do not fit the heads are refused with the reason.
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=latent_attention.tile=24x132" 2>&1 | FileCheck %s --check-prefix=BADTILE
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=latent_attention.warps=4" 2>&1 | FileCheck %s --check-prefix=BADWARPS
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: FileCheck %s --check-prefix=PTX --input-file=%t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS
// K3's 96 heads: 32 a block (three head groups), 44 splits of the keys
// (132 blocks over the groups).
// RUN: sed -e 's/x32x/x96x/g; s/num_heads = 32/num_heads = 96/; s/8192x512/24576x512/g; s/-2, 32, /-2, 96, /' %s | k3-opt --k3-select-kernel-config=target=cuda --k3-outline-kernels | FileCheck %s --check-prefix=H96
// 48 heads (not a multiple of 32): 16 a block, 4 warps; through ptxas too.
// RUN: sed -e 's/x32x/x48x/g; s/num_heads = 32/num_heads = 48/; s/8192x512/12288x512/g; s/-2, 32, /-2, 48, /' %s | k3-opt --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.h48.mlir
// RUN: FileCheck %s --check-prefix=H48 --input-file=%t.h48.mlir
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.h48.mlir > %t.h48.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.h48.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.h48.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.h48.bin.mlir > %t.h48.ptx
// RUN: %ptxas -v -arch=sm_90a %t.h48.ptx -o %t.h48.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS48

// BADTILE: error: 'k3.latent_attention' op latent_attention_split tile is [heads per block, a multiple of 16 dividing num_heads = 32; work items aimed at, >= 1; keys a tile, 32 or 64 (32 if absent)]
// BADWARPS: error: 'k3.latent_attention' op latent_attention_split warps must be 4 per 16 heads of a block: 8, got 4

// PREFILL: kernel = latent_attention_rows
// LASTROWS: kernel = latent_attention_split

// LAUNCH: k3.launch @k3_kernels::@latent_attention_0
// LAUNCH-SAME: -> (tensor<?x32x128xbf16>, tensor<?x256x576xbf16>, tensor<?x32x576xbf16>, tensor<132x32x516xf32>, tensor<?x32x516xf32>)

// Phase 0, absorb: a block per (128 latent channels, head, 8 tokens); its
// warps take 32 rows of W_k each, 16 rows' loads at a time, and meet in
// shared memory.
// CHECK-LABEL: gpu.func @latent_attention_0(
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = latent_attention_split, tile = [32, 132], warps = 8, stages = 4>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 128, grid_offset = 896, grid_divisor = 8, block = [128, 1, 1], dynamic_smem = 20480>
// CHECK-SAME: k3.phases = [@latent_attention_0, @latent_attention_0__1, @latent_attention_0__2]
// CHECK-COUNT-16: vector.load {{.*}} : memref<8192x512xbf16>, vector<4xbf16>
// CHECK: gpu.barrier
// CHECK: vector.store {{.*}} {alignment = 8 : i64} : memref<?x32x576xbf16>, vector<4xbf16>
// CHECK-NOT: nvgpu.ldmatrix
// CHECK: gpu.return

// Phase 1, attend: (T + 131) blocks of 8 warps; the queries staged, each
// warp's quarter of them (9 k-steps of 16 channels) held as A fragments
// (the staged queries share the tile ring's shared memory);
// per tile the ring's wait, one barrier, the next tile's copies, the
// partial scores (9 steps x 4 key octets), the quarters summed through
// shared memory (the second barrier), P from the registers, the context on
// the tensor cores.
// CHECK-LABEL: gpu.func @latent_attention_0__1(
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 1, grid_offset = 131, grid_divisor = 1, block = [256, 1, 1], dynamic_smem = 165888>
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?x32x576xbf16>, vector<8xbf16>
// CHECK-COUNT-9: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = false}
// The queries share the ring's bytes: its first copies wait for a barrier.
// CHECK: gpu.barrier
// CHECK: nvgpu.device_async_copy {{.*}} : memref<?x256x576xbf16> to memref<128x584xbf16, #gpu.address_space<workgroup>>
// CHECK: scf.for {{.*}} iter_args
// CHECK: nvgpu.device_async_wait {{.*}} {numGroups = 2 : i32}
// CHECK: gpu.barrier
// CHECK-COUNT-36: k3gpu.mma_sync
// CHECK: gpu.barrier
// CHECK-NOT: gpu.barrier
// CHECK: math.exp2
// CHECK: nvgpu.ldmatrix {{.*}} {numTiles = 4 : i32, transpose = true}
// CHECK-NOT: gpu.barrier
// CHECK: scf.yield
// CHECK: gpu.return

// Phase 2, combine: the splits' maxima and weights reduced over the block,
// 8 partial rows a step, W_v, the cache append.
// CHECK-LABEL: gpu.func @latent_attention_0__2(
// CHECK-SAME: dynamic_smem = 16944
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: math.exp2
// CHECK: gpu.barrier
// CHECK: scf.for {{.*}} step %c8
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: gpu.return

// F32-LABEL: gpu.func @latent_attention_0__1(
// F32-SAME: dynamic_smem = 164864>
// F32: nvgpu.device_async_copy {{.*}} : memref<?x256x576xf32> to memref<32x576xf32, #gpu.address_space<workgroup>>
// F32: scf.for {{.*}} iter_args
// F32: nvgpu.device_async_wait {{.*}} {numGroups = 0 : i32}
// F32: vector.store {{.*}} {alignment = 8 : i64} : memref<64x584xbf16, #gpu.address_space<workgroup>>, vector<4xbf16>
// F32: gpu.barrier

// H96-LABEL: gpu.func @latent_attention_0(
// H96-SAME: k3.kernel_config = #k3.kernel_config<kernel = latent_attention_split, tile = [32, 44], warps = 8, stages = 4>
// H96-LABEL: gpu.func @latent_attention_0__1(
// H96-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 3, grid_offset = 129, grid_divisor = 1, block = [256, 1, 1], dynamic_smem = 165888>
// H96-COUNT-36: k3gpu.mma_sync

// H48-LABEL: gpu.func @latent_attention_0__1(
// H48-SAME: k3.kernel_config = #k3.kernel_config<kernel = latent_attention_split, tile = [16, 44], warps = 4, stages = 4>
// H48-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_seqs, grid_scale = 3, grid_offset = 129, grid_divisor = 1, block = [128, 1, 1], dynamic_smem = 157696>
// H48: scf.for {{.*}} iter_args
// H48: k3gpu.mma_sync

// PTX: .entry latent_attention_0__1(
// PTX: mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// PTX: ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16

// The 16-head block: each of its 128 threads copies 18 vectors a tile
// (the 32-head block's 256 threads 9). Unrolled, their coordinates were
// hoisted out of the key loop and the block spilled (255 registers, 56-60
// bytes of stack with ptxas of CUDA 13.0); as a loop from the thread id
// (forEachVector) it fits without spills (172 registers on 2026-12-05).
// PTXAS48: Function properties for latent_attention_0__1
// PTXAS48-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// PTXAS: Function properties for latent_attention_0__1
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %q: tensor<?x32x192xbf16> {k3.name = "q", k3.dims = array<i64: -2, 32, 192>},
    %lat: tensor<?x576xbf16> {k3.name = "latent", k3.dims = array<i64: -2, 576>},
    %cache: tensor<?x256x576xbf16> {k3.name = "cache", k3.dims = array<i64: -2, 256, 576>},
    %lens: tensor<?xi32> {k3.name = "cache_lens", k3.dims = array<i64: -2>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x32x128xbf16> {k3.name = "o"}, tensor<?x256x576xbf16> {k3.name = "cache_out"}) attributes {k3.decode} {
  %kvb = k3.weight "kv_b" : tensor<8192x512xbf16>
  %o, %c = k3.latent_attention %q, %lat, %kvb cache(%cache, %lens) cu_seqlens(%cu)
      {num_heads = 32 : i64, qk_nope_head_dim = 128 : i64, qk_rope_head_dim = 64 : i64,
        v_head_dim = 128 : i64, kv_lora_rank = 512 : i64, scale = 0.07216878364870322 : f64}
      : (tensor<?x32x192xbf16>, tensor<?x576xbf16>, tensor<8192x512xbf16>, tensor<?x256x576xbf16>,
         tensor<?xi32>, tensor<?xi32>) -> (tensor<?x32x128xbf16>, tensor<?x256x576xbf16>)
  return %o, %c : tensor<?x32x128xbf16>, tensor<?x256x576xbf16>
}
