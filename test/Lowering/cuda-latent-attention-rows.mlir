// REQUIRES: ptxas
// k3.latent_attention with kernel = latent_attention_rows
// (lowering/cuda/LatentAttentionRows.cpp), at Kimi-Linear-48B's sizes (32
// heads, nope 128, rope 64, v 128, kv_lora_rank 512): a block of 8 warps
// per (token, head); the query absorbed into the latent space in shared
// memory, the keys split over the warps with an online softmax each, the
// warps merged in shared memory, a warp per output channel. The cache
// update (old rows copied unless in place, new rows appended) runs in the
// same launch.
// RUN: k3-opt %s --k3-select-kernel-config=target=cuda --k3-outline-kernels -o %t.mlir
// RUN: FileCheck %s --input-file=%t.mlir
// RUN: not k3-opt %s --k3-select-kernel-config="target=cuda override=latent_attention.warps=32" 2>&1 | FileCheck %s --check-prefix=SMEM
// RUN: sed -e '0,/gpu.module/{/gpu.module/!d;s/^/module attributes {gpu.container_module} {\n/}' %t.mlir > %t.gpu.mlir
// RUN: %python -c 'import os,subprocess,sys; e=dict(os.environ, CUDA_HOME=os.path.dirname(os.path.dirname(os.path.realpath(sys.argv[1])))); sys.exit(subprocess.call(sys.argv[2:], env=e))' %ptxas k3-opt %t.gpu.mlir --pass-pipeline='builtin.module(gpu.module(expand-strided-metadata,lower-affine,convert-nvgpu-to-nvvm,convert-k3gpu-to-nvvm,convert-scf-to-cf,convert-gpu-to-nvvm{use-bare-ptr-memref-call-conv=1},convert-nvvm-to-llvm,canonicalize,cse,reconcile-unrealized-casts),gpu-module-to-binary{format=isa})' -o %t.bin.mlir
// RUN: %python -c 'import re,sys; s=open(sys.argv[1]).read(); q=chr(34); a=s.split("assembly = "+q,1)[1].split(q,1)[0]; sys.stdout.write(re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1),16)), a))' %t.bin.mlir > %t.ptx
// RUN: %ptxas -v -arch=sm_90a %t.ptx -o %t.cubin 2>&1 | FileCheck %s --check-prefix=PTXAS

// SMEM: error: 'k3.latent_attention' op latent_attention_rows needs {{[0-9]+}} bytes of shared memory with 32 warps and 4 heads per block (at most 48 KiB)

// A block per (token, 4 heads). Shared memory: 4 x (q (192) + qa (512) +
// ctx (512)) + 8 x (m, l) + 8 x 512 partial sums = 8976 f32 words.
// CHECK-LABEL: gpu.func @latent_attention_0(
// CHECK-SAME: workgroup(%{{.*}} : memref<8976xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64})
// CHECK-SAME: k3.kernel_config = #k3.kernel_config<kernel = latent_attention_rows, tile = [4], warps = 8>
// CHECK-SAME: k3.launch_shape = #k3.launch_shape<grid_symbol = num_tokens, grid_scale = 8, grid_offset = 0, grid_divisor = 1, block = [256, 1, 1]>
// The cache: copied unless the output is the input buffer, then appended.
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: scf.for
// Absorption, then the keys: an online softmax per warp and head (max, sum,
// and 16 channels of the latent sum per lane: 4 x 18 values), each score a
// warp sum.
// CHECK: gpu.barrier
// CHECK: scf.for {{.*}} iter_args({{.*}}) -> ([[F18:f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32]], [[F18]], [[F18]], [[F18]])
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: math.exp
// The warps merged, then a warp per output channel.
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: scf.for
// CHECK-COUNT-5: gpu.shuffle  xor

// PTXAS: Function properties for latent_attention_0
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

func.func @forward(
    %q: tensor<?x32x192xf32> {k3.name = "q", k3.dims = array<i64: -1, 32, 192>},
    %lat: tensor<?x576xf32> {k3.name = "latent", k3.dims = array<i64: -1, 576>},
    %cache: tensor<?x256x576xf32> {k3.name = "cache", k3.dims = array<i64: -2, 256, 576>},
    %lens: tensor<?xi32> {k3.name = "cache_lens", k3.dims = array<i64: -2>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x32x128xf32> {k3.name = "o"}, tensor<?x256x576xf32> {k3.name = "cache_out"}) {
  %kvb = k3.weight "kv_b" : tensor<8192x512xbf16>
  %o, %c = k3.latent_attention %q, %lat, %kvb cache(%cache, %lens) cu_seqlens(%cu)
      {num_heads = 32 : i64, qk_nope_head_dim = 128 : i64, qk_rope_head_dim = 64 : i64,
        v_head_dim = 128 : i64, kv_lora_rank = 512 : i64, scale = 0.07216878364870322 : f64}
      : (tensor<?x32x192xf32>, tensor<?x576xf32>, tensor<8192x512xbf16>, tensor<?x256x576xf32>,
         tensor<?xi32>, tensor<?xi32>) -> (tensor<?x32x128xf32>, tensor<?x256x576xf32>)
  return %o, %c : tensor<?x32x128xf32>, tensor<?x256x576xf32>
}
