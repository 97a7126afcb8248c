// The default tile of the flash MLA prefill follows how long one sequence
// can be (max-tokens / max-seqs): from 8192 tokens on, a producer
// warpgroup and two consumers on [128 queries, 128 keys] with two stages;
// below that, or where the bounds are unknown, [64, 64] with three blocks
// per SM (lowering/KernelConfigRules.cpp, defaultMLAFlashConfig).
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=32768 max-seqs=1" | FileCheck %s --check-prefix=LONG
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=32768 max-seqs=4" | FileCheck %s --check-prefix=LONG
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=32768 max-seqs=8" | FileCheck %s --check-prefix=SHORT
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=4096 max-seqs=1" | FileCheck %s --check-prefix=SHORT
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda" | FileCheck %s --check-prefix=SHORT
// An override still picks any verified tile.
// RUN: k3-opt %s --k3-select-kernel-config="target=cuda max-tokens=32768 max-seqs=1 override=mla_prefill_attention.tile=64x64,mla_prefill_attention.warps=4,mla_prefill_attention.stages=1,mla_prefill_attention.blocks_per_sm=3" | FileCheck %s --check-prefix=SHORT

// LONG-LABEL: func.func @forward(
// LONG: k3.mla_prefill_attention {{.*}}#k3.kernel_config<kernel = mla_flash_wgmma, tile = [128, 128], warps = 12, stages = 2, blocks_per_sm = 1>
// SHORT-LABEL: func.func @forward(
// SHORT: k3.mla_prefill_attention {{.*}}#k3.kernel_config<kernel = mla_flash_wgmma, tile = [64, 64], warps = 4, stages = 1, blocks_per_sm = 3>

func.func @forward(%q: tensor<?x4x192xbf16> {k3.name = "q", k3.dims = array<i64: -1, 4, 192>}, %kv: tensor<?x4x256xbf16> {k3.name = "kv", k3.dims = array<i64: -1, 4, 256>},
                   %lat: tensor<?x576xbf16> {k3.name = "latent", k3.dims = array<i64: -1, 576>}, %g: tensor<?x512xbf16> {k3.name = "gate", k3.dims = array<i64: -1, 512>},
                   %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x4x128xbf16> {k3.name = "o"}) {
  %o = k3.mla_prefill_attention %q, %kv, %lat gate(%g) cu_seqlens(%cu)
      {qk_nope_head_dim = 128 : i64, qk_rope_head_dim = 64 : i64, v_head_dim = 128 : i64, scale = 0.07216878364870323 : f64}
      : (tensor<?x4x192xbf16>, tensor<?x4x256xbf16>, tensor<?x576xbf16>, tensor<?x512xbf16>, tensor<?xi32>) -> tensor<?x4x128xbf16>
  return %o : tensor<?x4x128xbf16>
}
