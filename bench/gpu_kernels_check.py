"""The dedicated CUDA kernels of single ops against float64 / numpy at
awkward shapes (the GPU side of "every lowering is checked against the
oracle"): the GEMV linear (lowering/cuda/LinearGEMV.cpp) with token counts
that are not multiples of its 4-token tile, K with a partial last step,
odd N (one row per warp), f32/bf16 weights and inputs, bf16 output, and
as k3.linear_group over several weights (a KDA layer's six projections,
odd N with mixed result types); the
block-per-row argmax (lowering/cuda/ArgmaxRows.cpp) with ties, rows of
-inf, the maximum in the first or last column, vocabularies smaller than a
block; the latent attention (lowering/cuda/LatentAttentionRows.cpp) at
Kimi-Linear's sizes: decode steps over caches of 0, 17 and 200 rows, a
packed prefill over caches, a prefill without; and in a decode entry the
split-KV kernel (lowering/cuda/LatentAttentionSplit.cpp) on f32 and bf16
caches: empty, nearly full, several new tokens a sequence, 40 and 150
sequences of random lengths, 64 long ones (splits of up to 16 tiles); the
decode step's MoE
(lowering/cuda/MoEGroupedGEMV.cpp) at T = 1, 5 and 64 with one expert in
every token's first slot; the prefill's grouped wgmma GEMMs on bf16
weights in both schedules and the dense GLU in the persistent one
(bench/kernels_check_moe_grouped.py).

    .venv/bin/python bench/gpu_kernels_check.py prepare   # here (k3-opt)
    python3 bench/gpu_kernels_check.py check              # GPU machine
    K3_CHECK_ONLY=linears python3 bench/gpu_kernels_check.py check   # the linear GEMMs alone
    K3_CHECK_ONLY=gemms python3 bench/gpu_kernels_check.py check     # and the MoE grouped GEMMs

Writes bench/results/gpu_kernels_check-<gpu>-<date>.json (a FAILED row per
failed case; exit status 1 if any).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
import protocol  # noqa: E402
import kernels_check_moe_grouped  # noqa: E402

OUT = ROOT / "out" / "kernels_check"
K3OPT = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin")) / "k3-opt"

# (name, N, K, weight dtype, input dtype, output dtype)
LINEARS = (("gemv_f32_n40_k96", 40, 96, "f32", "f32", "f32"),
           ("gemv_bf16w_f32x_n256_k2304", 256, 2304, "bf16", "f32", "f32"),
           ("gemv_bf16_n576_k2304_bf16out", 576, 2304, "bf16", "bf16", "bf16"),
           ("gemv_bf16_n41_k2312", 41, 2312, "bf16", "bf16", "f32"),
           ("gemv_bf16_n4096_k128", 4096, 128, "bf16", "f32", "f32"),
           # K split over 2 and 4 warps (tile [R, TT, S], SPLIT_TILES: an o
           # projection's shape; 40 rows with K's partial last step in the
           # last slice).
           ("gemv_bf16_n2304_k4096_split", 2304, 4096, "bf16", "bf16", "bf16"),
           ("gemv_bf16_n40_k4104_split", 40, 4104, "bf16", "f32", "f32"),
           # The CUDA-core form on bf16 operands (TILES: [2, 4]; their
           # default is the tensor-core form).
           ("gemv_bf16_n576_k2304_cores", 576, 2304, "bf16", "bf16", "bf16"),
           # The tensor-core form (tile R = 16, LinearGEMVMMA.cpp): the
           # default (an o projection: K split over 8 warps), two 8-token
           # mma tiles with K's partial last 32-column step, and a split of
           # 4 whose last slice takes the partial step.
           ("gemv_mma_n2304_k4096", 2304, 4096, "bf16", "bf16", "bf16"),
           ("gemv_mma_n48_k2312_tt16", 48, 2312, "bf16", "bf16", "f32"),
           ("gemv_mma_n256_k2320_s4", 256, 2320, "bf16", "bf16", "f32"),
           # 16 tokens a tile with K split in 4: blocks of at most 8 tokens
           # take the one-mma-tile branch.
           ("gemv_mma_n256_k2320_tt16s4", 256, 2320, "bf16", "bf16", "f32"))
# The prefill default on bf16 inputs (TMA + wgmma) with a partial last
# column tile (N not a multiple of 128) and row counts across its 128-row
# tiles: (name, N, K, w, x, y); kernel as k3-compile chooses it.
WGMMA_LINEARS = (("wgmma_n576_k2304", 576, 2304, "bf16", "bf16", "f32"),
                 ("wgmma_n40_k512_bf16out", 40, 512, "bf16", "bf16", "bf16"),
                 # 16 column tiles of 256: at 1000 tokens more tiles than
                 # SMs, so that a persistent block walks several.
                 ("wgmma_n4096_k512", 4096, 512, "bf16", "bf16", "bf16"))
# k3.linear_group (k3-group-linears, LinearGEMV.cpp): one grid over several
# weights' rows. (name, K, [N...], x dtype, [result dtypes...]): a KDA
# layer's six projections at Kimi-Linear's sizes, and odd N (one row per
# warp) with a partial last K step and mixed result types.
GROUPS = (("group_kda_k2304", 2304, (4096, 4096, 4096, 128, 32, 128), "bf16",
           ("bf16",) * 6),
          ("group_odd_k2312", 2312, (41, 7, 3), "bf16", ("f32", "bf16", "f32")),
          ("group_split_k4096", 4096, (2304, 8), "bf16", ("bf16", "f32")))
GROUP_TOKENS = (1, 5, 64)
# The same op on the wgmma GEMM (a prefill's group on CUDA, k3-group-linears
# prefill=1): every weight's column tiles in one grid, partial last tiles
# (N = 40, 8, 32) and mixed result types, rows across 128-row tiles.
WGMMA_GROUPS = (("wgmma_group_kda_k2304", 2304, (4096, 4096, 4096, 128, 32, 128), "bf16",
                 ("bf16",) * 6),
                ("wgmma_group_mixed_k512", 512, (256, 40, 8), "bf16", ("bf16", "f32", "bf16")))
WGMMA_GROUP_TOKENS = (5, 130, 256)
# The wgmma cases again in the other schedules of linear_tma_wgmma: suffix:
# (overrides, what the row says, the single linears' token counts or None
# for LINEAR_TOKENS at the default max-tokens). N = 576, 40 and the
# groups' 40 and 8 end in partial tiles.
# - _ws: persistent warp-specialised (tile [128, 256, 64]: a block per SM
#   walks the tiles), 4 stages, the consumers write from registers.
# - _wsp: the same in cluster pairs (two row tiles share W's tiles by TMA
#   multicast): one row tile (its partner loads zeros), one pair, 3 and 4
#   pairs at PAIR_TOKENS.
# - _wss: 3 stages: bf16 results through shared memory and TMA stores
#   (linearStoresThroughShared), f32 ones from registers.
# - _w192s: tile [128, 192, 64] (the default where 256-column tiles leave the
#   last wave idle: N = 2304), 4 stages, bf16 results through shared memory.
# - _sk4: [128, 128] tiles with K split over clusters of 4 blocks.
PAIR_TOKENS = (1, 5, 130, 647, 1000)
WS_CONFIG = "kernel-config=" + ",".join(
    f"{op}.kernel=linear_tma_wgmma,{op}.tile=128x256x64,{op}.warps=12,{op}.stages=4,"
    f"{op}.blocks_per_sm=1,{op}.cluster=0" for op in ("linear", "linear_group"))
# (cluster 0: the default of a narrow linear at few tokens splits K over a
# cluster, which the persistent tile does not take.)
PAIRED = "," + ",".join(f"{op}.cluster=2" for op in ("linear", "linear_group"))
# The one-warpgroup tile with K split over a cluster of 4 (LinearWGMMA.cpp):
# K = 2304 and 512 give each block 9 and 2 of the 64-column steps.
SPLIT_K4_CONFIG = "kernel-config=" + ",".join(
    f"{op}.kernel=linear_tma_wgmma,{op}.tile=128x128x64,{op}.warps=4,{op}.stages=4,"
    f"{op}.blocks_per_sm=1,{op}.cluster=4" for op in ("linear", "linear_group"))
SCHEDULES = {
    "_ws": (WS_CONFIG, "128x256 persistent", None),
    "_wsp": (WS_CONFIG + PAIRED, "128x256 persistent, cluster pairs", PAIR_TOKENS),
    "_wss": (WS_CONFIG.replace("stages=4", "stages=3"),
             "128x256 persistent, 3 stages (bf16 results through shared memory and TMA "
             "stores)", PAIR_TOKENS),
    "_w192s": (WS_CONFIG.replace("128x256x64", "128x192x64"),
               "128x192 persistent, 4 stages (bf16 results through shared memory and TMA "
               "stores)", PAIR_TOKENS),
    "_sk4": (SPLIT_K4_CONFIG, "128x128, K split over clusters of 4 (partial tiles summed "
             "through distributed shared memory)", PAIR_TOKENS),
}
SCHEDULE_OF = {c[0] + suffix: suffix for suffix in SCHEDULES
               for c in WGMMA_LINEARS + WGMMA_GROUPS}
SCHEDULE_LINEARS = tuple((c[0] + suffix,) + c[1:] for suffix in SCHEDULES for c in WGMMA_LINEARS)
SCHEDULE_GROUPS = tuple((c[0] + suffix,) + c[1:] for suffix in SCHEDULES for c in WGMMA_GROUPS)
# The wgmma cases' output tiles in bands of 4 row tiles (config raster,
# lowering/cuda/TileRaster.h) in both schedules, at RASTER_TOKENS: 2 row
# tiles (one partial band), 6 (a band and a partial one), 8 (two bands).
RASTER_CONFIGS = {"_r4": "kernel-config=linear.raster=4", "_ws_r4": WS_CONFIG + ",linear.raster=4"}
RASTER_LINEARS = tuple((c[0] + suffix,) + c[1:] for c in WGMMA_LINEARS for suffix in RASTER_CONFIGS)
RASTER_TOKENS = (130, 647, 1000)
# Tiles other than the default (tuning options of linear_gemv) of the cases
# above: split K on the CUDA cores, the CUDA-core form on bf16, and tiles of
# the tensor-core form.
SPLIT_TILES = {"gemv_bf16_n2304_k4096_split": "1x4x2", "gemv_bf16_n40_k4104_split": "1x4x4",
               "group_split_k4096": "1x4x2", "gemv_bf16_n576_k2304_cores": "2x4",
               "gemv_mma_n48_k2312_tt16": "16x16", "gemv_mma_n256_k2320_s4": "16x8x4",
               "gemv_mma_n256_k2320_tt16s4": "16x16x4"}
LINEAR_TOKENS = (1, 3, 5, 17, 64, 130)
VOCABS = (163840, 1000, 7)
ARGMAX_ROWS = 6
LINEAR_MODEL = """func.func @forward(%x: tensor<?x{K}x{X}> {{k3.name = "x", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x{N}x{Y}> {{k3.name = "y"}}) {{
  %w = k3.weight "w" : tensor<{N}x{K}x{W}>
  %y = k3.linear %x, %w : (tensor<?x{K}x{X}>, tensor<{N}x{K}x{W}>) -> tensor<?x{N}x{Y}>
  return %y : tensor<?x{N}x{Y}>
}}
"""


def group_model(k: int, ns, x: str, ys) -> str:
    """A function of one k3.linear_group (bf16 weights w0, w1, ...)."""
    res = [f"tensor<?x{n}x{y}>" for n, y in zip(ns, ys)]
    outs = ", ".join(f'{r} {{k3.name = "y{i}"}}' for i, r in enumerate(res))
    weights = ", ".join(f"tensor<{n}x{k}xbf16>" for n in ns)
    names = ", ".join(f"%y{i}" for i in range(len(ns)))
    lines = [f'func.func @forward(%x: tensor<?x{k}x{x}> {{k3.name = "x", k3.dims = array<i64: -1, {k}>}})',
             f"    -> ({outs}) {{"]
    lines += [f'  %w{i} = k3.weight "w{i}" : tensor<{n}x{k}xbf16>' for i, n in enumerate(ns)]
    lines += [f"  {names} = k3.linear_group %x, {', '.join(f'%w{i}' for i in range(len(ns)))}",
              f"      : (tensor<?x{k}x{x}>, {weights}) -> ({', '.join(res)})",
              f"  return {names} : {', '.join(res)}", "}", ""]
    return "\n".join(lines)


# Gated MLA's latent attention at Kimi-Linear-48B's sizes (32 heads, nope
# 128, rope 64, v 128, kv_lora_rank 512): lowering/cuda/LatentAttentionRows.cpp,
# and in a decode entry (attribute k3.decode) the split-KV kernel
# (lowering/cuda/LatentAttentionSplit.cpp) on an f32 cache (staged and
# converted) and a bf16 one (straight into its ring of tiles).
MLA = dict(H=32, DN=128, DR=64, DV=128, R=512, L=256)
MLA_MODEL = """func.func @forward(
    %q: tensor<?x{H}x{DQ}x{X}> {{k3.name = "q", k3.dims = array<i64: -1, {H}, {DQ}>}},
    %lat: tensor<?x{W}x{X}> {{k3.name = "latent", k3.dims = array<i64: -1, {W}>}},
    %cache: tensor<?x{L}x{W}x{X}> {{k3.name = "cache", k3.dims = array<i64: -2, {L}, {W}>}},
    %lens: tensor<?xi32> {{k3.name = "cache_lens", k3.dims = array<i64: -2>}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<?x{H}x{DV}x{X}> {{k3.name = "o"}}, tensor<?x{L}x{W}x{X}> {{k3.name = "cache_out"}}) {ATTRS}{{
  %kvb = k3.weight "kv_b" : tensor<{KVB}x{R}xbf16>
  %o, %c = k3.latent_attention %q, %lat, %kvb cache(%cache, %lens) cu_seqlens(%cu)
      {{num_heads = {H} : i64, qk_nope_head_dim = {DN} : i64, qk_rope_head_dim = {DR} : i64,
        v_head_dim = {DV} : i64, kv_lora_rank = {R} : i64, scale = {S} : f64}}
      : (tensor<?x{H}x{DQ}x{X}>, tensor<?x{W}x{X}>, tensor<{KVB}x{R}xbf16>, tensor<?x{L}x{W}x{X}>,
         tensor<?xi32>, tensor<?xi32>) -> (tensor<?x{H}x{DV}x{X}>, tensor<?x{L}x{W}x{X}>)
  return %o, %c : tensor<?x{H}x{DV}x{X}>, tensor<?x{L}x{W}x{X}>
}}
"""
# The split kernel's artifacts: (name, element type, cache rows, sequences,
# heads). 48 heads run in blocks of 16 (a tensor-parallel rank's share of
# K3's 96; LatentSplitAttend.cpp copies their tiles in a loop, forEachVector).
MLA_SPLIT = (("mla_split_f32", "f32", 256, 150, 32), ("mla_split_bf16", "bf16", 256, 150, 32),
             ("mla_split_long_f32", "f32", 1024, 64, 32),
             ("mla_split_long_bf16", "bf16", 1024, 64, 32),
             ("mla_split_h48_bf16", "bf16", 256, 150, 48),
             ("mla_split_h48_f32", "f32", 256, 150, 48))
# (name, tokens per sequence, cached tokens per sequence): decode steps,
# a packed prefill over caches, one empty cache, one cache near full.
MLA_CASES = (("mla_decode", [1, 1, 1], [0, 17, 200]),
             ("mla_prefill_cached", [3, 1, 60], [5, 0, 100]),
             ("mla_prefill_fresh", [70, 9], [0, 0]))
# The split kernel's (256 cache rows): one token a sequence over empty,
# short, long and nearly full caches (255 of 256 rows: the new row is the
# last); several tokens a sequence (each attends to the earlier new ones);
# 40 sequences (3 splits each of 132 work items) over random cache lengths;
# 150 sequences, more than the 132 work items (one split each, the
# workspace's second part). With 1024 rows: 64 sequences of 600-1000 cached
# rows, two splits of up to 16 tiles each (the ring of tiles wraps).
MLA_SPLIT_CASES = (("split_decode", [1, 1, 1, 1], [0, 17, 200, 255]),
                   ("split_tokens", [2, 1, 3], [5, 0, 100]),
                   ("split_40_seqs", [1] * 40,
                    [int(x) for x in np.random.default_rng(7).integers(0, 255, 40)]),
                   ("split_150_seqs", [1] * 150,
                    [int(x) for x in np.random.default_rng(8).integers(0, 255, 150)]))
MLA_SPLIT_LONG_CASES = (("split_long_64_seqs", [1] * 64,
                         [int(x) for x in np.random.default_rng(9).integers(600, 1000, 64)]),)
# The expanded MLA prefill as flash attention (lowering/cuda/
# MLAFlashWGMMA.cpp), bf16 operands: Kimi-Linear's head dims with the
# output gate fused and a bf16 output, and a smaller-head shape (Dn = Dr =
# Dv = 64, R = 256) with an f32 output; lengths: one long sequence, the
# awkward packed ones (1, 63..65, not multiples of 64), one token.
FLASH = {"kimi": dict(H=4, DN=128, DR=64, DV=128, R=512, GATE=True, OUT="bf16"),
         "small": dict(H=2, DN=64, DR=64, DV=64, R=256, GATE=False, OUT="f32")}
FLASH_LENGTHS = ([1000], [1, 63, 64, 65, 300, 507], [1], [130, 2])
FLASH_MODEL = """func.func @forward(
    %q: tensor<?x{H}x{DQ}xbf16> {{k3.name = "q", k3.dims = array<i64: -1, {H}, {DQ}>}},
    %kv: tensor<?x{H}x{DKV}xbf16> {{k3.name = "kv", k3.dims = array<i64: -1, {H}, {DKV}>}},
    %lat: tensor<?x{W}xbf16> {{k3.name = "latent", k3.dims = array<i64: -1, {W}>}},{GATE_ARG}
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<?x{H}x{DV}x{OUT}> {{k3.name = "o"}}) {{
  %o = k3.mla_prefill_attention %q, %kv, %lat{GATE_USE} cu_seqlens(%cu)
      {{qk_nope_head_dim = {DN} : i64, qk_rope_head_dim = {DR} : i64, v_head_dim = {DV} : i64, scale = {S} : f64}}
      : (tensor<?x{H}x{DQ}xbf16>, tensor<?x{H}x{DKV}xbf16>, tensor<?x{W}xbf16>,{GATE_TYPE} tensor<?xi32>)
      -> tensor<?x{H}x{DV}x{OUT}>
  return %o : tensor<?x{H}x{DV}x{OUT}>
}}
"""


def flash_model(c: dict) -> str:
    g = c["GATE"]
    return FLASH_MODEL.format(
        H=c["H"], DQ=c["DN"] + c["DR"], DKV=c["DN"] + c["DV"], W=c["R"] + c["DR"], DV=c["DV"],
        DN=c["DN"], DR=c["DR"], OUT=c["OUT"], S=(c["DN"] + c["DR"]) ** -0.5,
        GATE_ARG=(f'\n    %g: tensor<?x{c["H"] * c["DV"]}xbf16> {{k3.name = "gate", '
                  f'k3.dims = array<i64: -1, {c["H"] * c["DV"]}>}},') if g else "",
        GATE_USE=" gate(%g)" if g else "",
        GATE_TYPE=f' tensor<?x{c["H"] * c["DV"]}xbf16>,' if g else "")


def flash_reference(q, kv, lat, gate, cu, c) -> np.ndarray:
    """Float64 causal attention per sequence on the expanded keys [kv_nope |
    k_pe] and values kv[..., Dn:], times sigmoid(gate): naive, per head."""
    dn, dr, dv, r = c["DN"], c["DR"], c["DV"], c["R"]
    scale = (dn + dr) ** -0.5
    T, H = q.shape[0], q.shape[1]
    out = np.zeros((T, H, dv))
    for n in range(len(cu) - 1):
        a, b = int(cu[n]), int(cu[n + 1])
        for h in range(H):
            k = np.concatenate([kv[a:b, h, :dn], lat[a:b, r:]], axis=1)
            s = q[a:b, h] @ k.T * scale
            s = np.where(np.tril(np.ones((b - a, b - a), bool)), s, -np.inf)
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[a:b, h] = (p / p.sum(axis=1, keepdims=True)) @ kv[a:b, h, dn:]
    if gate is not None:
        out = out * (1.0 / (1.0 + np.exp(-gate.reshape(T, H, dv))))
    return out


# RMSNorm rows (lowering/cuda/RMSNormRows.cpp): f32 rows, and the fused
# residual add with bf16 operands (the sum stored in bf16, normalised as
# stored); hidden sizes of both models and one below a block's threads.
NORM_WIDTHS = (2304, 7168, 100)
NORM_MODEL = """func.func @forward(
    %x: tensor<?x{N}xf32> {{k3.name = "x", k3.dims = array<i64: -1, {N}>}},
    %h: tensor<?x{N}xbf16> {{k3.name = "h", k3.dims = array<i64: -1, {N}>}},
    %r: tensor<?x{N}xbf16> {{k3.name = "r", k3.dims = array<i64: -1, {N}>}})
    -> (tensor<?x{N}xf32> {{k3.name = "y"}}, tensor<?x{N}xbf16> {{k3.name = "s"}},
        tensor<?x{N}xf32> {{k3.name = "z"}}) {{
  %w = k3.weight "w" : tensor<{N}xbf16>
  %y = k3.rms_norm %x, %w {{epsilon = 1.0e-6 : f64}} : (tensor<?x{N}xf32>, tensor<{N}xbf16>) -> tensor<?x{N}xf32>
  %s, %z = k3.add_rms_norm %h, %r, %w {{epsilon = 1.0e-5 : f64}}
      : (tensor<?x{N}xbf16>, tensor<?x{N}xbf16>, tensor<{N}xbf16>) -> (tensor<?x{N}xbf16>, tensor<?x{N}xf32>)
  return %y, %s, %z : tensor<?x{N}xf32>, tensor<?x{N}xbf16>, tensor<?x{N}xf32>
}}
"""
# KDA's gated output norm by rows (RMSNormRows.cpp): heads of 128 channels
# (Kimi Linear) and of 100 (a block with idle lanes), f32.
GATED_NORM_SHAPES = ((32, 128), (3, 100))
GATED_NORM_MODEL = """func.func @forward(
    %o: tensor<?x{H}x{D}xf32> {{k3.name = "o", k3.dims = array<i64: -1, {H}, {D}>}},
    %g: tensor<?x{H}x{D}xf32> {{k3.name = "g", k3.dims = array<i64: -1, {H}, {D}>}})
    -> (tensor<?x{H}x{D}xf32> {{k3.name = "y"}}) {{
  %w = k3.weight "w" : tensor<{D}xf32>
  %y = k3.gated_rms_norm %o, %g, %w {{epsilon = 1.0e-5 : f64}}
      : (tensor<?x{H}x{D}xf32>, tensor<?x{H}x{D}xf32>, tensor<{D}xf32>) -> tensor<?x{H}x{D}xf32>
  return %y : tensor<?x{H}x{D}xf32>
}}
"""
# MLA's latent [c_kv | k_pe] by rows (k3.partial_rms_norm, RMSNormRows.cpp):
# Kimi Linear's 512 + 64 in bf16, and 100 + 28 in f32 (rows of 128: 4
# columns a lane, the split inside a lane's columns).
PARTIAL_NORM_SHAPES = (("bf16", 512, 64), ("f32", 100, 28))
PARTIAL_NORM_MODEL = """func.func @forward(
    %x: tensor<?x{N}x{X}> {{k3.name = "x", k3.dims = array<i64: -1, {N}>}})
    -> (tensor<?x{N}x{X}> {{k3.name = "y"}}) {{
  %w = k3.weight "w" : tensor<{R}xbf16>
  %y = k3.partial_rms_norm %x, %w {{epsilon = 1.0e-6 : f64}} : (tensor<?x{N}x{X}>, tensor<{R}xbf16>) -> tensor<?x{N}x{X}>
  return %y : tensor<?x{N}x{X}>
}}
"""
# The short convolution by channels (ShortConvRows.cpp): Kimi Linear's 4096
# bf16 channels and 40 f32 ones (one block, idle threads), kernel 4, with
# carried states and packed sequences: empty ones, shorter than the
# kernel, crossing 16-token tiles.
# 4096, 40 and 36 channels take the 4-channels-a-thread form (8- or 16-byte
# vectors; 36 bf16 channels: rows 8-byte aligned only), 42 a channel a thread.
SHORT_CONV_SHAPES = (("bf16", 4096), ("f32", 40), ("bf16", 36), ("bf16", 42))
SHORT_CONV_LENS = ([1], [37], [1, 2, 0, 17, 40, 3], [0, 5, 0], [250], [120, 5, 111])
SHORT_CONV_MODEL = """func.func @forward(
    %x: tensor<?x{C}x{X}> {{k3.name = "x", k3.dims = array<i64: -1, {C}>}},
    %s: tensor<?x{C}x3xf32> {{k3.name = "s", k3.dims = array<i64: -2, {C}, 3>}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<?x{C}x{X}> {{k3.name = "y"}}, tensor<?x{C}x3xf32> {{k3.name = "fs"}}) {{
  %w = k3.weight "w" : tensor<{C}x1x4xf32>
  %y, %fs = k3.short_conv %x, %w state(%s) cu_seqlens(%cu) {{kernel_size = 4 : i64}}
      : (tensor<?x{C}x{X}>, tensor<{C}x1x4xf32>, tensor<?x{C}x3xf32>, tensor<?xi32>)
      -> (tensor<?x{C}x{X}>, tensor<?x{C}x3xf32>)
  return %y, %fs : tensor<?x{C}x{X}>, tensor<?x{C}x3xf32>
}}
"""
# A decode step's k3.short_conv_group (ShortConvRows.cpp's decode form, a
# thread per sequence and channel, members' channel blocks end to end):
# Kimi Linear's 4096 bf16 channels beside 40 f32 ones (a partial block), in
# a function marked k3.decode; sequences of one token or none.
SHORT_CONV_GROUP_LENS = ([1], [1, 0, 1, 1], [0, 0, 1], [1] * 8)
SHORT_CONV_GROUP_MODEL = """func.func @forward(
    %x: tensor<?x4096xbf16> {k3.name = "x", k3.dims = array<i64: -1, 4096>},
    %xs: tensor<?x40xf32> {k3.name = "xs", k3.dims = array<i64: -1, 40>},
    %s: tensor<?x4096x3xf32> {k3.name = "s", k3.dims = array<i64: -2, 4096, 3>},
    %ss: tensor<?x40x3xf32> {k3.name = "ss", k3.dims = array<i64: -2, 40, 3>},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<?x4096xbf16> {k3.name = "y"}, tensor<?x40xf32> {k3.name = "ys"},
        tensor<?x4096x3xf32> {k3.name = "fs"}, tensor<?x40x3xf32> {k3.name = "fss"})
    attributes {k3.decode} {
  %w = k3.weight "w" : tensor<4096x1x4xf32>
  %ws = k3.weight "ws" : tensor<40x1x4xf32>
  %y:2, %f:2 = k3.short_conv_group(%x, %xs) weights(%w, %ws) state(%s, %ss) cu_seqlens(%cu)
      {kernel_size = 4 : i64}
      : (tensor<?x4096xbf16>, tensor<?x40xf32>, tensor<4096x1x4xf32>, tensor<40x1x4xf32>,
         tensor<?x4096x3xf32>, tensor<?x40x3xf32>, tensor<?xi32>)
      -> (tensor<?x4096xbf16>, tensor<?x40xf32>, tensor<?x4096x3xf32>, tensor<?x40x3xf32>)
  return %y#0, %y#1, %f#0, %f#1
      : tensor<?x4096xbf16>, tensor<?x40xf32>, tensor<?x4096x3xf32>, tensor<?x40x3xf32>
}
"""
# The router (lowering/cuda/MoERouterRows.cpp: the tensor-core scores for the
# bf16 one by default, and the rows kernel, a block per 8 tokens): Kimi-
# Linear's (256 experts top-8, sigmoid, correction bias, renormalised,
# scaled 2.446, bf16 x and weight), a softmax one at awkward sizes (40
# experts: 2 per lane, one half empty; hidden 200; f32), and K3's (896
# experts top-16, 28 per lane, sigmoid, correction bias, renormalised,
# hidden 7168, bf16). Group-limited routing (docs/moe.md, "Grouped top-k")
# on the first two's inputs: DeepSeek-V3's shape (256 experts in 8 groups,
# topk_group 4, top-8, bias: groups scored by their two best) and the
# softmax one in 4 groups of 10, topk_group 2, top-6, no bias (groups
# scored by their best; group 3 spans lanes 30, 31 of slot 0 and 0-7 of
# slot 1).
ROUTER_MODEL = """func.func @forward(%x: tensor<?x2304xbf16> {k3.name = "x", k3.dims = array<i64: -1, 2304>},
    %xs: tensor<?x200xf32> {k3.name = "xs", k3.dims = array<i64: -1, 200>},
    %xk: tensor<?x7168xbf16> {k3.name = "xk", k3.dims = array<i64: -1, 7168>})
    -> (tensor<?x8xi32> {k3.name = "i"}, tensor<?x8xf32> {k3.name = "w"},
        tensor<?x6xi32> {k3.name = "is"}, tensor<?x6xf32> {k3.name = "ws"},
        tensor<?x16xi32> {k3.name = "ik"}, tensor<?x16xf32> {k3.name = "wk"},
        tensor<?x8xi32> {k3.name = "ig"}, tensor<?x8xf32> {k3.name = "wg"},
        tensor<?x6xi32> {k3.name = "isg"}, tensor<?x6xf32> {k3.name = "wsg"}) {
  %wr = k3.weight "wr" : tensor<256x2304xbf16>
  %bias = k3.weight "bias" : tensor<256xf32>
  %i, %w = k3.moe_router sigmoid %x, %wr bias(%bias) {top_k = 8 : i64, renormalize, routed_scaling_factor = 2.446 : f64}
      : (tensor<?x2304xbf16>, tensor<256x2304xbf16>, tensor<256xf32>) -> (tensor<?x8xi32>, tensor<?x8xf32>)
  %wrs = k3.weight "wrs" : tensor<40x200xf32>
  %is, %ws = k3.moe_router softmax %xs, %wrs {top_k = 6 : i64, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x200xf32>, tensor<40x200xf32>) -> (tensor<?x6xi32>, tensor<?x6xf32>)
  %wrk = k3.weight "wrk" : tensor<896x7168xbf16>
  %biask = k3.weight "biask" : tensor<896xf32>
  %ik, %wk = k3.moe_router sigmoid %xk, %wrk bias(%biask) {top_k = 16 : i64, renormalize, routed_scaling_factor = 1.0 : f64}
      : (tensor<?x7168xbf16>, tensor<896x7168xbf16>, tensor<896xf32>) -> (tensor<?x16xi32>, tensor<?x16xf32>)
  %ig, %wg = k3.moe_router sigmoid %x, %wr bias(%bias) {top_k = 8 : i64, renormalize, routed_scaling_factor = 2.5 : f64, n_group = 8 : i64, topk_group = 4 : i64}
      : (tensor<?x2304xbf16>, tensor<256x2304xbf16>, tensor<256xf32>) -> (tensor<?x8xi32>, tensor<?x8xf32>)
  %isg, %wsg = k3.moe_router softmax %xs, %wrs {top_k = 6 : i64, renormalize, routed_scaling_factor = 1.0 : f64, n_group = 4 : i64, topk_group = 2 : i64}
      : (tensor<?x200xf32>, tensor<40x200xf32>) -> (tensor<?x6xi32>, tensor<?x6xf32>)
  return %i, %w, %is, %ws, %ik, %wk, %ig, %wg, %isg, %wsg : tensor<?x8xi32>, tensor<?x8xf32>, tensor<?x6xi32>, tensor<?x6xf32>,
      tensor<?x16xi32>, tensor<?x16xf32>, tensor<?x8xi32>, tensor<?x8xf32>, tensor<?x6xi32>, tensor<?x6xf32>
}
"""
# The decode step's MoE (lowering/cuda/MoEGroupedGEMV.cpp): k3.moe_experts in
# an entry marked k3.decode (k3-moe-grouped's 4-row tiles, then the
# moe_grouped_gemv kernels) and the shared expert's k3.glu_gate_up (glu_gemv),
# bf16, 16 experts top-4, D 520 and I 136 (K with a partial last 256-element
# step in both GEMMs).
MOE_DECODE = dict(E=16, K=4, D=520, I=136)
# The same on the tensor cores (bf16, every N a multiple of 16: tile R =
# 16, WarpMMADots.h): D 528 and I 144, K's partial last 32-column step in
# both GEMMs, K split over 8 (gate/up) and 4 (down) warps by default.
MOE_DECODE_MMA = dict(E=16, K=4, D=528, I=144)
# (name prefix, shape) of the decode MoE checks.
MOE_DECODE_FORMS = (("moe_decode", MOE_DECODE), ("moe_decode_mma", MOE_DECODE_MMA))
MOE_DECODE_MODEL = """func.func @forward(%x: tensor<?x{D}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %idx: tensor<?x{K}xi32> {{k3.name = "idx", k3.dims = array<i64: -1, {K}>}},
    %wts: tensor<?x{K}xf32> {{k3.name = "wts", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x{D}xbf16> {{k3.name = "y"}}, tensor<?x{I}xbf16> {{k3.name = "h"}}) attributes {{k3.decode}} {{
  %w1 = k3.weight "w1" : tensor<{E}x{I}x{D}xbf16>
  %w3 = k3.weight "w3" : tensor<{E}x{I}x{D}xbf16>
  %w2 = k3.weight "w2" : tensor<{E}x{D}x{I}xbf16>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x{D}xbf16>, tensor<?x{K}xi32>, tensor<?x{K}xf32>, tensor<{E}x{I}x{D}xbf16>,
         tensor<{E}x{I}x{D}xbf16>, tensor<{E}x{D}x{I}xbf16>) -> tensor<?x{D}xbf16>
  %sg = k3.weight "sg" : tensor<{I}x{D}xbf16>
  %su = k3.weight "su" : tensor<{I}x{D}xbf16>
  %h = k3.glu_gate_up silu %x, %sg, %su
      : (tensor<?x{D}xbf16>, tensor<{I}x{D}xbf16>, tensor<{I}x{D}xbf16>) -> tensor<?x{I}xbf16>
  return %y, %h : tensor<?x{D}xbf16>, tensor<?x{I}xbf16>
}}
"""
# The same layer as the model runs it: the shared expert a k3.glu_mlp added
# to the routed experts' output, which k3-fuse-shared-expert folds into the
# grouped GEMVs (rows T K + t, weight one) and their combine.
MOE_DECODE_SHARED_MODEL = """func.func @forward(%x: tensor<?x{D}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %idx: tensor<?x{K}xi32> {{k3.name = "idx", k3.dims = array<i64: -1, {K}>}},
    %wts: tensor<?x{K}xf32> {{k3.name = "wts", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x{D}xbf16> {{k3.name = "y"}}) attributes {{k3.decode}} {{
  %w1 = k3.weight "w1" : tensor<{E}x{I}x{D}xbf16>
  %w3 = k3.weight "w3" : tensor<{E}x{I}x{D}xbf16>
  %w2 = k3.weight "w2" : tensor<{E}x{D}x{I}xbf16>
  %r = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x{D}xbf16>, tensor<?x{K}xi32>, tensor<?x{K}xf32>, tensor<{E}x{I}x{D}xbf16>,
         tensor<{E}x{I}x{D}xbf16>, tensor<{E}x{D}x{I}xbf16>) -> tensor<?x{D}xbf16>
  %sg = k3.weight "sg" : tensor<{I}x{D}xbf16>
  %su = k3.weight "su" : tensor<{I}x{D}xbf16>
  %sd = k3.weight "sd" : tensor<{D}x{I}xbf16>
  %s = k3.glu_mlp silu %x, %sg, %su, %sd
      : (tensor<?x{D}xbf16>, tensor<{I}x{D}xbf16>, tensor<{I}x{D}xbf16>, tensor<{D}x{I}xbf16>) -> tensor<?x{D}xbf16>
  %y = k3.add %r, %s : tensor<?x{D}xbf16>
  return %y : tensor<?x{D}xbf16>
}}
"""
# The MoE layer's output into the next layer's pre-norm residual add: the
# pipeline's fusions make the combine, the add and the RMSNorm one
# k3.moe_combine_add_rms_norm (k3-fuse-combine-rms-norm), with the shared
# expert in the grouped GEMVs' rows (ATTRS = the decode entry's k3.decode)
# or as the combine's addend (the prefill's).
MOE_NORM_MODEL = """func.func @forward(%x: tensor<?x{D}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %idx: tensor<?x{K}xi32> {{k3.name = "idx", k3.dims = array<i64: -1, {K}>}},
    %wts: tensor<?x{K}xf32> {{k3.name = "wts", k3.dims = array<i64: -1, {K}>}},
    %res: tensor<?x{D}xbf16> {{k3.name = "res", k3.dims = array<i64: -1, {D}>}})
    -> (tensor<?x{D}xbf16> {{k3.name = "h"}}, tensor<?x{D}xbf16> {{k3.name = "n"}}) {ATTRS} {{
""" + MOE_DECODE_SHARED_MODEL.split("{{\n", 1)[1].split("  %y = k3.add", 1)[0] + """  %m = k3.add %r, %s : tensor<?x{D}xbf16>
  %h = k3.add %res, %m : tensor<?x{D}xbf16>
  %nw = k3.weight "nw" : tensor<{D}xbf16>
  %n = k3.rms_norm %h, %nw {{epsilon = 1.0e-5 : f64}} : (tensor<?x{D}xbf16>, tensor<{D}xbf16>) -> tensor<?x{D}xbf16>
  return %h, %n : tensor<?x{D}xbf16>, tensor<?x{D}xbf16>
}}
"""
MOE_NORM_FORMS = {"decode": "attributes {k3.decode}", "prefill": ""}
# MXFP4 routed experts (f4E2M1FN, docs/mxfp4.md): the decode step's
# moe_grouped_gemv (k3.decode: LaneDots' MXFP4 form) and the prefill's loop
# nest (WeightElements), 16 experts top-4, D 544 and I 160 (whole 32-element
# scale blocks, K shorter than one 1024-element step: only a partial step).
MOE_MXFP4 = dict(E=16, K=4, D=544, I=160)
# k3.moe_experts over k3.weight experts of element type W (f4E2M1FN, bf16).
MOE_EXPERTS_MODEL = """func.func @forward(%x: tensor<?x{D}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %idx: tensor<?x{K}xi32> {{k3.name = "idx", k3.dims = array<i64: -1, {K}>}},
    %wts: tensor<?x{K}xf32> {{k3.name = "wts", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x{D}xbf16> {{k3.name = "y"}}) {ATTRS} {{
  %w1 = k3.weight "w1" : tensor<{E}x{I}x{D}x{W}>
  %w3 = k3.weight "w3" : tensor<{E}x{I}x{D}x{W}>
  %w2 = k3.weight "w2" : tensor<{E}x{D}x{I}x{W}>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x{D}xbf16>, tensor<?x{K}xi32>, tensor<?x{K}xf32>, tensor<{E}x{I}x{D}x{W}>,
         tensor<{E}x{I}x{D}x{W}>, tensor<{E}x{D}x{I}x{W}>) -> tensor<?x{D}xbf16>
  return %y : tensor<?x{D}xbf16>
}}
"""
MOE_MXFP4_MODEL = MOE_EXPERTS_MODEL.replace("{W}", "f4E2M1FN")
MOE_MXFP4_FORMS = {"decode": "attributes {k3.decode}", "prefill": ""}
# The prefill's tensor-core form (moe_grouped_wgmma with MXFP4 tiles
# decoded in shared memory, lowering/cuda/MXFP4Tile.h) needs whole 64-wide
# k-steps: D 384 (rows' scales 4-byte aligned), I 192 (every other row's
# scales start mid-word). Its weights come three times: normal values; W1/W3
# with tiny scales (E8M0 0..3: products that are bf16 subnormals) against
# x scaled by 2^120; W1/W3 with large ones (E8M0 129..131: the decode's
# two-multiply path, 2^(s - 1) past bf16) against x scaled by 2^-8.
MOE_MXFP4_WGMMA = dict(E=16, K=4, D=384, I=192)
MXFP4_TINY_X_SCALE = 2.0 ** 120
MXFP4_BIG_X_SCALE = 2.0 ** -8
ARGMAX_MODEL = """func.func @forward(%l: tensor<?x{V}xf32> {{k3.name = "l", k3.dims = array<i64: -1, {V}>}})
    -> (tensor<?xi32> {{k3.name = "a"}}) {{
  %a = k3.argmax %l : (tensor<?x{V}xf32>) -> tensor<?xi32>
  return %a : tensor<?xi32>
}}
"""


def compile_model(name: str, text: str, extra: str, max_tokens: int = 256,
                  max_seqs: int = 4) -> None:
    src = OUT / f"{name}.mlir"
    src.write_text(text)
    opts = (f"target=cuda output={OUT / name}.k3bin max-tokens={max_tokens} "
            f"max-seqs={max_seqs} decode-entry=0 {extra}")
    subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o", os.devnull], check=True)


def prepare() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, n, k, w, x, y in LINEARS:
        tile = f",linear.tile={SPLIT_TILES[name]}" if name in SPLIT_TILES else ""
        compile_model(name, LINEAR_MODEL.format(N=n, K=k, W=w, X=x, Y=y),
                      "kernel-config=linear.kernel=linear_gemv" + tile)
    for name, n, k, w, x, y in WGMMA_LINEARS:
        compile_model(name, LINEAR_MODEL.format(N=n, K=k, W=w, X=x, Y=y), "")
    for name, n, k, w, x, y in SCHEDULE_LINEARS:
        config, _, tokens = SCHEDULES[SCHEDULE_OF[name]]
        compile_model(name, LINEAR_MODEL.format(N=n, K=k, W=w, X=x, Y=y), config,
                      **({"max_tokens": max(tokens)} if tokens else {}))
    for name, n, k, w, x, y in RASTER_LINEARS:
        extra = next(v for suffix, v in RASTER_CONFIGS.items() if name.endswith(suffix))
        compile_model(name, LINEAR_MODEL.format(N=n, K=k, W=w, X=x, Y=y), extra,
                      max_tokens=max(RASTER_TOKENS))
    for name, k, ns, x, ys in GROUPS:
        tile = f",linear_group.tile={SPLIT_TILES[name]}" if name in SPLIT_TILES else ""
        compile_model(name, group_model(k, ns, x, ys), "kernel-config=linear_group.kernel=linear_gemv" + tile)
    for name, k, ns, x, ys in WGMMA_GROUPS:
        compile_model(name, group_model(k, ns, x, ys), "")
    for name, k, ns, x, ys in SCHEDULE_GROUPS:
        compile_model(name, group_model(k, ns, x, ys), SCHEDULES[SCHEDULE_OF[name]][0])
    for v in VOCABS:
        compile_model(f"argmax_v{v}", ARGMAX_MODEL.format(V=v), "")
    for n in NORM_WIDTHS:
        compile_model(f"norm_n{n}", NORM_MODEL.format(N=n), "")
    for h, d in GATED_NORM_SHAPES:
        compile_model(f"gated_norm_h{h}_d{d}", GATED_NORM_MODEL.format(H=h, D=d), "")
    for dt, r, rest in PARTIAL_NORM_SHAPES:
        compile_model(f"partial_norm_{dt}_r{r}", PARTIAL_NORM_MODEL.format(N=r + rest, R=r, X=dt), "")
    for dt, c in SHORT_CONV_SHAPES:
        compile_model(f"short_conv_{dt}_c{c}", SHORT_CONV_MODEL.format(C=c, X=dt), "", max_seqs=8)
    compile_model("short_conv_group", SHORT_CONV_GROUP_MODEL, "", max_seqs=8)
    # The default (k3-split-router: the logits by the linear's kernels, then
    # moe_topk_rows), the same with the decode entry's GEMV for the logits,
    # and the fused router's two kernels (split-router=0).
    for art, extra in ROUTER_VARIANTS.values():
        compile_model(art, ROUTER_MODEL, extra)
    for name, c in MOE_DECODE_FORMS:
        compile_model(name, MOE_DECODE_MODEL.format(**c), "", max_tokens=64, max_seqs=64)
        compile_model(f"{name}_shared", MOE_DECODE_SHARED_MODEL.format(**c), "fuse-shared-expert=1",
                  max_tokens=64,
                  max_seqs=64)
    for form, attrs in MOE_NORM_FORMS.items():
        compile_model(f"moe_norm_{form}", MOE_NORM_MODEL.format(ATTRS=attrs, **MOE_DECODE_MMA), "",
                      max_tokens=64, max_seqs=64)
        # The case checks the fused op: it must be what the artifact launches.
        plan = subprocess.run([str(K3OPT.parent / "k3-run"), str(OUT / f"moe_norm_{form}.k3bin"),
                               "--plan"], check=True, capture_output=True, text=True).stdout
        if "moe_combine_add_rms_norm" not in plan:
            raise RuntimeError(f"moe_norm_{form}: no k3.moe_combine_add_rms_norm launch:\n{plan}")
    for form, attrs in MOE_MXFP4_FORMS.items():
        compile_model(f"moe_mxfp4_{form}", MOE_MXFP4_MODEL.format(ATTRS=attrs, **MOE_MXFP4), "",
                      max_tokens=256, max_seqs=256)
    compile_model("moe_mxfp4_wgmma", MOE_MXFP4_MODEL.format(ATTRS="", **MOE_MXFP4_WGMMA), "",
                  max_tokens=1024, max_seqs=1)
    prepare_mxfp4_weights()
    kernels_check_moe_grouped.prepare(OUT, compile_model, moe_decode_routing,
                                      MOE_EXPERTS_MODEL)
    for name, c in FLASH.items():
        compile_model(f"flash_{name}", flash_model(c), "", max_tokens=1100, max_seqs=8)
    m = MLA
    dims = dict(H=m["H"], DQ=m["DN"] + m["DR"], W=m["R"] + m["DR"], L=m["L"], DV=m["DV"],
                DN=m["DN"], DR=m["DR"], R=m["R"], KVB=m["H"] * (m["DN"] + m["DV"]),
                S=(m["DN"] + m["DR"]) ** -0.5)
    compile_model("mla", MLA_MODEL.format(X="f32", ATTRS="", **dims), "mla-expand=0")
    for name, x, rows, seqs, heads in MLA_SPLIT:
        compile_model(name, MLA_MODEL.format(X=x, ATTRS="attributes {k3.decode} ",
                                             **dict(dims, L=rows, H=heads,
                                                    KVB=heads * (m["DN"] + m["DV"]))),
                      "mla-expand=0", max_tokens=seqs, max_seqs=seqs)
    # A small Kimi-Linear (4 layers, 16 experts) for up to 4 sequences: its
    # decode entry (grouped GEMVs, in-place state updates) under
    # compute-sanitizer through k3-run's generation.
    src = OUT / "decode_small.mlir"
    subprocess.run([str(K3OPT.parent / "k3-import"), str(ROOT / "bench/configs/kl-scaled-e16.json"),
                    "--max-context", "64", "-o", str(src)], check=True)
    subprocess.run([str(K3OPT), str(src), f"--k3-compile=target=cuda output={OUT / 'decode_small.k3bin'} "
                    "max-tokens=64 max-seqs=4 activation-dtype=bf16", "-o", os.devnull], check=True)
    # Inputs for compute-sanitizer runs through k3-run (--random-weights):
    # f32 x of 5 tokens (not a multiple of the 4-token tile), 6 argmax rows.
    from safetensors.numpy import save_file
    rng = np.random.default_rng(1)
    for name, n, k, w, x, y in LINEARS:
        if x == "f32":
            save_file({"x": rng.standard_normal((5, k)).astype(np.float32)},
                      str(OUT / f"in_{name}.safetensors"))
    save_file({"l": argmax_rows(163840, rng)}, str(OUT / "in_argmax_v163840.safetensors"))
    save_bf16(OUT / "in_group_odd_k2312.safetensors", "x", rng.standard_normal((5, 2312)))
    # The tensor-core GEMV: 17 tokens (three 8-token mma tiles, a partial
    # last one), K's partial last step, split K.
    for name in ("gemv_mma_n48_k2312_tt16", "gemv_mma_n256_k2320_s4", "gemv_mma_n256_k2320_tt16s4"):
        k = next(c[2] for c in LINEARS if c[0] == name)
        save_bf16(OUT / f"in_{name}.safetensors", "x", rng.standard_normal((17, k)))
    # The persistent wgmma schedule: 200 tokens (a partial second row tile),
    # N = 576 (a partial third column tile), and the mixed group.
    save_bf16(OUT / "in_wgmma_n576_k2304_ws.safetensors", "x", rng.standard_normal((200, 2304)))
    save_bf16(OUT / "in_wgmma_group_mixed_k512_ws.safetensors", "x",
              rng.standard_normal((200, 512)))
    # Tiles in bands of 4 row tiles, both schedules: 647 tokens (6 row
    # tiles: a whole band and a partial one).
    for name in ("wgmma_n576_k2304_r4", "wgmma_n576_k2304_ws_r4"):
        save_bf16(OUT / f"in_{name}.safetensors", "x", rng.standard_normal((647, 2304)))
    # The short convolution over packed sequences (an empty one, ones
    # shorter than the kernel, ones crossing tiles) and the gated norm.
    lens = [1, 2, 0, 17, 40, 3]
    save_file({"x": rng.standard_normal((sum(lens), 40)).astype(np.float32),
               "s": rng.standard_normal((len(lens), 40, 3)).astype(np.float32),
               "cu_seqlens": np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)},
              str(OUT / "in_short_conv_f32_c40.safetensors"))
    # The routers at 37 tokens (a partly filled last block): bf16 x and xk,
    # f32 xs.
    import json
    xb = (rng.standard_normal((37, 2304)).astype(np.float32).view(np.uint32) >> 16).astype("<u2")
    xs = rng.standard_normal((37, 200)).astype(np.float32)
    xk = (rng.standard_normal((37, 7168)).astype(np.float32).view(np.uint32) >> 16).astype("<u2")
    o1, o2 = xb.nbytes, xb.nbytes + xs.nbytes
    header = json.dumps({"x": {"dtype": "BF16", "shape": [37, 2304], "data_offsets": [0, o1]},
                         "xs": {"dtype": "F32", "shape": [37, 200], "data_offsets": [o1, o2]},
                         "xk": {"dtype": "BF16", "shape": [37, 7168],
                                "data_offsets": [o2, o2 + xk.nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(OUT / "in_router.safetensors", "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + xb.tobytes() + xs.tobytes() + xk.tobytes())
    save_file({"o": rng.standard_normal((7, 32, 128)).astype(np.float32),
               "g": rng.standard_normal((7, 32, 128)).astype(np.float32)},
              str(OUT / "in_gated_norm_h32_d128.safetensors"))
    w = MLA["R"] + MLA["DR"]  # one sequence: 5 new tokens over 7 cached
    save_file({"q": rng.standard_normal((5, MLA["H"], MLA["DN"] + MLA["DR"])).astype(np.float32),
               "latent": rng.standard_normal((5, w)).astype(np.float32),
               "cache": rng.standard_normal((1, MLA["L"], w)).astype(np.float32),
               "cache_lens": np.asarray([7], np.int32), "cu_seqlens": np.asarray([0, 5], np.int32)},
              str(OUT / "in_mla.safetensors"))
    # The flash kernel under compute-sanitizer: Kimi's dims, one sequence of
    # 200 tokens (not a multiple of the 64-token tiles).
    import ml_dtypes
    c = FLASH["kimi"]
    bf = ml_dtypes.bfloat16
    save_file({"q": rng.standard_normal((200, c["H"], c["DN"] + c["DR"])).astype(bf),
               "kv": rng.standard_normal((200, c["H"], c["DN"] + c["DV"])).astype(bf),
               "latent": rng.standard_normal((200, c["R"] + c["DR"])).astype(bf),
               "gate": rng.standard_normal((200, c["H"] * c["DV"])).astype(bf),
               "cu_seqlens": np.asarray([0, 200], np.int32)},
              str(OUT / "in_flash_kimi.safetensors"))
    return 0


def bf16_round(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (to nearest, ties to even), as float32."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return u.view(np.float32)


def save_bf16(path: Path, name: str, a: np.ndarray) -> None:
    """A one-tensor safetensors file of bf16 values (numpy has no bf16)."""
    import json
    bits = (np.ascontiguousarray(a, np.float32).view(np.uint32) >> 16).astype("<u2")
    header = json.dumps({name: {"dtype": "BF16", "shape": list(a.shape),
                                "data_offsets": [0, bits.nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + bits.tobytes())


def selected(name) -> bool:
    """Whether K3_CHECK_NAMES (substrings, ','-separated; unset: all) names
    this linear or group case."""
    names = os.environ.get("K3_CHECK_NAMES")
    return not names or any(n in name for n in names.split(","))


def check_groups(res, dev, g) -> None:
    """k3.linear_group on the GEMV against float64, per result."""
    import torch
    from safetensors.torch import save_file
    import k3
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}
    wgmma_groups = WGMMA_GROUPS + SCHEDULE_GROUPS
    wgmma = {c[0] for c in wgmma_groups}
    for name, k, ns, xt, ys in GROUPS + wgmma_groups:
        if not selected(name):
            continue
        ws = [(torch.randn(n, k, device=dev, generator=g) / k ** 0.5).to(torch.bfloat16) for n in ns]
        wfile = OUT / f"{name}.w.safetensors"
        save_file({f"w{i}": w.cpu() for i, w in enumerate(ws)}, str(wfile))
        for t in WGMMA_GROUP_TOKENS if name in wgmma else GROUP_TOKENS:
            x = torch.randn(t, k, device=dev, generator=g).to(dt[xt])

            def case(ws=ws, x=x, t=t, name=name, wfile=wfile, ys=ys, k=k):
                s = k3.Session(str(OUT / f"{name}.k3bin"), device="cuda:0")
                s.load_weights(str(wfile))
                out = s.run("forward", symbols={"num_tokens": t, "num_seqs": 1}, outputs="dlpack", x=x)
                errs = []
                for i, (w, yt) in enumerate(zip(ws, ys)):
                    got = torch.from_dlpack(out[f"y{i}"]).double()
                    ref = x.double() @ w.double().T
                    err = float((got - ref).norm() / ref.norm())
                    bound = k * 2.0 ** -24 if yt == "f32" else 2.0 ** -8
                    if not err < bound:
                        raise AssertionError(f"result {i}: error vs f64 {err:.3e} (bound {bound})")
                    errs.append(err)
                s.close()
                return {"err_vs_oracle": max(errs), "errs": errs}
            kernel = ("linear_gemv" if name not in wgmma else wgmma_schedule(name))
            res.guard(case, case=name, impl="k3",
                      variant=f"{kernel} (linear_group)" + (f" tile {SPLIT_TILES[name]}" if name in SPLIT_TILES else ""),
                      shape={"T": t, "N": list(ns), "K": k, "x": xt, "y": list(ys)})


def wgmma_schedule(name: str) -> str:
    """The linear_tma_wgmma schedule of a case, from its name's suffix."""
    base = name.removesuffix("_r4")
    if base in SCHEDULE_OF:
        return f"linear_tma_wgmma {SCHEDULES[SCHEDULE_OF[base]][1]}"
    return "linear_tma_wgmma"


def argmax_rows(v: int, rng) -> np.ndarray:
    rows = rng.standard_normal((ARGMAX_ROWS, v)).astype(np.float32)
    rows[0, [3 % v, v // 2, v - 1]] = 50.0            # ties: the lowest wins
    rows[1, :] = -np.inf                              # all -inf: column 0
    rows[2, v - 1] = 60.0                             # the last column
    rows[3, 0] = 60.0                                 # the first column
    rows[4, :] = 1.0                                  # all equal: column 0
    return rows


def check() -> int:
    import torch
    from safetensors.torch import save_file
    import k3
    res = protocol.Results("gpu_kernels_check")
    dev = torch.device("cuda:0")
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}
    g = torch.Generator(device=dev).manual_seed(0)
    for name, n, k, wt, xt, yt in LINEARS + WGMMA_LINEARS + SCHEDULE_LINEARS + RASTER_LINEARS:
        if not selected(name):
            continue
        kernel = ("linear_gemv" if (name, n, k, wt, xt, yt) in LINEARS
                  else wgmma_schedule(name))
        if name.endswith("_r4"):
            kernel += ", bands of 4 row tiles"
        w = (torch.randn(n, k, device=dev, generator=g) / k ** 0.5).to(dt[wt])
        wfile = OUT / f"{name}.w.safetensors"
        save_file({"w": w.cpu()}, str(wfile))
        for t in (RASTER_TOKENS if name.endswith("_r4")
                  else (SCHEDULES[SCHEDULE_OF[name]][2] if name in SCHEDULE_OF else None)
                  or LINEAR_TOKENS):
            x = torch.randn(t, k, device=dev, generator=g).to(dt[xt])

            def case(w=w, x=x, t=t, name=name, wfile=wfile, yt=yt):
                s = k3.Session(str(OUT / f"{name}.k3bin"), device="cuda:0")
                s.load_weights(str(wfile))
                y = s.run("forward", symbols={"num_tokens": t, "num_seqs": 1},
                          outputs="dlpack", x=x)["y"]
                got = torch.from_dlpack(y).double()
                ref = x.double() @ w.double().T
                err = float((got - ref).norm() / ref.norm())
                s.close()
                # f32 output: the inner product's first-order bound K u
                # (u = 2^-24); bf16 output: its own rounding, 2^-8.
                bound = k * 2.0 ** -24 if yt == "f32" else 2.0 ** -8
                if not err < bound:
                    raise AssertionError(f"error vs f64 {err:.3e} (bound {bound})")
                return {"err_vs_oracle": err, "bound": bound}
            res.guard(case, case=name, impl="k3",
                      variant=kernel + (f" tile {SPLIT_TILES[name]}" if name in SPLIT_TILES else ""),
                      shape={"T": t, "N": n, "K": k, "w": wt, "x": xt, "y": yt})
    check_groups(res, dev, g)
    only = os.environ.get("K3_CHECK_ONLY")
    if only in ("linears", "gemms"):  # the linear GEMMs alone, or with MoE's
        if only == "gemms":
            kernels_check_moe_grouped.check(res, np.random.default_rng(0), OUT,
                                            moe_decode_routing, bf16_round)
        res.write()
        return 1 if res.failures else 0
    rng = np.random.default_rng(0)
    for v in VOCABS:
        rows = argmax_rows(v, rng)

        def case(rows=rows, v=v):
            s = k3.Session(str(OUT / f"argmax_v{v}.k3bin"), device="cuda:0")
            got = s.run("forward", symbols={"num_tokens": rows.shape[0], "num_seqs": 1},
                        outputs="numpy", l=rows)["a"]
            s.close()
            want = np.argmax(rows, axis=1)  # the first maximum
            if not np.array_equal(got, want):
                raise AssertionError(f"argmax {got.tolist()} != numpy {want.tolist()}")
            return {"argmax": got.tolist()}
        res.guard(case, case=f"argmax_v{v}", impl="k3", variant="argmax_rows",
                  shape={"rows": ARGMAX_ROWS, "vocab": v})
    check_mla(res, rng)
    check_flash(res, rng)
    check_norms(res, rng)
    check_gated_norms(res, rng)
    check_partial_norms(res, rng)
    check_short_convs(res, rng)
    check_short_conv_group(res, rng)
    check_router(res, rng)
    check_moe_decode(res, rng)
    check_moe_norm(res, rng)
    check_moe_mxfp4(res, rng)
    kernels_check_moe_grouped.check(res, rng, OUT, moe_decode_routing, bf16_round)
    res.write()
    return 1 if res.failures else 0


def check_norms(res, rng) -> None:
    """rms_norm (f32 rows) and add_rms_norm (bf16 operands) against float64:
    y and z within 1e-5 normwise, the bf16 sum equal to bf16(h + r)."""
    import torch
    import k3
    for n in NORM_WIDTHS:
        w = bf16_round(rng.standard_normal(n) * 0.5 + 1.0)
        wfile = OUT / f"norm_n{n}.w.safetensors"
        save_bf16(wfile, "w", w)
        for t in (1, 3, 64):
            x = rng.standard_normal((t, n)).astype(np.float32) * 3
            h = bf16_round(rng.standard_normal((t, n)))
            r = bf16_round(rng.standard_normal((t, n)))

            def case(n=n, t=t, x=x, h=h, r=r, w=w, wfile=wfile):
                s = k3.Session(str(OUT / f"norm_n{n}.k3bin"), device="cuda:0")
                s.load_weights(str(wfile))
                dev = torch.device("cuda:0")
                out = s.run("forward", symbols={"num_tokens": t, "num_seqs": 1}, outputs="dlpack",
                            x=torch.from_numpy(x).to(dev),
                            h=torch.from_numpy(h).to(dev).to(torch.bfloat16),
                            r=torch.from_numpy(r).to(dev).to(torch.bfloat16))
                y, sm, z = (torch.from_dlpack(out[k]).double().cpu().numpy() for k in "ysz")
                s.close()
                def norm(v, eps):
                    v = v.astype(np.float64)
                    return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w
                want_s = bf16_round(h + r)
                ey = float(np.linalg.norm(y - norm(x, 1e-6)) / np.linalg.norm(norm(x, 1e-6)))
                ez = float(np.linalg.norm(z - norm(want_s, 1e-5)) /
                           np.linalg.norm(norm(want_s, 1e-5)))
                if not (ey < 1e-5 and ez < 1e-5 and np.array_equal(sm, want_s.astype(np.float64))):
                    raise AssertionError(f"y err {ey:.2e}, z err {ez:.2e} (bound 1e-5), sum "
                                         f"equal: {np.array_equal(sm, want_s)}")
                return {"err_y": ey, "err_z": ez}
            res.guard(case, case=f"norm_n{n}", impl="k3", variant="rms_norm_rows",
                      shape={"T": t, "N": n})


def check_partial_norms(res, rng) -> None:
    """partial_rms_norm against k3ref.ops.partial_rms_norm in float64: the
    normalised columns within 1e-5 (f32) or 2^-8 (bf16) normwise, the others
    equal to the input."""
    import torch
    import k3
    from k3ref import ops
    for dt, r, rest in PARTIAL_NORM_SHAPES:
        n = r + rest
        w = bf16_round(rng.standard_normal(r) * 0.5 + 1.0)
        wfile = OUT / f"partial_norm_{dt}_r{r}.w.safetensors"
        save_bf16(wfile, "w", w)
        for t in (1, 5, 200):
            x = rng.standard_normal((t, n)) * 3
            x = bf16_round(x) if dt == "bf16" else x.astype(np.float32)

            def case(dt=dt, r=r, n=n, t=t, x=x, w=w, wfile=wfile):
                s = k3.Session(str(OUT / f"partial_norm_{dt}_r{r}.k3bin"), device="cuda:0")
                s.load_weights(str(wfile))
                dev = torch.device("cuda:0")
                xt = torch.from_numpy(np.asarray(x, np.float32)).to(dev)
                out = s.run("forward", symbols={"num_tokens": t, "num_seqs": 1}, outputs="dlpack",
                            x=xt.to(torch.bfloat16) if dt == "bf16" else xt)
                y = torch.from_dlpack(out["y"]).double().cpu().numpy()
                s.close()
                want = ops.partial_rms_norm(np.asarray(x, np.float64), w, 1e-6)
                err = float(np.linalg.norm(y[:, :r] - want[:, :r]) / np.linalg.norm(want[:, :r]))
                bound = 2.0 ** -8 if dt == "bf16" else 1e-5
                if not (err < bound and np.array_equal(y[:, r:], want[:, r:])):
                    raise AssertionError(f"normalised columns err {err:.2e} (bound {bound}), "
                                         f"others equal: {np.array_equal(y[:, r:], want[:, r:])}")
                return {"err_vs_oracle": err, "bound": bound}
            res.guard(case, case=f"partial_norm_{dt}_r{r}", impl="k3", variant="rms_norm_rows",
                      shape={"T": t, "N": n, "R": r, "dtype": dt})


def check_gated_norms(res, rng) -> None:
    """gated_rms_norm (f32) against float64, within 1e-5 normwise."""
    import torch
    import k3
    from safetensors.numpy import save_file
    for h, d in GATED_NORM_SHAPES:
        name = f"gated_norm_h{h}_d{d}"
        w = (rng.standard_normal(d) * 0.5 + 1.0).astype(np.float32)
        wfile = OUT / f"{name}.w.safetensors"
        save_file({"w": w}, str(wfile))
        for t in (1, 7, 255):
            o = rng.standard_normal((t, h, d)).astype(np.float32) * 3
            g = rng.standard_normal((t, h, d)).astype(np.float32) * 4

            def case(name=name, t=t, o=o, g=g, w=w, wfile=wfile):
                s = k3.Session(str(OUT / f"{name}.k3bin"), device="cuda:0")
                s.load_weights(str(wfile))
                dev = torch.device("cuda:0")
                out = s.run("forward", symbols={"num_tokens": t, "num_seqs": 1}, outputs="dlpack",
                            o=torch.from_numpy(o).to(dev), g=torch.from_numpy(g).to(dev))
                y = torch.from_dlpack(out["y"]).double().cpu().numpy()
                s.close()
                v = o.astype(np.float64)
                want = v / np.sqrt((v * v).mean(-1, keepdims=True) + 1e-5) * w / \
                    (1 + np.exp(-g.astype(np.float64)))
                err = float(np.linalg.norm(y - want) / np.linalg.norm(want))
                if not err < 1e-5:
                    raise AssertionError(f"gated norm err {err:.2e} (bound 1e-5)")
                return {"err": err}
            res.guard(case, case=name, impl="k3", variant="rms_norm_rows",
                      shape={"T": t, "H": h, "D": d})


def check_short_convs(res, rng) -> None:
    """short_conv against k3ref's float64 short_conv on the same (rounded)
    inputs: y within 1e-5 normwise (f32) or 1e-2 (bf16 output), the final
    states (copies of inputs and carried states) within 1e-6."""
    import torch
    import k3
    from safetensors.numpy import save_file
    from k3ref import ops as ref
    for dt, c in SHORT_CONV_SHAPES:
        name = f"short_conv_{dt}_c{c}"
        w = (rng.standard_normal((c, 1, 4)) * 0.5).astype(np.float32)
        wfile = OUT / f"{name}.w.safetensors"
        save_file({"w": w}, str(wfile))
        for lens in SHORT_CONV_LENS:
            t, n = sum(lens), len(lens)
            x = rng.standard_normal((t, c)).astype(np.float32)
            if dt == "bf16":
                x = bf16_round(x).astype(np.float32)
            st = rng.standard_normal((n, c, 3)).astype(np.float32)
            cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)

            def case(name=name, dt=dt, t=t, n=n, x=x, st=st, cu=cu, w=w, wfile=wfile):
                s = k3.Session(str(OUT / f"{name}.k3bin"), device="cuda:0")
                s.load_weights(str(wfile))
                dev = torch.device("cuda:0")
                xt = torch.from_numpy(x).to(dev)
                out = s.run("forward", symbols={"num_tokens": t, "num_seqs": n}, outputs="dlpack",
                            x=xt.to(torch.bfloat16) if dt == "bf16" else xt,
                            s=torch.from_numpy(st).to(dev), cu_seqlens=torch.from_numpy(cu).to(dev))
                y = torch.from_dlpack(out["y"]).double().cpu().numpy()
                fs = torch.from_dlpack(out["fs"]).double().cpu().numpy()
                s.close()
                wy, wfs = ref.short_conv(x.astype(np.float64), w.astype(np.float64),
                                         st.astype(np.float64), cu)
                ey = float(np.linalg.norm(y - wy) / max(np.linalg.norm(wy), 1e-30))
                efs = float(np.abs(fs - wfs).max())
                bound = 1e-2 if dt == "bf16" else 1e-5
                if not (ey < bound and efs < 1e-6):
                    raise AssertionError(f"y err {ey:.2e} (bound {bound:g}), final state max "
                                         f"err {efs:.2e} (bound 1e-6)")
                return {"err_y": ey, "err_final_state": efs}
            res.guard(case, case=name, impl="k3", variant="short_conv_rows",
                      shape={"lens": lens, "C": c})


def check_short_conv_group(res, rng) -> None:
    """k3.short_conv_group in a decode function against k3ref's float64
    short_conv of each member, with check_short_convs' bounds."""
    import torch
    import k3
    from safetensors.numpy import save_file
    from k3ref import ops as ref
    members = (("x", "s", "w", "y", "fs", 4096, True), ("xs", "ss", "ws", "ys", "fss", 40, False))
    ws = {m[2]: (rng.standard_normal((m[5], 1, 4)) * 0.5).astype(np.float32) for m in members}
    wfile = OUT / "short_conv_group.w.safetensors"
    save_file(ws, str(wfile))
    for lens in SHORT_CONV_GROUP_LENS:
        t, n = sum(lens), len(lens)
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        data = {}
        for xn, sn, _, _, _, c, bf in members:
            x = rng.standard_normal((t, c)).astype(np.float32)
            data[xn] = bf16_round(x).astype(np.float32) if bf else x
            data[sn] = rng.standard_normal((n, c, 3)).astype(np.float32)

        def case(t=t, n=n, cu=cu, data=data):
            s = k3.Session(str(OUT / "short_conv_group.k3bin"), device="cuda:0")
            s.load_weights(str(wfile))
            dev = torch.device("cuda:0")
            args = {k: torch.from_numpy(v).to(dev) for k, v in data.items()}
            args["x"] = args["x"].to(torch.bfloat16)
            out = s.run("forward", symbols={"num_tokens": t, "num_seqs": n}, outputs="dlpack",
                        cu_seqlens=torch.from_numpy(cu).to(dev), **args)
            got = {k: torch.from_dlpack(v).double().cpu().numpy() for k, v in out.items()}
            s.close()
            errs = {}
            for xn, sn, wn, yn, fn, c, bf in members:
                wy, wfs = ref.short_conv(data[xn].astype(np.float64), ws[wn].astype(np.float64),
                                         data[sn].astype(np.float64), cu)
                ey = float(np.linalg.norm(got[yn] - wy) / max(np.linalg.norm(wy), 1e-30)) if t else 0.0
                efs = float(np.abs(got[fn] - wfs).max())
                bound = 1e-2 if bf else 1e-5
                if not (ey < bound and efs < 1e-6):
                    raise AssertionError(f"{yn}: y err {ey:.2e} (bound {bound:g}), final state "
                                         f"max err {efs:.2e} (bound 1e-6)")
                errs[f"err_{yn}"], errs[f"err_{fn}"] = ey, efs
            return errs
        res.guard(case, case="short_conv_group", impl="k3", variant="short_conv_rows decode",
                  shape={"lens": lens, "C": [4096, 40]})


# variant: (artifact, k3-compile options).
ROUTER_VARIANTS = {
    "linear + moe_topk_rows": ("router", ""),
    "linear_gemv + moe_topk_rows": ("router_gemv", "kernel-config=linear.kernel=linear_gemv"),
    "moe_router_mma": ("router_mma", "split-router=0"),
    "moe_router_rows": ("router_rows", "split-router=0 kernel-config=moe_router.kernel=moe_router_rows"),
}


def check_router(res, rng) -> None:
    """The router against k3ref's float64 moe_router: the same experts in
    the same order (a swap is accepted only where the f64 choice scores of
    the two experts differ by less than 1e-5: f32 logits can order a near
    tie either way; with group-limited routing a token whose kept groups
    differ is accepted only where the f64 scores of the groups in question
    differ by less than 1e-5), the weights within 1e-5 normwise."""
    import json
    import k3
    from safetensors.numpy import save_file
    from k3ref import ops as ref
    wr = bf16_round(rng.standard_normal((256, 2304)) / 48)
    bias = (rng.standard_normal(256) * 0.05).astype(np.float32)
    wrs = rng.standard_normal((40, 200)).astype(np.float32) / 14
    wrk = bf16_round(rng.standard_normal((896, 7168)) / 85)
    biask = (rng.standard_normal(896) * 0.05).astype(np.float32)
    wfile = OUT / "router.w.safetensors"
    save_bf16(wfile, "wr", wr)
    kfile = OUT / "router.wk.safetensors"
    save_bf16(kfile, "wrk", wrk)
    extra = OUT / "router.w2.safetensors"
    save_file({"bias": bias, "wrs": wrs, "biask": biask}, str(extra))
    # 5 and 203: a last block of 8 tokens only partly filled.
    for (variant, (art, _)), t in ((v, t) for v in ROUTER_VARIANTS.items()
                                   for t in (1, 5, 200, 203)):
        x = bf16_round(rng.standard_normal((t, 2304)))
        xs = rng.standard_normal((t, 200)).astype(np.float32)
        xk = bf16_round(rng.standard_normal((t, 7168)))

        def case(t=t, x=x, xs=xs, xk=xk, art=art):
            import torch
            s = k3.Session(str(OUT / f"{art}.k3bin"), device="cuda:0")
            s.load_weights([str(wfile), str(kfile), str(extra)])
            dev = torch.device("cuda:0")
            out = s.run("forward", symbols={"num_tokens": t, "num_seqs": 1}, outputs="dlpack",
                        x=torch.from_numpy(x).to(dev).to(torch.bfloat16),
                        xs=torch.from_numpy(xs).to(dev),
                        xk=torch.from_numpy(xk).to(dev).to(torch.bfloat16))
            got = {k: torch.from_dlpack(out[k]).cpu().numpy()
                   for k in ("i", "w", "is", "ws", "ik", "wk", "ig", "wg", "isg", "wsg")}
            s.close()
            rows = {}
            outs = {"sigmoid": ("i", "w"), "softmax": ("is", "ws"), "k3-896-top16": ("ik", "wk"),
                    "grouped-256-g8-tg4": ("ig", "wg"), "grouped-softmax-40-g4-tg2": ("isg", "wsg")}
            for tag, xin, w, b, k, score, renorm, factor, groups in (
                    ("sigmoid", x, wr, bias, 8, "sigmoid", True, 2.446, (1, 1)),
                    ("softmax", xs, wrs, None, 6, "softmax", False, 1.0, (1, 1)),
                    ("k3-896-top16", xk, wrk, biask, 16, "sigmoid", True, 1.0, (1, 1)),
                    ("grouped-256-g8-tg4", x, wr, bias, 8, "sigmoid", True, 2.5, (8, 4)),
                    ("grouped-softmax-40-g4-tg2", xs, wrs, None, 6, "softmax", True, 1.0, (4, 2))):
                want_i, want_w = ref.moe_router(xin.astype(np.float64), w.astype(np.float64),
                                                None if b is None else b.astype(np.float64), k,
                                                score, renorm, factor, n_group=groups[0],
                                                topk_group=groups[1])
                gi, gw = (got[n] for n in outs[tag])
                logits = xin.astype(np.float64) @ w.astype(np.float64).T
                sc = 1 / (1 + np.exp(-logits)) if score == "sigmoid" else \
                    np.exp(logits - logits.max(1, keepdims=True)) / \
                    np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)
                choice = sc + (b.astype(np.float64) if b is not None else 0)
                flips = 0
                per = choice.shape[1] // groups[0]
                top = np.sort(choice.reshape(t, groups[0], per), axis=-1)[..., ::-1]
                group_score = top[..., 0] + (top[..., 1] if b is not None and per > 1 else 0)
                for r in range(t):
                    swapped = np.nonzero(gi[r] != want_i[r])[0]
                    far = [j for j in swapped
                           if abs(choice[r, gi[r, j]] - choice[r, want_i[r, j]]) >= 1e-5]
                    flips += len(swapped)
                    if not far:
                        continue
                    # Otherwise only another kept group explains it, and
                    # only where the groups' f64 scores are a near-tie.
                    got_groups, want_groups = set(gi[r] // per), set(want_i[r] // per)
                    if groups[0] > 1 and got_groups - want_groups and want_groups - got_groups:
                        gap = abs(max(group_score[r, list(got_groups - want_groups)]) -
                                  min(group_score[r, list(want_groups - got_groups)]))
                        if gap < 1e-5:
                            continue
                    j = far[0]
                    raise AssertionError(f"{tag} token {r} slot {j}: expert {gi[r, j]} "
                                         f"vs f64 {want_i[r, j]}")
                _, want_w = ref.moe_router(xin.astype(np.float64), w.astype(np.float64),
                                           None if b is None else b.astype(np.float64), k,
                                           score, renorm, factor, forced_indices=gi,
                                           n_group=groups[0], topk_group=groups[1])
                if groups[0] > 1 and max(len(set((row // per).tolist())) for row in gi) > groups[1]:
                    raise AssertionError(f"{tag}: a token's experts span more than "
                                         f"{groups[1]} groups")
                err = float(np.linalg.norm(gw - want_w) / np.linalg.norm(want_w))
                if not err < 1e-5:
                    raise AssertionError(f"{tag}: weights error vs f64 {err:.2e} (bound 1e-5)")
                rows[tag] = {"weights_err": err, "near_tie_swaps": flips}
            return {"routers": json.loads(json.dumps(rows))}
        res.guard(case, case="router", impl="k3", variant=variant, shape={"T": t})


def moe_decode_routing(t: int, rng, c=MOE_DECODE) -> tuple[np.ndarray, np.ndarray]:
    """Distinct experts per token, expert 3 in every token's first slot (at
    T = 64 its segment is 16 tiles of 4 rows), positive weights."""
    idx = np.stack([np.concatenate([[3], rng.permutation(
        [e for e in range(c["E"]) if e != 3])[:c["K"] - 1]]) for _ in range(t)]).astype(np.int32)
    return idx, rng.uniform(0.1, 1.0, (t, c["K"])).astype(np.float32)


def moe_decode_reference(x, idx, wts, w, shared=True):
    """float64, with h rounded to bf16 where the kernels store it."""
    def silu(a):
        return a / (1 + np.exp(-a))
    x = x.astype(np.float64)
    y = np.zeros((x.shape[0], w["w2"].shape[1]))
    for t in range(x.shape[0]):
        for j, e in enumerate(idx[t]):
            h = bf16_round(silu(w["w1"][e] @ x[t]) * (w["w3"][e] @ x[t])).astype(np.float64)
            y[t] += wts[t, j] * (w["w2"][e] @ h)
    return y, (silu(x @ w["sg"].T) * (x @ w["su"].T) if shared else None)


def moe_decode_shared_reference(x, idx, wts, w):
    """The routed experts plus the shared expert (its h rounded to bf16
    where the kernel stores it), float64."""
    y, hs = moe_decode_reference(x, idx, wts, w)
    return y + bf16_round(hs).astype(np.float64) @ w["sd"].T.astype(np.float64)


def mxfp4_weights(c, rng, w13_scales=None) -> dict:
    """MXFP4 experts of config ``c`` from normal values by k3ref's encoder,
    as the checkpoint stores them (`<name>_packed`, `<name>_scale`, U8);
    ``w13_scales``: W1's and W3's E8M0 scales drawn from [lo, hi) instead."""
    from k3ref import mxfp4
    shapes = {"w1": (c["E"], c["I"], c["D"]), "w3": (c["E"], c["I"], c["D"]),
              "w2": (c["E"], c["D"], c["I"])}
    tensors = {}
    for k, s in shapes.items():
        packed, scale = mxfp4.quantize(rng.standard_normal(s) / s[-1] ** 0.5)
        if w13_scales and k != "w2":
            scale = rng.integers(*w13_scales, scale.shape).astype(np.uint8)
        tensors[f"{k}_packed"], tensors[f"{k}_scale"] = packed, scale
    return tensors


def prepare_mxfp4_weights() -> None:
    from k3ref import model
    rng = np.random.default_rng(21)
    model.save_safetensors(OUT / "moe_mxfp4.safetensors", mxfp4_weights(MOE_MXFP4, rng))
    model.save_safetensors(OUT / "moe_mxfp4_wgmma.safetensors",
                           mxfp4_weights(MOE_MXFP4_WGMMA, rng))
    model.save_safetensors(OUT / "moe_mxfp4_wgmma_tiny.safetensors",
                           mxfp4_weights(MOE_MXFP4_WGMMA, rng, (0, 4)))
    model.save_safetensors(OUT / "moe_mxfp4_wgmma_big.safetensors",
                           mxfp4_weights(MOE_MXFP4_WGMMA, rng, (129, 132)))
    model.save_safetensors(OUT / "moe_mxfp4_big.safetensors",
                           mxfp4_weights(MOE_MXFP4, rng, (129, 132)))
    # Inputs for compute-sanitizer through k3-run (bench/gpu_session.sh).
    import ml_dtypes
    for name, c, t in (("moe_mxfp4_decode", MOE_MXFP4, 5), ("moe_mxfp4_prefill", MOE_MXFP4, 5),
                       ("moe_mxfp4_wgmma", MOE_MXFP4_WGMMA, 300)):
        idx, wts = moe_decode_routing(t, rng, c)
        model.save_safetensors(OUT / f"in_{name}.safetensors", {
            "x": rng.standard_normal((t, c["D"])).astype(ml_dtypes.bfloat16), "idx": idx,
            "wts": wts})


# MXFP4 checks: (artifact, weights, config, token counts, x scale, kernel).
MXFP4_CHECKS = (
    ("moe_mxfp4_decode", "moe_mxfp4", MOE_MXFP4, (1, 5, 64), 1.0, "decode moe_grouped_gemv"),
    ("moe_mxfp4_prefill", "moe_mxfp4", MOE_MXFP4, (200,), 1.0, "prefill loop_nest"),
    ("moe_mxfp4_wgmma", "moe_mxfp4_wgmma", MOE_MXFP4_WGMMA, (1, 200, 1000), 1.0,
     "prefill moe_grouped_wgmma"),
    ("moe_mxfp4_wgmma", "moe_mxfp4_wgmma_tiny", MOE_MXFP4_WGMMA, (200,), MXFP4_TINY_X_SCALE,
     "prefill moe_grouped_wgmma, W1/W3 scales 2^-127..2^-124, x 2^120"),
    ("moe_mxfp4_wgmma", "moe_mxfp4_wgmma_big", MOE_MXFP4_WGMMA, (200,), MXFP4_BIG_X_SCALE,
     "prefill moe_grouped_wgmma, W1/W3 scales 2^2..2^4, x 2^-8"),
    ("moe_mxfp4_decode", "moe_mxfp4_big", MOE_MXFP4, (5,), MXFP4_BIG_X_SCALE,
     "decode moe_grouped_gemv, W1/W3 scales 2^2..2^4, x 2^-8"),
)


def check_moe_mxfp4(res, rng) -> None:
    """MXFP4 experts against float64 on the dequantised weights (decode,
    the prefill loop nest and the prefill's tensor-core kernels), within
    2^-7 normwise."""
    import torch
    import k3
    from k3ref import model, mxfp4
    for art, wfile, c, tokens, xscale, kernel in MXFP4_CHECKS:
        raw = model.load_safetensors(OUT / f"{wfile}.safetensors", to_float64=False)
        w = {k: mxfp4.dequantize(raw[f"{k}_packed"], raw[f"{k}_scale"])
             for k in ("w1", "w3", "w2")}
        for t in tokens:
            x = bf16_round(rng.standard_normal((t, c["D"])) * xscale)
            idx, wts = moe_decode_routing(t, rng, c)

            def case(t=t, x=x, idx=idx, wts=wts, art=art, wfile=wfile, w=w):
                s = k3.Session(str(OUT / f"{art}.k3bin"), device="cuda:0")
                s.load_weights([str(OUT / f"{wfile}.safetensors")])
                dev = torch.device("cuda:0")
                seqs = 1 if art == "moe_mxfp4_wgmma" else t
                out = s.run("forward", symbols={"num_tokens": t, "num_seqs": seqs},
                            outputs="dlpack", x=torch.from_numpy(x).to(dev).to(torch.bfloat16),
                            idx=torch.from_numpy(idx).to(dev), wts=torch.from_numpy(wts).to(dev))
                y = torch.from_dlpack(out["y"]).double().cpu().numpy()
                s.close()
                want, _ = moe_decode_reference(x, idx, wts, w, shared=False)
                err = float(np.linalg.norm(y - want) / np.linalg.norm(want))
                if not err < 2.0 ** -7:
                    raise AssertionError(f"y err {err:.2e} (bound 2^-7)")
                return {"err_y": err}
            res.guard(case, case="moe_mxfp4", impl="k3", variant=kernel,
                      shape={"T": t, **c})


def check_moe_decode(res, rng) -> None:
    """The decode MoE checks of every form (MOE_DECODE_FORMS)."""
    for name, c in MOE_DECODE_FORMS:
        check_moe_decode_form(res, rng, name, c)


def check_moe_decode_form(res, rng, name, c) -> None:
    """The decode step's grouped GEMVs (routed and shared) against float64 at
    T = 1, 5 (a partial 4-row tile) and 64, within 2^-7 normwise (bf16
    outputs: their own rounding is 2^-8; h is rounded where the reference
    rounds it, a flip there adds one bf16 ulp)."""
    scale = {"w1": c["D"], "w3": c["D"], "w2": c["I"], "sg": c["D"], "su": c["D"]}
    shapes = {"w1": (c["E"], c["I"], c["D"]), "w3": (c["E"], c["I"], c["D"]),
              "w2": (c["E"], c["D"], c["I"]), "sg": (c["I"], c["D"]), "su": (c["I"], c["D"])}
    w = {k: bf16_round(rng.standard_normal(s) / scale[k] ** 0.5) for k, s in shapes.items()}
    files = []
    for k, v in w.items():
        files.append(OUT / f"{name}.{k}.safetensors")
        save_bf16(files[-1], k, v)
    for t in (1, 5, 64):
        x = bf16_round(rng.standard_normal((t, c["D"])))
        idx, wts = moe_decode_routing(t, rng, c)

        def case(t=t, x=x, idx=idx, wts=wts):
            y, h = run_moe_decode(name, files, x, idx, wts, "yh")
            want_y, want_h = moe_decode_reference(x, idx, wts, w)
            ey = float(np.linalg.norm(y - want_y) / np.linalg.norm(want_y))
            eh = float(np.linalg.norm(h - want_h) / np.linalg.norm(want_h))
            if not (ey < 2.0 ** -7 and eh < 2.0 ** -7):
                raise AssertionError(f"y err {ey:.2e}, shared h err {eh:.2e} (bound 2^-7)")
            return {"err_y": ey, "err_h": eh}
        res.guard(case, case=name, impl="k3", variant="moe_grouped_gemv+glu_gemv",
                  shape={"T": t, **c})
    check_moe_decode_shared(res, rng, w, files, name, c)


def run_moe_decode(name: str, files, x, idx, wts, outputs: str):
    """One run of out/kernels_check/<name>.k3bin on the GPU: bf16 x, the
    routing; the named outputs as float64 arrays."""
    import torch
    import k3
    s = k3.Session(str(OUT / f"{name}.k3bin"), device="cuda:0")
    s.load_weights([str(f) for f in files])
    dev = torch.device("cuda:0")
    t = x.shape[0]
    out = s.run("forward", symbols={"num_tokens": t, "num_seqs": t}, outputs="dlpack",
                x=torch.from_numpy(x).to(dev).to(torch.bfloat16),
                idx=torch.from_numpy(idx).to(dev), wts=torch.from_numpy(wts).to(dev))
    got = [torch.from_dlpack(out[k]).double().cpu().numpy() for k in outputs]
    s.close()
    return got


def check_moe_decode_shared(res, rng, w, files, name, c) -> None:
    """The shared expert in the grouped GEMVs (k3-fuse-shared-expert) against
    float64 at T = 1, 5 and 64, within 2^-7 normwise (the bound above)."""
    w = dict(w, sd=bf16_round(rng.standard_normal((c["D"], c["I"])) / c["I"] ** 0.5))
    files = files + [OUT / f"{name}.sd.safetensors"]
    save_bf16(files[-1], "sd", w["sd"])
    for t in (1, 5, 64):
        x = bf16_round(rng.standard_normal((t, c["D"])))
        idx, wts = moe_decode_routing(t, rng, c)

        def case(t=t, x=x, idx=idx, wts=wts):
            (y,) = run_moe_decode(f"{name}_shared", files, x, idx, wts, "y")
            want = moe_decode_shared_reference(x, idx, wts, w)
            ey = float(np.linalg.norm(y - want) / np.linalg.norm(want))
            if not ey < 2.0 ** -7:
                raise AssertionError(f"y err {ey:.2e} (bound 2^-7)")
            return {"err_y": ey}
        res.guard(case, case=f"{name}_shared", impl="k3", variant="moe_grouped_gemv shared expert",
                  shape={"T": t, **c})


def check_moe_norm(res, rng) -> None:
    """k3.moe_combine_add_rms_norm (the combine, the residual add, the
    RMSNorm; MOE_NORM_MODEL) in the decode entry's form and the prefill's,
    against float64 at T = 1, 5 and 64: h within 2^-7 normwise (the MoE
    bound above), n within 2^-7 (h's error, normalised)."""
    c = MOE_DECODE_MMA
    shapes = {"w1": (c["E"], c["I"], c["D"]), "w3": (c["E"], c["I"], c["D"]),
              "w2": (c["E"], c["D"], c["I"]), "sg": (c["I"], c["D"]), "su": (c["I"], c["D"]),
              "sd": (c["D"], c["I"])}
    fan_in = {"w1": c["D"], "w3": c["D"], "w2": c["I"], "sg": c["D"], "su": c["D"], "sd": c["I"]}
    w = {k: bf16_round(rng.standard_normal(v) / fan_in[k] ** 0.5) for k, v in shapes.items()}
    w["nw"] = bf16_round(rng.uniform(0.5, 1.5, c["D"]))
    files = []
    for k, v in w.items():
        files.append(OUT / f"moe_norm.{k}.safetensors")
        save_bf16(files[-1], k, v)
    for form in MOE_NORM_FORMS:
        for t in (1, 5, 64):
            x = bf16_round(rng.standard_normal((t, c["D"])))
            r = bf16_round(rng.standard_normal((t, c["D"])))
            idx, wts = moe_decode_routing(t, rng, c)

            def case(form=form, x=x, r=r, idx=idx, wts=wts):
                h, n = run_moe_norm(f"moe_norm_{form}", files, x, r, idx, wts)
                want_h = r.astype(np.float64) + moe_decode_shared_reference(x, idx, wts, w)
                want_n = (want_h / np.sqrt(np.mean(want_h ** 2, axis=1, keepdims=True) + 1e-5)
                          * w["nw"].astype(np.float64))
                eh = float(np.linalg.norm(h - want_h) / np.linalg.norm(want_h))
                en = float(np.linalg.norm(n - want_n) / np.linalg.norm(want_n))
                if not (eh < 2.0 ** -7 and en < 2.0 ** -7):
                    raise AssertionError(f"h err {eh:.2e}, n err {en:.2e} (bound 2^-7)")
                return {"err_h": eh, "err_n": en}
            res.guard(case, case="moe_norm", impl="k3",
                      variant=f"moe_combine_add_rms_norm, {form} entry", shape={"T": t, **c})


def run_moe_norm(name: str, files, x, r, idx, wts):
    """One run of a MOE_NORM_MODEL artifact: h and n as float64 arrays."""
    import torch
    import k3
    s = k3.Session(str(OUT / f"{name}.k3bin"), device="cuda:0")
    s.load_weights([str(f) for f in files])
    dev = torch.device("cuda:0")
    t = x.shape[0]
    bf16 = lambda a: torch.from_numpy(a).to(dev).to(torch.bfloat16)  # noqa: E731
    out = s.run("forward", symbols={"num_tokens": t, "num_seqs": t}, outputs="dlpack",
                x=bf16(x), res=bf16(r), idx=torch.from_numpy(idx).to(dev),
                wts=torch.from_numpy(wts).to(dev))
    got = [torch.from_dlpack(out[k]).double().cpu().numpy() for k in ("h", "n")]
    s.close()
    return got


def check_mla(res, rng) -> None:
    """Latent attention against k3ref's float64 oracle (f32 inputs, bf16
    kv_b), bound 1e-4 normwise on o (the e2e logits bound); the output
    cache: the old rows and the appended ones exactly."""
    import k3
    from k3ref import ops as ref
    m = MLA
    width = m["R"] + m["DR"]
    kvb = bf16_round(rng.standard_normal((m["H"] * (m["DN"] + m["DV"]), m["R"]))
                     / m["R"] ** 0.5)
    wfile = OUT / "mla.w.safetensors"
    save_bf16(wfile, "kv_b", kvb)
    for name, tokens, cached in MLA_CASES:
        T, N = sum(tokens), len(tokens)
        q = rng.standard_normal((T, m["H"], m["DN"] + m["DR"])).astype(np.float32)
        lat = rng.standard_normal((T, width)).astype(np.float32)
        cache = rng.standard_normal((N, m["L"], width)).astype(np.float32)
        lens = np.asarray(cached, np.int32)
        cu = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int32)

        def case(q=q, lat=lat, cache=cache, lens=lens, cu=cu, T=T, N=N, tokens=tokens):
            s = k3.Session(str(OUT / "mla.k3bin"), device="cuda:0")
            s.load_weights(str(wfile))
            out = s.run("forward", symbols={"num_tokens": T, "num_seqs": N}, outputs="numpy",
                        q=q, latent=lat, cache=cache, cache_lens=lens, cu_seqlens=cu)
            s.close()
            want, new_cache = ref.latent_attention(
                q.astype(np.float64), lat.astype(np.float64),
                kvb.astype(np.float64), m["H"], m["DN"], m["DR"], m["DV"],
                m["R"], (m["DN"] + m["DR"]) ** -0.5, latent_cache=cache.astype(np.float64),
                cache_lens=lens, cu_seqlens=cu)
            err = float(np.linalg.norm(out["o"] - want) / np.linalg.norm(want))
            if not err < 1e-4:
                raise AssertionError(f"o: error vs f64 {err:.3e} (bound 1e-4)")
            for n in range(N):
                rows = new_cache[n].shape[0]
                if not np.array_equal(out["cache_out"][n, :rows], new_cache[n].astype(np.float32)):
                    raise AssertionError(f"cache_out of sequence {n} differs in its first {rows} rows")
            return {"err_vs_oracle": err}
        res.guard(case, case=name, impl="k3", variant="latent_attention_rows",
                  shape={"tokens": tokens, "cached": cached, **MLA})
    kv_b = {m["H"]: (kvb, wfile)}
    for art, x, rows, _, heads in MLA_SPLIT:
        if heads not in kv_b:
            w = bf16_round(rng.standard_normal((heads * (m["DN"] + m["DV"]), m["R"]))
                           / m["R"] ** 0.5)
            kv_b[heads] = (w, OUT / f"mla_h{heads}.w.safetensors")
            save_bf16(kv_b[heads][1], "kv_b", w)
        cases = MLA_SPLIT_LONG_CASES if rows > MLA["L"] else MLA_SPLIT_CASES
        for name, tokens, cached in cases:
            res.guard(lambda art=art, x=x, rows=rows, tokens=tokens, cached=cached, heads=heads:
                      mla_split_case(rng, *kv_b[heads], art, x, rows, tokens, cached, heads),
                      case=name, impl="k3", variant=f"latent_attention_split, {x} cache",
                      shape={"tokens": tokens, "cached": cached, **dict(MLA, L=rows, H=heads)})


def mla_split_case(rng, kvb, wfile, art, x, rows, tokens, cached, heads) -> dict:
    """The split kernel against float64 on the inputs rounded to its type;
    bound 2^-7 normwise (bf16 absorbed queries, latents and P, as the flash
    kernel's); the output cache's rows exactly."""
    import k3
    import ml_dtypes
    from k3ref import ops as ref
    m = dict(MLA, H=heads)
    width = m["R"] + m["DR"]
    T, N = sum(tokens), len(tokens)
    q = bf16_round(rng.standard_normal((T, m["H"], m["DN"] + m["DR"])).astype(np.float32))
    lat = bf16_round(rng.standard_normal((T, width)).astype(np.float32))
    cache = bf16_round(rng.standard_normal((N, rows, width)).astype(np.float32))
    lens = np.asarray(cached, np.int32)
    cu = np.concatenate([[0], np.cumsum(tokens)]).astype(np.int32)
    typed = (lambda a: a.astype(ml_dtypes.bfloat16)) if x == "bf16" else (lambda a: a)
    s = k3.Session(str(OUT / f"{art}.k3bin"), device="cuda:0")
    try:
        s.load_weights(str(wfile))
        out = s.run("forward", symbols={"num_tokens": T, "num_seqs": N}, outputs="numpy",
                    q=typed(q), latent=typed(lat), cache=typed(cache), cache_lens=lens,
                    cu_seqlens=cu)
    finally:
        s.close()
    want, new_cache = ref.latent_attention(
        q.astype(np.float64), lat.astype(np.float64), kvb.astype(np.float64), m["H"], m["DN"],
        m["DR"], m["DV"], m["R"], (m["DN"] + m["DR"]) ** -0.5,
        latent_cache=cache.astype(np.float64), cache_lens=lens, cu_seqlens=cu)
    got = np.asarray(out["o"]).astype(np.float64)
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    if not err < 2.0 ** -7:
        raise AssertionError(f"o: error vs f64 {err:.3e} (bound {2.0 ** -7:.2e})")
    got_cache = np.asarray(out["cache_out"]).astype(np.float64)
    for n in range(N):
        rows = new_cache[n].shape[0]
        if not np.array_equal(got_cache[n, :rows], new_cache[n]):
            raise AssertionError(f"cache_out of sequence {n} differs in its first {rows} rows")
    return {"err_vs_oracle": err}


def check_flash(res, rng) -> None:
    """The flash kernel against flash_reference on the same bf16 inputs;
    bound 2^-7 normwise (P is rounded to bf16 before P V, as FlashAttention
    does; a bf16 output adds its own 2^-9)."""
    import k3
    for name, c in FLASH.items():
        for lengths in FLASH_LENGTHS:
            T, H = sum(lengths), c["H"]
            cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            q = bf16_round(rng.standard_normal((T, H, c["DN"] + c["DR"])).astype(np.float32))
            kv = bf16_round(rng.standard_normal((T, H, c["DN"] + c["DV"])).astype(np.float32))
            lat = bf16_round(rng.standard_normal((T, c["R"] + c["DR"])).astype(np.float32))
            gate = (bf16_round(rng.standard_normal((T, H * c["DV"])).astype(np.float32))
                    if c["GATE"] else None)

            def case(q=q, kv=kv, lat=lat, gate=gate, cu=cu, T=T, c=c, name=name, n=len(lengths)):
                import ml_dtypes
                bf = ml_dtypes.bfloat16
                s = k3.Session(str(OUT / f"flash_{name}.k3bin"), device="cuda:0")
                inputs = dict(q=q.astype(bf), kv=kv.astype(bf), latent=lat.astype(bf), cu_seqlens=cu)
                if gate is not None:
                    inputs["gate"] = gate.astype(bf)
                out = s.run("forward", symbols={"num_tokens": T, "num_seqs": n}, outputs="numpy",
                            **inputs)["o"]
                s.close()
                want = flash_reference(q.astype(np.float64), kv.astype(np.float64),
                                       lat.astype(np.float64),
                                       None if gate is None else gate.astype(np.float64), cu, c)
                got = np.asarray(out, np.float64)
                if not np.isfinite(got).all():
                    raise AssertionError("non-finite output")
                err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
                bound = 2.0 ** -7
                if not err < bound:
                    raise AssertionError(f"error vs f64 {err:.3e} (bound {bound})")
                return {"err_vs_oracle": err, "bound": bound}
            res.guard(case, case=f"flash_{name}", impl="k3", variant="mla_flash_wgmma",
                      shape={"lengths": lengths, **{k: v for k, v in c.items()}})


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "check"
    sys.exit(prepare() if cmd == "prepare" else check())
