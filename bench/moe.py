"""MoE experts on the GPU (issue 15): our grouped path (k3-moe-grouped:
moe_dispatch_rows, the two moe_grouped_wgmma GEMMs, the combine) beside
torch routing plus ``torch._grouped_mm`` on the same device tensors, each
case checked against a float64 reference first (bench/protocol.py).

    .venv/bin/python bench/moe.py prepare     # here: one artifact per config
    python3 bench/moe.py run                  # on the GPU machine
    (with --mxfp4: MXFP4 experts beside bf16, bench/moe_mxfp4.py)

Configs: Kimi-Linear-48B (256 experts, top-8, hidden 2304, intermediate
1024) and K3's latent MoE (896 experts, top-16, latent 3584, intermediate
3072), at T in {1, 64, 1024, 8192}. The routing is given (ids drawn
uniformly without repeats per token, weights from a softmax): the rows time
the experts, from the dispatch to the combine. The weights are inputs of
the compiled function, so both sides read the same device tensors (the
session copies its inputs into its arena before the timed launches). K3's
experts are 59 GB in bf16: torch's copy plus the session's fill 118 GB of
the H200's 141; its anchor therefore multiplies gate and up as two grouped
GEMMs on views of W1 and W3 (a fused [E, D, 2I] copy would not fit), while
Kimi's anchor uses one fused gate/up grouped GEMM as ANCHORS.md measured.

Rows per (config, T):
* ``k3`` / ``grouped``: our whole experts op (median of the entry, CUDA
  events) and, from the runtime's per-kernel profile over the timed runs,
  each kernel's mean; ``gateup_TFLOPs`` is the gate/up GEMM's rate
  (2 T K D 2I flops over its mean time), the figure ANCHORS.md's grouped
  GEMM row measures.
* ``torch`` / ``grouped_mm``: argsort by expert, gather, grouped GEMMs, SiLU
  gate, weighted index_add back to token order, bf16 out.
Both are checked on sampled tokens (all up to 256, else 256 spread over T
including the first and last) against float64 with h rounded to bf16 where
both store it; bound 2^-8 normwise (the bf16 output's own rounding).
* ``transformers`` / ``KimiLinearExperts``: transformers' experts block on
  the same tensors, its eager loop and its grouped_mm path
  (bench/moe_transformers.py; Kimi only: it takes the fused gate/up
  operand, which K3's experts leave no room for).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
import protocol  # noqa: E402
import moe_transformers  # noqa: E402

OUT = ROOT / "out" / "moe"
K3OPT = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin")) / "k3-opt"
TOKENS = tuple(int(t) for t in os.environ.get("K3_MOE_TOKENS", "1,64,1024,8192").split(","))
# name: (experts, top-k, width D, intermediate I)
CONFIGS_ALL = {"kimi-linear": (256, 8, 2304, 1024), "k3-latent": (896, 16, 3584, 3072)}
# Run only when K3_MOE_CONFIGS names them: K3's segment length (16 x 8192
# / 896 = 146 rows at T = 8192) with 224 experts top-4 and K3's widths,
# 15 GB of experts where K3's 59 GB do not fit an H100 twice.
CONFIGS_TRIAL = {"k3-segments-e224": (224, 4, 3584, 3072)}
CONFIGS = dict(CONFIGS_ALL)
if os.environ.get("K3_MOE_CONFIGS"):
    CONFIGS = {k: v for k, v in {**CONFIGS_ALL, **CONFIGS_TRIAL}.items()
               if k in os.environ["K3_MOE_CONFIGS"].split(",")}
# Artifacts per config: the default kernel configs (two stages, three
# blocks per SM since the tuning rows of
# bench/results/moe-nvidia-h200-20261202T023517Z.json), and the first
# default (four stages, one block per SM) for comparison.
def specialised(kinds, stages=4):
    """Overrides for the warp-specialised wgmma schedule (a producer and two
    consumer warpgroups, 128 x 256 tiles, one block per SM; docs/moe.md)
    of the given kernel kinds."""
    return ",".join(f"{k}.tile=128x256x64,{k}.warps=12,{k}.blocks_per_sm=1,{k}.stages={stages},"
                    f"{k}.scheduler=strided,{k}.cluster=0" for k in kinds)


WS = "kernel-config=" + specialised(("moe_grouped_wgmma", "glu_wgmma", "linear_tma_wgmma"))
WS_SHARED = "kernel-config=" + specialised(("moe_grouped_wgmma", "glu_wgmma", "linear_tma_wgmma"), 3)
VARIANTS = {"default": "",
            "stages4-1perSM": "kernel-config=moe_grouped_wgmma.tile=128x128x64,moe_grouped_wgmma.warps=4,"
                              "moe_grouped_wgmma.scheduler=strided,"
                              "moe_grouped_wgmma.stages=4,moe_grouped_wgmma.blocks_per_sm=1,"
                              "moe_grouped_wgmma.cluster=0",
            # The gate/up GEMM on the one-warpgroup tiles (the default before
            # groupedGateUpPrefersPersistent; still the default where the
            # experts' segments are short, as K3's).
            "gateup-128x128": "kernel-config=moe_grouped_glu.tile=128x128x64,moe_grouped_glu.warps=4,"
                              "moe_grouped_glu.stages=2,moe_grouped_glu.blocks_per_sm=3,"
                              "moe_grouped_glu.scheduler=strided,moe_grouped_glu.cluster=0",
            "ws-4stages": WS,
            # Down GEMM blocks in cluster pairs sharing the rows' tiles by
            # TMA multicast (MoEGroupedKernel.h; 3 stages or more).
            "down-cluster2": "kernel-config=moe_grouped_down.cluster=2,moe_grouped_down.stages=3,"
                             "moe_grouped_down.blocks_per_sm=2"}
# Trial schedules, run only when K3_MOE_VARIANTS names them, so that a
# default run opens no extra session of each config's weights (K3's
# experts are 59 GB). The schedules measured and set aside earlier (the
# down GEMM's stage counts and 4-stage pairs, the gate/up GEMM at 3 and 4
# stages strided or counted, the 3-stage down on the counter) keep their
# rows under bench/results by name; docs/moe.md gives each schedule.
TRIAL_VARIANTS = {
    # Every grouped and dense wgmma GEMM persistent at 3 stages, bf16
    # results through shared memory and TMA stores (MoEGroupedPersistent.cpp).
    "ws-shared": WS_SHARED,
    # The gate/up GEMM in cluster pairs that share the weights' tiles by
    # TMA multicast (MoEGroupedPersistent.cpp, "Pairs"): the default since
    # 2026-12-06 where the column tiles pair up (Kimi-Linear's).
    "gateup-pairs": "kernel-config=" + specialised(("moe_grouped_glu",), 4)
                    + ",moe_grouped_glu.scheduler=counter,moe_grouped_glu.cluster=2",
    # The down GEMM persistent at 4 stages (results from registers: its 256
    # columns do not fit beside them), tiles from the counter.
    "down-ws4c": "kernel-config=" + specialised(("moe_grouped_down",), 4)
                 + ",moe_grouped_down.scheduler=counter",
    # Both grouped GEMMs (each in its default schedule) prefetching the
    # TMA tiles of the step 2 or 4 k-steps past each load into L2
    # (MoEGroupedKernel.cpp, prefetchAhead).
    "prefetch2": "kernel-config=moe_grouped_wgmma.prefetch=2",
    "prefetch4": "kernel-config=moe_grouped_wgmma.prefetch=4",
    # Both grouped GEMMs on the tall [384, 128, 64] tiles (k3-moe-grouped
    # tile-rows=384): an expert's segment of up to 384 rows reads each
    # weight tile once (docs/moe.md, "Tall tiles").
    "tall": "moe-tile-rows=384",
    # The down GEMM alone prefetching (the gate/up GEMM's default producer
    # already runs 4 stages ahead).
    "down-prefetch4": "kernel-config=moe_grouped_down.prefetch=4",
    # Both grouped GEMMs on the one-warpgroup tile with a tile's rows as
    # wgmma's N in steps of 8 (tile [128, 128, 64, 8], MoEGroupedKernel.h):
    # an expert's last tile computes its rows rounded up to 8, not to 64.
    "rows-as-n8": "kernel-config=" + ",".join(
        f"moe_grouped_wgmma.{k}" for k in ("tile=128x128x64x8", "warps=4", "stages=2",
                                           "blocks_per_sm=3", "scheduler=strided",
                                           "cluster=0")),
    # The down GEMM alone so (the gate/up GEMM keeps its default schedule).
    "down-rows-as-n8": "kernel-config=moe_grouped_down@prefill.tile=128x128x64x8"}
if os.environ.get("K3_MOE_VARIANTS"):
    VARIANTS = {k: v for k, v in {**VARIANTS, **TRIAL_VARIANTS}.items()
                if k in os.environ["K3_MOE_VARIANTS"].split(",")}
# Dense GLU MLPs (k3-split-glu-mlp: glu_wgmma + the wgmma linear): Kimi-
# Linear's first-layer MLP and its shared expert: name: (D, I).
DENSE = {"kimi-linear-dense": (2304, 9216), "kimi-linear-shared": (2304, 1024)}
if os.environ.get("K3_MOE_CONFIGS"):
    DENSE = {k: v for k, v in DENSE.items() if k in os.environ["K3_MOE_CONFIGS"].split(",")}
DENSE_MODEL = """func.func @forward(
    %x: tensor<?x{D}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %wg: tensor<{I}x{D}xbf16> {{k3.name = "wg"}}, %wu: tensor<{I}x{D}xbf16> {{k3.name = "wu"}},
    %wd: tensor<{D}x{I}xbf16> {{k3.name = "wd"}}) -> (tensor<?x{D}xbf16> {{k3.name = "y"}}) {{
  %y = k3.glu_mlp silu %x, %wg, %wu, %wd
      : (tensor<?x{D}xbf16>, tensor<{I}x{D}xbf16>, tensor<{I}x{D}xbf16>, tensor<{D}x{I}xbf16>)
      -> tensor<?x{D}xbf16>
  return %y : tensor<?x{D}xbf16>
}}
"""
DENSE_VARIANTS = {"default": "", "ws-4stages": WS, "ws-shared": WS_SHARED,
                  "ws-shared-counter": WS_SHARED + ",glu_wgmma.scheduler=counter",
                  # The GLU alone at 4 stages (its 128 result columns a tile
                  # through shared memory) with tiles from the counter.
                  "glu-ws4": "kernel-config=" + specialised(("glu_wgmma",), 4),
                  "glu-ws4-counter": "kernel-config=" + specialised(("glu_wgmma",), 4)
                                     + ",glu_wgmma.scheduler=counter"}
if os.environ.get("K3_MOE_VARIANTS"):
    DENSE_VARIANTS = {k: v for k, v in DENSE_VARIANTS.items()
                      if k in os.environ["K3_MOE_VARIANTS"].split(",")}
CHECKED_TOKENS = 256
BOUND = 2.0 ** -8
MODEL = """func.func @forward(
    %x: tensor<?x{D}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %idx: tensor<?x{K}xi32> {{k3.name = "idx", k3.dims = array<i64: -1, {K}>}},
    %wts: tensor<?x{K}xf32> {{k3.name = "wts", k3.dims = array<i64: -1, {K}>}},
    %w1: tensor<{E}x{I}x{D}xbf16> {{k3.name = "w1"}}, %w3: tensor<{E}x{I}x{D}xbf16> {{k3.name = "w3"}},
    %w2: tensor<{E}x{D}x{I}xbf16> {{k3.name = "w2"}}) -> (tensor<?x{D}xbf16> {{k3.name = "y"}}) {{
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x{D}xbf16>, tensor<?x{K}xi32>, tensor<?x{K}xf32>, tensor<{E}x{I}x{D}xbf16>,
         tensor<{E}x{I}x{D}xbf16>, tensor<{E}x{D}x{I}xbf16>) -> tensor<?x{D}xbf16>
  return %y : tensor<?x{D}xbf16>
}}
"""


def artifact(name: str, variant: str) -> Path:
    return OUT / f"{name}.{variant}.k3bin"


def prepare() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (e, k, d, i) in CONFIGS.items():
        src = OUT / f"{name}.mlir"
        src.write_text(MODEL.format(E=e, K=k, D=d, I=i))
        for variant, extra in VARIANTS.items():
            opts = (f"target=cuda output={artifact(name, variant)} max-tokens={max(TOKENS)} "
                    f"max-seqs=1 decode-entry=0 activation-dtype=bf16 {extra}")
            subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o", os.devnull],
                           check=True)
    for name, (d, i) in DENSE.items():
        src = OUT / f"{name}.mlir"
        src.write_text(DENSE_MODEL.format(D=d, I=i))
        for variant, extra in DENSE_VARIANTS.items():
            opts = (f"target=cuda output={artifact(name, variant)} max-tokens={max(TOKENS)} "
                    f"max-seqs=1 decode-entry=0 activation-dtype=bf16 {extra}")
            subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o", os.devnull],
                           check=True)
    prepare_sanitizer_case()
    return 0


def prepare_sanitizer_case() -> None:
    """A small model for compute-sanitizer through k3-run (the real configs'
    weights are GBs of inputs): 8 experts, top-2, D 256, I 128, 300 tokens
    (three row tiles for the busiest experts, one expert unused)."""
    import numpy as np
    from k3ref.model import save_safetensors
    e, k, d, i, t = 8, 2, 256, 128, 300
    src = OUT / "small.mlir"
    src.write_text(MODEL.format(E=e, K=k, D=d, I=i))
    opts = (f"target=cuda output={OUT / 'small.k3bin'} max-tokens=512 max-seqs=1 decode-entry=0 "
            "activation-dtype=bf16")
    subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o", os.devnull], check=True)
    # The same with the warp-specialised schedule (D 256, 2 x I = 256: one
    # column tile each).
    subprocess.run([str(K3OPT), str(src),
                    f"--k3-compile={opts.replace('small.k3bin', 'small-ws.k3bin')} {WS}",
                    "-o", os.devnull], check=True)
    import ml_dtypes
    rng = np.random.default_rng(15)

    def bf16(shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(ml_dtypes.bfloat16)
    idx = np.stack([rng.choice(e - 1, size=k, replace=False) for _ in range(t)]).astype(np.int32)
    save_safetensors(str(OUT / "in_small.safetensors"), {
        "x": bf16((t, d)), "idx": idx, "wts": rng.random((t, k)).astype(np.float32),
        "w1": bf16((e, i, d), 1 / 16), "w3": bf16((e, i, d), 1 / 16), "w2": bf16((e, d, i), 1 / 16)})


def checked_tokens(t: int) -> list[int]:
    if t <= CHECKED_TOKENS:
        return list(range(t))
    step = (t - 1) / (CHECKED_TOKENS - 1)
    return sorted({round(j * step) for j in range(CHECKED_TOKENS)})


def routing(t, e, k, g, dev):
    import torch
    idx = torch.rand(t, e, device=dev, generator=g).argsort(dim=1)[:, :k].to(torch.int32)
    wts = torch.softmax(torch.randn(t, k, device=dev, generator=g), dim=1).float()
    return idx.contiguous(), wts.contiguous()


def reference(x, idx, wts, w1, w3, w2, rows):
    """float64 experts on the sampled tokens, expert by expert; h rounded to
    bf16 where both implementations store it."""
    import torch
    xs, ids, ws = x[rows].double(), idx[rows].long(), wts[rows].double()
    y = torch.zeros(len(rows), x.shape[1], dtype=torch.float64, device=x.device)
    for e in torch.unique(ids).tolist():
        t, j = (ids == e).nonzero(as_tuple=True)
        a = xs[t]
        h = torch.nn.functional.silu(a @ w1[e].double().T) * (a @ w3[e].double().T)
        h = h.to(torch.bfloat16).double()
        y.index_add_(0, t, (h @ w2[e].double().T) * ws[t, j, None])
    return y


def torch_experts(x, idx, wts, w1, w3, w2, w13t):
    """torch routing + torch._grouped_mm: sort the (token, slot) pairs by
    expert, grouped GEMMs over the segments, weighted index_add back."""
    import torch
    t, k = idx.shape
    e, inter = w1.shape[0], w1.shape[1]
    flat = idx.flatten().long()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=e), 0).to(torch.int32)
    tok = order // k
    xs = x[tok]
    if w13t is not None:
        gu = torch._grouped_mm(xs, w13t, offs=offs)
        g, u = gu[:, :inter], gu[:, inter:]
    else:
        g = torch._grouped_mm(xs, w1.transpose(-2, -1), offs=offs)
        u = torch._grouped_mm(xs, w3.transpose(-2, -1), offs=offs)
    h = torch.nn.functional.silu(g) * u
    out = torch._grouped_mm(h, w2.transpose(-2, -1), offs=offs)
    y = torch.zeros(t, x.shape[1], dtype=torch.float32, device=x.device)
    y.index_add_(0, tok, out.float() * wts.flatten()[order, None])
    return y.to(torch.bfloat16)


def make_cases(e, k, d, g, dev, weights):
    """Per T: the inputs, the sampled rows and their f64 reference."""
    import torch
    cases = []
    for t in TOKENS:
        x = torch.randn(t, d, device=dev, generator=g).to(torch.bfloat16)
        idx, wts = routing(t, e, k, g, dev)
        rows = torch.tensor(checked_tokens(t), device=dev)
        cases.append({"T": t, "x": x, "idx": idx, "wts": wts, "rows": rows,
                      "ref": reference(x, idx, wts, *weights, rows)})
    return cases


def ours(s, c, weights, gateup_flop, flop):
    """One checked, timed run of session ``s`` on case ``c``."""
    import torch
    w1, w3, w2 = weights
    inputs = dict(x=c["x"], idx=c["idx"], wts=c["wts"], w1=w1, w3=w3, w2=w2)
    syms = {"num_tokens": c["T"], "num_seqs": 1}
    y = torch.from_dlpack(s.run("forward", symbols=syms, outputs="dlpack", **inputs)["y"])
    err = protocol.rel_err(y[c["rows"]], c["ref"])
    if not err < BOUND:
        raise AssertionError(f"error vs f64 {err:.3e} (bound {BOUND:.2e})")
    ms = protocol.k3_times(s, "forward", symbols=syms, **inputs)
    # Per-kernel means from a second, profiled series (the profile's events
    # sit between the launches).
    s.profiling = True
    s.reset_profile()
    protocol.k3_times(s, "forward", symbols=syms, warmup=0, **inputs)
    kernels = {p["kernel"]: {"mean_ms": p["total_ms"] / p["calls"], "min_ms": p["min_ms"],
                             "max_ms": p["max_ms"], "calls": p["calls"]}
               for p in s.profile("forward")}
    s.profiling = False
    row = {**protocol.summary(ms), "err_vs_oracle": err, "kernels": kernels}
    row["TFLOPs"] = flop / row["median_ms"] / 1e9
    glu = [v for name, v in kernels.items() if "grouped_glu" in name]
    if glu:
        row["gateup_TFLOPs"] = gateup_flop / glu[0]["mean_ms"] / 1e9
    return row


def anchors(res, name, c, weights, w13t, shape, gateup_flop, flop):
    """torch's rows on case ``c``: the whole experts, and its gate/up
    grouped GEMM alone (where the fused operand exists)."""
    import torch
    x, idx, wts = c["x"], c["idx"], c["wts"]
    e, k = weights[0].shape[0], idx.shape[1]

    def whole():
        y = torch_experts(x, idx, wts, *weights, w13t)
        err = protocol.rel_err(y[c["rows"]], c["ref"])
        ms = protocol.cuda_event_times(lambda: torch_experts(x, idx, wts, *weights, w13t))
        row = {**protocol.summary(ms), "err_vs_oracle": err}
        return {**row, "TFLOPs": flop / row["median_ms"] / 1e9}
    variant = "grouped_mm (fused gate/up)" if w13t is not None else "grouped_mm (gate, up apart)"
    res.guard(whole, case=name, impl="torch", variant=variant, shape=shape)
    if w13t is None:
        return
    # transformers' experts block on the same fused gate/up operand.
    moe_transformers.rows(res, name, c, w13t.transpose(-2, -1), weights[2], shape, flop)
    flat = idx.flatten().long()
    xs = x[torch.argsort(flat, stable=True) // k]
    offs = torch.cumsum(torch.bincount(flat, minlength=e), 0).to(torch.int32)

    def gate_up_alone():
        row = protocol.summary(protocol.cuda_event_times(
            lambda: torch._grouped_mm(xs, w13t, offs=offs)))
        return {**row, "gateup_TFLOPs": gateup_flop / row["median_ms"] / 1e9}
    res.guard(gate_up_alone, case=name, impl="torch", variant="grouped_mm gate/up alone",
              shape=shape)


def run_config(res, name, e, k, d, inter) -> None:
    import torch
    import k3
    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(e + k)
    shapes = {t: {"T": t, "E": e, "top_k": k, "D": d, "I": inter} for t in TOKENS}
    try:
        weights = ((torch.randn(e, inter, d, device=dev, generator=g) / d ** 0.5).to(torch.bfloat16),
                   (torch.randn(e, inter, d, device=dev, generator=g) / d ** 0.5).to(torch.bfloat16),
                   (torch.randn(e, d, inter, device=dev, generator=g) / inter ** 0.5)
                   .to(torch.bfloat16))
        # The fused gate/up operand where memory allows (see the docstring).
        w13t = (torch.cat(weights[:2], 1).transpose(-2, -1) if e * inter * d * 4 < 8e9 else None)
        cases = make_cases(e, k, d, g, dev, weights)
        torch.cuda.empty_cache()  # randn's f32 temporaries
    except Exception as ex:  # noqa: BLE001
        for t in TOKENS:
            res.failed(f"{type(ex).__name__}: {ex}", case=name, impl="k3", shape=shapes[t])
        return
    flops = {t: (2.0 * t * k * 2 * d * inter, 2.0 * t * k * 3 * d * inter) for t in TOKENS}
    # One session at a time: each holds its own copy of the weights.
    for variant in VARIANTS:
        try:
            s = k3.Session(str(artifact(name, variant)), device="cuda:0")
        except Exception as ex:  # noqa: BLE001
            for t in TOKENS:
                res.failed(f"{type(ex).__name__}: {ex}", case=name, impl="k3",
                           variant=f"grouped {variant}", shape=shapes[t])
            continue
        for c in cases:
            res.guard(lambda: ours(s, c, weights, *flops[c["T"]]), case=name, impl="k3",
                      variant=f"grouped {variant}", shape=shapes[c["T"]])
        s.close()
        torch.cuda.empty_cache()
    for c in cases:
        anchors(res, name, c, weights, w13t, shapes[c["T"]], *flops[c["T"]])


def run_dense(res, name, d, inter) -> None:
    """A dense GLU MLP: ours (glu_wgmma + the wgmma linear) beside torch
    (cuBLAS for the three GEMMs, SiLU gate in between), checked first
    against float64 with h rounded to bf16 on the sampled rows."""
    import torch
    import k3
    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(d + inter)
    wg, wu = ((torch.randn(inter, d, device=dev, generator=g) / d ** 0.5).to(torch.bfloat16)
              for _ in range(2))
    wd = (torch.randn(d, inter, device=dev, generator=g) / inter ** 0.5).to(torch.bfloat16)
    for variant in DENSE_VARIANTS:
        s = k3.Session(str(artifact(name, variant)), device="cuda:0")
        run_dense_variant(res, name, variant, s, d, inter, wg, wu, wd, g)
        s.close()


def run_dense_variant(res, name, variant, s, d, inter, wg, wu, wd, g) -> None:
    import torch
    dev = torch.device("cuda:0")
    for t in TOKENS:
        x = torch.randn(t, d, device=dev, generator=g).to(torch.bfloat16)
        rows = torch.tensor(checked_tokens(t), device=dev)
        xs = x[rows].double()
        h = (torch.nn.functional.silu(xs @ wg.double().T) * (xs @ wu.double().T))
        ref = h.to(torch.bfloat16).double() @ wd.double().T
        shape = {"T": t, "D": d, "I": inter}
        flop = 2.0 * t * 3 * d * inter

        def ours():
            syms = {"num_tokens": t, "num_seqs": 1}
            inputs = dict(x=x, wg=wg, wu=wu, wd=wd)
            y = torch.from_dlpack(s.run("forward", symbols=syms, outputs="dlpack", **inputs)["y"])
            err = protocol.rel_err(y[rows], ref)
            if not err < BOUND:
                raise AssertionError(f"error vs f64 {err:.3e} (bound {BOUND:.2e})")
            row = {**protocol.summary(protocol.k3_times(s, "forward", symbols=syms, **inputs)),
                   "err_vs_oracle": err}
            return {**row, "TFLOPs": flop / row["median_ms"] / 1e9}

        def torch_mlp():
            return (torch.nn.functional.silu(x @ wg.T) * (x @ wu.T)) @ wd.T

        def anchor():
            err = protocol.rel_err(torch_mlp()[rows], ref)
            row = {**protocol.summary(protocol.cuda_event_times(torch_mlp)), "err_vs_oracle": err}
            return {**row, "TFLOPs": flop / row["median_ms"] / 1e9}
        res.guard(ours, case=name, impl="k3", variant=f"glu_wgmma + linear_tma_wgmma ({variant})",
                  shape=shape)
        if variant == "default":
            res.guard(anchor, case=name, impl="torch", variant="cuBLAS x3 + SiLU", shape=shape)


def run() -> int:
    import torch
    res = protocol.Results("moe")
    for name, (d, inter) in DENSE.items():
        try:
            run_dense(res, name, d, inter)
        except Exception as ex:  # noqa: BLE001
            res.failed(f"{type(ex).__name__}: {ex}", case=name, impl="k3", shape={"D": d, "I": inter})
        torch.cuda.empty_cache()
    for name, (e, k, d, inter) in CONFIGS.items():
        run_config(res, name, e, k, d, inter)
        torch.cuda.empty_cache()
    res.write()
    return 1 if res.failures else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--mxfp4" in args:  # MXFP4 experts beside bf16 (bench/moe_mxfp4.py)
        import moe_mxfp4
        args.remove("--mxfp4")
        sys.exit(moe_mxfp4.prepare() if args == ["prepare"] else moe_mxfp4.run())
    sys.exit(prepare() if args == ["prepare"] else run())
