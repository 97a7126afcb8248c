"""The prefill's grouped MoE GEMMs on bf16 weights (lowering/cuda/
MoEGroupedWGMMA.cpp) against float64, in both schedules: the default one
warpgroup per 128 x 128 tile (its down GEMM also in cluster pairs that
share the rows), and the persistent warp-specialised one
(a producer and two consumer warpgroups per SM walking 128 x 256 tiles)
with 4 stages (the epilogue from registers) and 3 (bf16 results through
shared memory: TMA stores, a segment's partial last half by the threads); and k3.glu_gate_up (the
dense MLP's gate/up GEMM, kind glu_wgmma) in the persistent schedule.

Shapes: 16 experts top-4, D 512, I 256 (gate/up 512 columns: two 256-column
tiles; down 512 outputs), at T = 1, 5, 200, 300 and 1000 with expert 3 in every
token's first slot (at T = 1000 its segment is 8 tiles, most experts end
in a partial tile, and at T = 1 most have no rows; the grid of one block
per SM walks more tiles than it has blocks only at T = 1000).
Part of bench/gpu_kernels_check.py (prepare here, check on the GPU).
"""
from __future__ import annotations

import numpy as np

MOE_GROUPED = dict(E=16, K=4, D=512, I=256)
TOKENS = (1, 5, 200, 300, 1000)
MAX_TOKENS = 1024


def persistent(kind: str, stages: int) -> str:
    """Kernel-config overrides for the persistent warp-specialised schedule
    of kernel kind ``kind``."""
    return (f"{kind}.tile=128x256x64,{kind}.warps=12,{kind}.blocks_per_sm=1,"
            f"{kind}.stages={stages},{kind}.scheduler=strided,{kind}.cluster=0")


# artifact name: (kernel-config overrides, what the row says it checks)
VARIANTS = {
    # At max-tokens 1024 the 16 experts' segments average 256 rows: the
    # gate/up GEMM takes the persistent schedule by default
    # (groupedGateUpPrefersPersistent: 4 stages, results through shared
    # memory, tiles from a counter, in cluster pairs that share the
    # weights), down the one-warpgroup tiles.
    "moe_grouped_default": ("", "default: gate/up moe_grouped_wgmma 128x256 persistent, 4 stages, "
                            "counter, cluster pairs; down 128x128, one warpgroup"),
    "moe_grouped_128x128": ("kernel-config=moe_grouped_wgmma.tile=128x128x64,"
                            "moe_grouped_wgmma.warps=4,moe_grouped_wgmma.stages=2,"
                            "moe_grouped_wgmma.blocks_per_sm=3,moe_grouped_wgmma.scheduler=strided,"
                            "moe_grouped_wgmma.cluster=0",
                            "moe_grouped_wgmma 128x128, one warpgroup"),
    "moe_grouped_ws4": ("kernel-config=" + persistent("moe_grouped_wgmma", 4),
                        "moe_grouped_wgmma 128x256 persistent, 4 stages (gate/up: results "
                        "through shared memory)"),
    "moe_grouped_ws3": ("kernel-config=" + persistent("moe_grouped_wgmma", 3),
                        "moe_grouped_wgmma 128x256 persistent, 3 stages, bf16 h and y "
                        "through shared memory"),
    # The same with each block claiming its tiles from a device counter
    # (config scheduler, lowering/cuda/TileCounter.h); every T of a check
    # is another launch, so a counter left unreset fails the next T.
    "moe_grouped_ws3c": ("kernel-config=" + persistent("moe_grouped_wgmma", 3)
                         + ",moe_grouped_wgmma.scheduler=counter",
                         "moe_grouped_wgmma 128x256 persistent, 3 stages, tiles claimed "
                         "from a counter"),
    # The gate/up GEMM's persistent blocks in cluster pairs sharing the
    # weights by TMA multicast (MoEGroupedPersistent.cpp, "Pairs"): I 256
    # is two column tiles, so an expert with an odd count of row tiles
    # ends in a solo pair tile (expert 3's 8 tiles at T = 1000: shared
    # pairs alone); rank 0 claims for both from the counter.
    "moe_grouped_pairs": ("kernel-config=" + persistent("moe_grouped_glu", 4)
                          + ",moe_grouped_glu.scheduler=counter,moe_grouped_glu.cluster=2",
                          "gate/up moe_grouped_wgmma 128x256 persistent in cluster pairs "
                          "sharing the weights, counter; down default"),
    # Both GEMMs on the tall [384, 128, 64] tiles (k3-moe-grouped
    # tile-rows=384; MoEGroupedPersistent.cpp consumeTall; docs/moe.md, "Tall tiles"): each consumer
    # multiplies the 64-row chunks of its tile that hold rows (expert 3's
    # 1000 rows at T = 1000: tiles of 384, 384 and 232; T = 5: one chunk).
    "moe_grouped_tall": ("moe-tile-rows=384",
                         "moe_grouped_wgmma 384x128 persistent (tall tiles), 3 stages, "
                         "counter, both GEMMs"),
    # Both GEMMs on the one-warpgroup tile with the rows as wgmma's N in
    # steps of 8 (tile [128, 128, 64, 8], MoEGroupedKernel.h): segments of
    # about T/4 rows end in tiles of every size, each a branch of its own
    # (T = 5: N = 8; T = 200: N = 8 to 64; T = 1000: 128 and a tail).
    "moe_grouped_rows_as_n": ("kernel-config=moe_grouped_wgmma.tile=128x128x64x8,"
                              "moe_grouped_wgmma.warps=4,moe_grouped_wgmma.stages=2,"
                              "moe_grouped_wgmma.blocks_per_sm=3,"
                              "moe_grouped_wgmma.scheduler=strided,moe_grouped_wgmma.cluster=0",
                              "moe_grouped_wgmma 128x128, one warpgroup, rows as wgmma's N "
                              "in steps of 8"),
    # Down GEMM blocks in cluster pairs sharing the rows by TMA multicast
    # (D 512: two pairs of 128-column tiles).
    "moe_grouped_cluster2": ("kernel-config=moe_grouped_down.cluster=2,"
                             "moe_grouped_down.stages=3,moe_grouped_down.blocks_per_sm=2",
                             "moe_grouped_wgmma 128x128, down in cluster pairs"),
}
# The dense GLU MLP (k3-split-glu-mlp: glu_wgmma, then the down linear):
# artifact name: (overrides, what the row says). Bands of 3 row tiles
# (config raster, lowering/cuda/TileRaster.h): at T = 1000 (8 row tiles)
# two whole bands and a partial one, at T = 200 one partial band.
RASTER3 = "glu_wgmma.raster=3,linear.raster=3"
DENSE_VARIANTS = {
    "glu_dense_ws4": ("kernel-config=" + persistent("glu_wgmma", 4),
                      "glu_wgmma 128x256 persistent, 4 stages"),
    "glu_dense_ws3": ("kernel-config=" + persistent("glu_wgmma", 3),
                      "glu_wgmma 128x256 persistent, 3 stages, h through shared memory"),
    "glu_dense_ws3c": ("kernel-config=" + persistent("glu_wgmma", 3)
                       + ",glu_wgmma.scheduler=counter",
                       "glu_wgmma 128x256 persistent, 3 stages, tiles claimed from a counter"),
    "glu_dense_r3": ("kernel-config=" + RASTER3, "glu_wgmma 128x128, bands of 3 row tiles"),
    "glu_dense_ws4_r3": ("kernel-config=" + persistent("glu_wgmma", 4) + "," + RASTER3,
                         "glu_wgmma 128x256 persistent, 4 stages, bands of 3 row tiles"),
}

DENSE_MODEL = """func.func @forward(%x: tensor<?x{D}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}})
    -> (tensor<?x{D}xbf16> {{k3.name = "y"}}) {{
  %wg = k3.weight "wg" : tensor<{I}x{D}xbf16>
  %wu = k3.weight "wu" : tensor<{I}x{D}xbf16>
  %wd = k3.weight "wd" : tensor<{D}x{I}xbf16>
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x{D}xbf16>, tensor<{I}x{D}xbf16>, tensor<{I}x{D}xbf16>, tensor<{D}x{I}xbf16>)
      -> tensor<?x{D}xbf16>
  return %y : tensor<?x{D}xbf16>
}}
"""


def weights(rng) -> dict:
    """bf16 experts (w1, w3, w2) and a dense MLP (wg, wu, wd), values of
    unit-variance products."""
    import ml_dtypes
    c = MOE_GROUPED
    shapes = {"w1": (c["E"], c["I"], c["D"]), "w3": (c["E"], c["I"], c["D"]),
              "w2": (c["E"], c["D"], c["I"]), "wg": (c["I"], c["D"]),
              "wu": (c["I"], c["D"]), "wd": (c["D"], c["I"])}
    return {k: (rng.standard_normal(s) / s[-1] ** 0.5).astype(ml_dtypes.bfloat16)
            for k, s in shapes.items()}


def prepare(out, compile_model, routing, experts_model) -> None:
    """Artifacts, weights, and the sanitizer's inputs (T = 300) under
    ``out``; ``experts_model``: gpu_kernels_check's k3.moe_experts text,
    formatted with the weights' element type W."""
    import ml_dtypes
    from k3ref import model
    for name, (extra, _) in VARIANTS.items():
        compile_model(name, experts_model.format(W="bf16", ATTRS="", **MOE_GROUPED), extra,
                      max_tokens=MAX_TOKENS,
                      max_seqs=1)
    for name, (extra, _) in DENSE_VARIANTS.items():
        compile_model(name, DENSE_MODEL.format(**MOE_GROUPED), extra, max_tokens=MAX_TOKENS,
                      max_seqs=1)
    rng = np.random.default_rng(31)
    model.save_safetensors(out / "moe_grouped.safetensors", weights(rng))
    idx, wts = routing(300, rng, MOE_GROUPED)
    model.save_safetensors(out / "in_moe_grouped.safetensors", {
        "x": rng.standard_normal((300, MOE_GROUPED["D"])).astype(ml_dtypes.bfloat16),
        "idx": idx, "wts": wts})


def silu(a):
    return a / (1 + np.exp(-a))


def check(res, rng, out, routing, bf16_round) -> None:
    """Every variant at every T within 2^-7 normwise of float64 (h rounded
    to bf16 where the kernels store it)."""
    import torch
    import k3
    from k3ref import model
    w = {k: v.astype(np.float64) for k, v in
         model.load_safetensors(out / "moe_grouped.safetensors", to_float64=False).items()}
    c = MOE_GROUPED
    dev = torch.device("cuda:0")

    def run(art, t, **inputs):
        s = k3.Session(str(out / f"{art}.k3bin"), device="cuda:0")
        s.load_weights([str(out / "moe_grouped.safetensors")])
        got = s.run("forward", symbols={"num_tokens": t, "num_seqs": 1}, outputs="dlpack",
                    **inputs)
        y = torch.from_dlpack(got["y"]).double().cpu().numpy()
        s.close()
        return y

    def compare(y, want):
        err = float(np.linalg.norm(y - want) / np.linalg.norm(want))
        if not err < 2.0 ** -7:
            raise AssertionError(f"y err {err:.2e} (bound 2^-7)")
        return {"err_y": err}

    for t in TOKENS:
        x = bf16_round(rng.standard_normal((t, c["D"])))
        idx, wts = routing(t, rng, c)
        want = np.zeros((t, c["D"]))
        for i in range(t):
            for j, e in enumerate(idx[i]):
                h = bf16_round(silu(w["w1"][e] @ x[i]) * (w["w3"][e] @ x[i])).astype(np.float64)
                want[i] += wts[i, j] * (w["w2"][e] @ h)
        xb = torch.from_numpy(x.astype(np.float32)).to(dev).bfloat16()
        for art, (_, kernel) in VARIANTS.items():
            def case(art=art, t=t, xb=xb, idx=idx, wts=wts, want=want):
                y = run(art, t, x=xb, idx=torch.from_numpy(idx).to(dev),
                        wts=torch.from_numpy(wts).to(dev))
                return compare(y, want)
            res.guard(case, case="moe_grouped", impl="k3", variant=kernel, shape={"T": t, **c})
        h = bf16_round(silu(x @ w["wg"].T) * (x @ w["wu"].T)).astype(np.float64)
        dense_want = h @ w["wd"].T
        for name, (_, kernel) in DENSE_VARIANTS.items():
            def dense_case(name=name, t=t, xb=xb, dense_want=dense_want):
                return compare(run(name, t, x=xb), dense_want)
            res.guard(dense_case, case="glu_dense", impl="k3", variant=kernel,
                      shape={"T": t, "D": c["D"], "I": c["I"]})
