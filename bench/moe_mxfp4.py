"""MXFP4 routed experts on the GPU (issue 21), `bench/moe.py --mxfp4`: our
MoE experts with MXFP4 weights (f4E2M1FN: packed E2M1 codes plus one E8M0
scale per 32 inputs, docs/mxfp4.md) beside the same experts in bf16, both
compiled here and run in one process on the same routing and activations.

    .venv/bin/python bench/moe.py prepare --mxfp4    # here
    python3 bench/moe.py run --mxfp4                 # on the GPU machine

Shapes: K3's latent MoE (896 experts, top-16, latent 3584, intermediate
3072) at T in {1, 8, 64} tokens, a decode step's MoE (`k3.decode`: the
dispatch in tiles of 4 rows, the moe_grouped_gemv kernels), and at T in
{1024, 8192} a prefill's (the dispatch in 128-row tiles, the
moe_grouped_wgmma kernels: MXFP4 tiles decoded to bf16 in shared memory
before wgmma, lowering/cuda/MXFP4Tile.h). Prefill rows also report each
grouped GEMM's TFLOP/s from a profiled series (per-kernel CUDA events),
and the MXFP4 kernels' share of the bf16 ones' (issue 21's target: 85 %
at T = 8192).

Weights: random codes (uniform bytes) and scales (bytes 116..120), made
on the device, uploaded with Session.set_weight (codes then scales, the
checkpoint's bytes); the bf16 session gets the dequantised values (exact
in bf16), so both compute the same products. Each row is checked first on
the sampled tokens against float64 experts on the dequantised weights
(bench/moe.py's reference; bound 2^-8 normwise). Reported per row: the
median (CUDA events), the packed weight bytes the touched experts hold,
TB/s over them, and the share of the copy ceiling: those bytes over the
bandwidth of a 4 GiB device copy (bytes read plus written per second)
timed in the same process, against our time.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import moe  # bench/moe.py: its paths, routing, sampled rows and reference
import protocol

OUT, K3OPT, BOUND = moe.OUT, moe.K3OPT, moe.BOUND
TOKENS = tuple(int(t) for t in os.environ.get("K3_MXFP4_TOKENS", "1,8,64").split(",") if t)
PREFILL_TOKENS = tuple(int(t) for t in
                       os.environ.get("K3_MXFP4_PREFILL_TOKENS", "1024,8192").split(",") if t)
# form: (token counts, function attributes)
FORMS = {"decode": (TOKENS, "attributes {k3.decode}"), "prefill": (PREFILL_TOKENS, "")}
CONFIGS = {"k3-latent": moe.CONFIGS_ALL["k3-latent"]}  # (E, top-k, D, I)
MODEL = """func.func @forward(
    %x: tensor<?x{D}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
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
# variant: (weight element type, k3-compile options). Decode: the MXFP4
# GEMV multiplies a warp's 16 rows on the tensor cores (MXFP4WarpMMA.h),
# 4 warps a block by default; 8 or 2 beside it (equal within 2 % in
# moe-mxfp4-nvidia-h200-20261203T092851Z.json). (The CUDA-core form's
# R = 1, 2, 4 and launch-bound variants: bench/results/
# moe-mxfp4-nvidia-h200-20261203T064125Z.json, ...T073931Z.json.)
VARIANTS = {"mxfp4": ("f4E2M1FN", ""),
            "mxfp4-8warps": ("f4E2M1FN", "kernel-config=moe_grouped_gemv.warps=8"),
            "mxfp4-2warps": ("f4E2M1FN", "kernel-config=moe_grouped_gemv.warps=2"),
            "bf16": ("bf16", "")}
# Prefill: the default (three stages, two blocks per SM) and the bf16
# kernel's two stages and three blocks per SM beside it (those variants
# and two stages at two blocks per SM, before the default changed:
# bench/results/moe-mxfp4-nvidia-h200-20261203T092851Z.json).
VARIANTS["mxfp4-wgmma-2stages-3perSM"] = (
    "f4E2M1FN", "kernel-config=moe_grouped_glu.blocks_per_sm=3,moe_grouped_glu.stages=2,"
                "moe_grouped_down.blocks_per_sm=3,moe_grouped_down.stages=2")
VARIANTS["mxfp4-wgmma-4stages-1perSM"] = (
    "f4E2M1FN", "kernel-config=moe_grouped_glu.blocks_per_sm=1,moe_grouped_glu.stages=4,"
                "moe_grouped_down.blocks_per_sm=1,moe_grouped_down.stages=4")
PREFILL_VARIANTS = ("mxfp4", "mxfp4-wgmma-2stages-3perSM", "mxfp4-wgmma-4stages-1perSM", "bf16")
if os.environ.get("K3_MXFP4_VARIANTS"):
    VARIANTS = {k: v for k, v in VARIANTS.items()
                if k in os.environ["K3_MXFP4_VARIANTS"].split(",")}


def artifact(name: str, form: str, variant: str) -> Path:
    return OUT / f"{name}.{form}-{variant}.k3bin"


def form_variants(form: str) -> dict:
    if form == "prefill":
        return {v: c for v, c in VARIANTS.items() if v in PREFILL_VARIANTS}
    return {v: c for v, c in VARIANTS.items() if "wgmma" not in v}


def prepare() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (e, k, d, i) in CONFIGS.items():
        for form, (tokens, attrs) in FORMS.items():
            if not tokens:
                continue
            for variant, (w, extra) in form_variants(form).items():
                src = OUT / f"{name}.{form}-{variant}.mlir"
                src.write_text(MODEL.format(E=e, K=k, D=d, I=i, W=w, ATTRS=attrs))
                opts = (f"target=cuda output={artifact(name, form, variant)} "
                        f"max-tokens={max(tokens)} max-seqs=1 decode-entry=0 "
                        f"activation-dtype=bf16 {extra}")
                subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o",
                                os.devnull], check=True)
    return 0


class MXFP4Weight:
    """Random MXFP4 bytes of one [E, N, K] stack on the device, and its
    dequantised values per expert (float64 or bf16)."""

    def __init__(self, e, n, k, g, dev):
        import torch
        self.codes = torch.randint(0, 256, (e, n, k // 2), dtype=torch.uint8, device=dev,
                                   generator=g)
        self.scales = torch.randint(116, 121, (e, n, k // 32), dtype=torch.uint8, device=dev,
                                    generator=g)
        table = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
        self.table = torch.tensor(table + [-v for v in table], dtype=torch.float64, device=dev)

    def host_bytes(self):
        import torch
        return torch.cat([self.codes.flatten(), self.scales.flatten()]).cpu().numpy()

    def expert(self, e, dtype=None):
        """Expert e's [N, K] values: low nibble = even element (docs/mxfp4.md)."""
        import torch
        c = self.codes[e].long()
        codes = torch.stack([c & 15, c >> 4], dim=-1).flatten(-2)
        v = self.table[codes] * torch.exp2(self.scales[e].double() - 127).repeat_interleave(32, -1)
        return v if dtype is None else v.to(dtype)

    def __getitem__(self, e):  # bench/moe.py's reference indexes w[e]
        return self.expert(e)


def copy_tbps() -> float:
    """HBM bandwidth of a 4 GiB device-to-device copy: bytes read plus
    bytes written over its time (a read-only kernel's ceiling)."""
    import torch
    a = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    row = protocol.summary(protocol.cuda_event_times(lambda: b.copy_(a)))
    del a, b
    torch.cuda.empty_cache()
    return {**row, "TBps": 2 * (4 << 30) / row["median_ms"] / 1e9}


def make_cases(tokens, e, k, d, g, dev, weights) -> list:
    """Activations, routing and the float64 reference on the sampled rows."""
    import torch
    cases = []
    for t in tokens:
        x = torch.randn(t, d, device=dev, generator=g).to(torch.bfloat16)
        idx, wts = moe.routing(t, e, k, g, dev)
        rows = torch.tensor(moe.checked_tokens(t), device=dev)
        cases.append({"T": t, "x": x, "idx": idx, "wts": wts, "rows": rows,
                      "ref": moe.reference(x, idx, wts, *weights, rows)})
    return cases


def open_session(path, elem, weights, e):
    """A session on artifact ``path`` with ``weights`` uploaded: MXFP4 as the
    checkpoint's bytes, bf16 as their dequantised values."""
    import torch
    import k3
    s = k3.Session(str(path), device="cuda:0")
    for wname, w in zip(("w1", "w3", "w2"), weights):
        if elem == "f4E2M1FN":
            s.set_weight(wname, w.host_bytes())
        else:
            full = torch.cat([w.expert(i, torch.bfloat16)[None] for i in range(e)])
            s.set_weight(wname, full.view(torch.int16).cpu().numpy())
            del full
    return s


def checked_run(s, c) -> tuple:
    """One run on case ``c`` checked against float64; (inputs, symbols, error)."""
    import torch
    inputs = dict(x=c["x"], idx=c["idx"], wts=c["wts"])
    syms = {"num_tokens": c["T"], "num_seqs": 1}
    y = torch.from_dlpack(s.run("forward", symbols=syms, outputs="dlpack", **inputs)["y"])
    err = protocol.rel_err(y[c["rows"]], c["ref"])
    if not err < BOUND:
        raise AssertionError(f"error vs f64 {err:.3e} (bound {BOUND:.2e})")
    return inputs, syms, err


def kernel_means(s, inputs, syms) -> dict:
    """Each kernel's mean time from a second, profiled series (its events
    sit between the launches, so the series' own time is not reported)."""
    s.profiling = True
    s.reset_profile()
    protocol.k3_times(s, "forward", symbols=syms, warmup=0, **inputs)
    kernels = {p["kernel"]: {"mean_ms": p["total_ms"] / p["calls"], "calls": p["calls"]}
               for p in s.profile("forward")}
    s.profiling = False
    return kernels


def decode_row(s, c, expert_bytes, ceiling_tbps) -> dict:
    """Time and packed-byte bandwidth of a decode step's experts: the whole
    forward (dispatch and combine included), and the two grouped GEMV
    kernels alone (their profiled means)."""
    import torch
    inputs, syms, err = checked_run(s, c)
    row = {**protocol.summary(protocol.k3_times(s, "forward", symbols=syms, **inputs)),
           "err_vs_oracle": err}
    touched = len(torch.unique(c["idx"]))
    packed = touched * expert_bytes
    row.update(touched_experts=touched, mxfp4_bytes=packed,
               TBps_mxfp4_bytes=packed / row["median_ms"] / 1e9, copy_TBps=ceiling_tbps,
               share_of_copy_ceiling=packed / ceiling_tbps / 1e9 / row["median_ms"])
    row["kernels"] = kernel_means(s, inputs, syms)
    gemv = [v["mean_ms"] for name, v in row["kernels"].items() if "grouped" in name]
    if gemv:
        row["gemv_ms"] = sum(gemv)
        row["gemv_share_of_copy_ceiling"] = packed / ceiling_tbps / 1e9 / row["gemv_ms"]
    return row


def prefill_row(s, c, d, inter, k) -> dict:
    """Time, TFLOP/s of the whole experts and of each grouped GEMM (the
    mean of a second, profiled series: its events sit between launches)."""
    inputs, syms, err = checked_run(s, c)
    row = {**protocol.summary(protocol.k3_times(s, "forward", symbols=syms, **inputs)),
           "err_vs_oracle": err}
    kernels = kernel_means(s, inputs, syms)
    pairs = c["T"] * k
    flop = {"grouped_glu": 2.0 * pairs * 2 * d * inter, "grouped_down": 2.0 * pairs * d * inter}
    row["kernels"] = kernels
    row["TFLOPs"] = sum(flop.values()) / row["median_ms"] / 1e9
    for key, f in flop.items():
        ms = [v["mean_ms"] for name, v in kernels.items() if key in name]
        if ms:
            row[f"{key}_TFLOPs"] = f / ms[0] / 1e9
    return row


def run_form(res, name, form, cfg, weights, cases, ceiling_tbps) -> dict:
    """Every variant of one form; returns the prefill rows by (variant, T)."""
    import torch
    e, k, d, inter = cfg
    shapes = {c["T"]: {"T": c["T"], "E": e, "top_k": k, "D": d, "I": inter} for c in cases}
    kernel = "moe_grouped_gemv" if form == "decode" else "moe_grouped_wgmma"
    # Packed bytes an expert's three projections hold.
    expert_bytes = 3 * d * inter * (1 / 2 + 1 / 32)
    done = {}
    for variant, (elem, _) in form_variants(form).items():
        label = f"{form} {kernel} {variant}"
        try:
            s = open_session(artifact(name, form, variant), elem, weights, e)
        except Exception as ex:  # noqa: BLE001
            for t in shapes:
                res.failed(f"{type(ex).__name__}: {ex}", case=name, impl="k3", variant=label,
                           shape=shapes[t])
            continue
        for c in cases:
            if form == "decode":
                fn = lambda c=c: decode_row(s, c, expert_bytes, ceiling_tbps)  # noqa: E731
            else:
                fn = lambda c=c: prefill_row(s, c, d, inter, k)  # noqa: E731
            done[(variant, c["T"])] = res.guard(fn, case=name, impl="k3", variant=label,
                                                shape=shapes[c["T"]])
        s.close()
        torch.cuda.empty_cache()
    return done


def add_prefill_ratios(res, name, cfg, done) -> None:
    """MXFP4's grouped GEMMs' TFLOP/s over bf16's, per T (issue 21: >= 0.85
    at T = 8192)."""
    e, k, d, inter = cfg
    for (variant, t) in sorted(k for k in done if k[0] != "bf16"):
        m, b = done[(variant, t)], done.get(("bf16", t), {})
        shape = {"T": t, "E": e, "top_k": k, "D": d, "I": inter}
        label = f"prefill {variant} / bf16"
        if m.get("status") != "ok" or b.get("status") != "ok":
            res.failed("a prefill row failed", case=name, impl="k3", variant=label,
                       shape=shape)
            continue
        ratio = {f"{key}_ratio": m[f"{key}_TFLOPs"] / b[f"{key}_TFLOPs"]
                 for key in ("grouped_glu", "grouped_down")
                 if f"{key}_TFLOPs" in m and f"{key}_TFLOPs" in b}
        ratio["whole_ratio"] = b["median_ms"] / m["median_ms"]
        res.add(case=name, impl="k3", variant=label, shape=shape, **ratio)


def run_config(res, name, cfg, ceiling_tbps) -> None:
    import torch
    e, k, d, inter = cfg
    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(21)
    weights = (MXFP4Weight(e, inter, d, g, dev), MXFP4Weight(e, inter, d, g, dev),
               MXFP4Weight(e, d, inter, g, dev))
    for form, (tokens, _) in FORMS.items():
        if not tokens:
            continue
        cases = make_cases(tokens, e, k, d, g, dev, weights)
        done = run_form(res, name, form, cfg, weights, cases, ceiling_tbps)
        if form == "prefill":
            add_prefill_ratios(res, name, cfg, done)
        del cases
        torch.cuda.empty_cache()


def run() -> int:
    res = protocol.Results("moe", tag="mxfp4")
    try:
        copy = copy_tbps()
        ceiling = copy["TBps"]
        res.add(case="copy", impl="torch", variant="4 GiB device copy (read + write)",
                shape={}, **copy)
    except Exception as ex:  # noqa: BLE001
        res.failed(f"{type(ex).__name__}: {ex}", case="copy", impl="torch", shape={})
        ceiling = float("nan")
    for name, (e, k, d, inter) in CONFIGS.items():
        try:
            run_config(res, name, (e, k, d, inter), ceiling)
        except Exception as ex:  # noqa: BLE001
            res.failed(f"{type(ex).__name__}: {ex}", case=name, impl="k3",
                       shape={"E": e, "top_k": k, "D": d, "I": inter})
    res.write()
    return 1 if res.failures else 0
