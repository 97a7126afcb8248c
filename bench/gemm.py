"""k3.linear on the GPU (issue 14): our generated kernels beside cuBLAS
(torch.matmul) on the same device tensors, each case checked against an
f64 reference first, by the protocol of bench/protocol.py.

    .venv/bin/python bench/gemm.py prepare     # here: two artifacts per shape
    python3 bench/gemm.py run                  # on the GPU machine

Shapes: the k3.linear projections of Kimi-Linear-48B (hidden 2304; KDA and
MLA with 32 heads; the LM head) and of K3 (hidden 7168; 96 heads; q_lora
1536, kv_lora 512), from their configs (bench/configs/, ../shared/K3-SPEC.md),
y[T, N] = x[T, K] W[N, K]^T with bf16 x and W and f32 y (and, in the
`prefill-bf16` variant, bf16 y as the bf16 precision policy writes it), at
T in {1, 16, 128, 1024, 8192}. (The MoE experts and the GLU MLPs are their own ops, not
k3.linear: bench/moe.py's.)

Artifacts per shape: `prefill` is what k3-compile chooses for a prefill
entry (the TMA + wgmma kernel where N % 128 = 0 and K % 64 = 0, else the
GEMV), `gemv` the GEMV that a decode entry uses (kernel linear_gemv: on the
tensor cores for these bf16 shapes, tile [16, 8(, S)]) and `gemv-cores` its
CUDA-core form (tile [2, 4], the default before 2026-12-03), side by side.
The GEMVs run at T <= 128 only: they read the weights once per 4 or 8
tokens, so at T = 8192 they would take seconds per call and say nothing
new.

The check: f32 sums of exact bf16 products, against float64, normwise over
the checked rows (all rows up to T = 1024; beyond, the first and last 64,
which cover the first and last tiles), bound K u (u = 2^-24, the inner
product's first-order error bound). Large K3 shapes at
T = 8192 allocate y of several GB; the H200 has room.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
import protocol  # noqa: E402

OUT = ROOT / "out" / "gemm"
K3OPT = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin")) / "k3-opt"
TOKENS = (1, 16, 128, 1024, 8192)
GEMV_MAX_TOKENS = 128
# (name, N, K): every k3.linear of the two models' layers.
SHAPES = (
    ("kl-kda-qkv", 4096, 2304),      # q, k, v projections (32 x 128), each
    ("kl-kda-gate-a", 128, 2304),    # f_a / g_a low-rank down
    ("kl-kda-gate-b", 4096, 128),    # f_b / g_b up
    ("kl-kda-o", 2304, 4096),
    ("kl-mla-q", 6144, 2304),        # 32 x (128 + 64)
    ("kl-mla-kv-a", 576, 2304),      # c_kv 512 + k_pe 64
    ("kl-mla-kv-b", 8192, 512),      # 32 x (128 + 128)
    ("kl-lm-head", 163840, 2304),
    ("k3-kda-qkv", 12288, 7168),     # 96 x 128
    ("k3-kda-o", 7168, 12288),
    ("k3-mla-q-a", 1536, 7168),
    ("k3-mla-q-b", 18432, 1536),     # 96 x 192
    ("k3-mla-kv-a", 576, 7168),
    ("k3-mla-kv-b", 24576, 512),     # 96 x 256
    ("kl-kda-beta", 32, 2304),       # b_proj: a beta per head
    ("kl-router", 256, 2304),        # the router's logits (k3-split-router)
    ("k3-kda-beta", 96, 7168),
    ("k3-router", 896, 7168),
    ("k3-moe-latent-down", 3584, 7168),  # latent MoE: down to 3584 ...
    ("k3-moe-latent-up", 7168, 3584),    # ... and back up after the experts
    ("k3-lm-head", 163840, 7168),
)
if os.environ.get("K3_GEMM_SHAPES"):  # e.g. "kl-kda-qkv,k3-kda-o"
    keep = os.environ["K3_GEMM_SHAPES"].split(",")
    SHAPES = tuple(s for s in SHAPES if s[0] in keep)
if os.environ.get("K3_GEMM_TOKENS"):  # e.g. "1024,8192"
    TOKENS = tuple(int(t) for t in os.environ["K3_GEMM_TOKENS"].split(","))
# The warp-specialised wgmma schedule (a producer and two consumer
# warpgroups, 128 x 256 tiles, one block per SM; docs/gemm.md).
SPECIALISED = ("linear.kernel=linear_tma_wgmma,linear.tile=128x256x64,linear.warps=12,"
               "linear.blocks_per_sm=1,linear.stages=")
VARIANTS = {"prefill": "", "gemv": "kernel-config=linear.kernel=linear_gemv",
            "gemv-cores": ("kernel-config=linear.kernel=linear_gemv,linear.tile=2x4,"
                           "linear.warps=4,linear.blocks_per_sm=0"),
            # 16 tokens a tile without a K split (S = 1): too few warps for
            # narrow weights (gemm-nvidia-h100-80gb-hbm3-20261205T134129Z.json).
            "gemv-tt16": "kernel-config=linear.kernel=linear_gemv,linear.tile=16x16",
            # 8 tokens a tile with the default tile's K split S (read from
            # the default GEMV's config): the default before TT = 16 became
            # it where a call may have more than 8 rows (docs/gemm.md).
            "gemv-tt8s": "kernel-config=linear.kernel=linear_gemv,linear.tile=16x8x{S}",
            "prefill-ws-4stages": f"kernel-config={SPECIALISED}4",
            "prefill-ws-3stages": f"kernel-config={SPECIALISED}3",
            # The same in cluster pairs: two row tiles share W's tiles by
            # TMA multicast (docs/gemm.md, "Cluster pairs").
            "prefill-ws-pairs": f"kernel-config={SPECIALISED}4,linear.cluster=2",
            "prefill-ws-bf16": f"kernel-config={SPECIALISED}4",
            # bf16 y with 3 stages: through shared memory and TMA stores
            # (linearStoresThroughShared, docs/gemm.md).
            "prefill-ws-shared-bf16": f"kernel-config={SPECIALISED}3",
            # bf16 y on [128, 128] tiles at three blocks an SM: the default
            # before the persistent schedule with its results through
            # shared memory took prefill linears of >= 1024 rows with a wave
            # of [128, 256] tiles (KernelConfigRules.cpp).
            "prefill-narrow-bf16": ("kernel-config=linear.kernel=linear_tma_wgmma,"
                                    "linear.tile=128x128x64,linear.warps=4,linear.stages=2,"
                                    "linear.blocks_per_sm=3"),
            # The same tiles with K split over a cluster of S blocks that
            # sum their partial tiles through distributed shared memory
            # (LinearWGMMA.cpp, docs/gemm.md "Split K"): for narrow outputs
            # over a long K, whose few tiles leave SMs idle.
            **{f"prefill-splitk{s}-bf16": ("kernel-config=linear.kernel=linear_tma_wgmma,"
                                           "linear.tile=128x128x64,linear.warps=4,"
                                           "linear.stages=4,linear.blocks_per_sm=1,"
                                           f"linear.cluster={s}") for s in (2, 4, 8)},
            # The output tiles row-major (a row tile's column tiles first),
            # the order before the banded raster (lowering/cuda/TileRaster.h).
            "prefill-raster0": "kernel-config=linear.raster=0",
            "prefill-raster8": "kernel-config=linear.raster=8",
            # y in bf16, as the model's linears write it under the bf16
            # precision policy, and as cuBLAS's rows write it.
            "prefill-bf16": ""}
if os.environ.get("K3_GEMM_VARIANTS"):  # e.g. "prefill,prefill-raster0"
    VARIANTS = {k: v for k, v in VARIANTS.items() if k in os.environ["K3_GEMM_VARIANTS"].split(",")}
# The variants whose y is bf16 (the others: f32).
BF16_OUT = {"prefill-bf16", "prefill-narrow-bf16", "prefill-pp-bf16", "prefill-ws-bf16",
            "prefill-ws-shared-bf16", "prefill-splitk2-bf16", "prefill-splitk4-bf16",
            "prefill-splitk8-bf16"}
MODEL = """func.func @forward(%x: tensor<?x{K}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x{N}x{Y}> {{k3.name = "y"}}) {{
  %w = k3.weight "w" : tensor<{N}x{K}xbf16>
  %y = k3.linear %x, %w : (tensor<?x{K}xbf16>, tensor<{N}x{K}xbf16>) -> tensor<?x{N}x{Y}>
  return %y : tensor<?x{N}x{Y}>
}}
"""


def artifact(name: str, variant: str) -> Path:
    return OUT / f"{name}.{variant}.k3bin"


def prepare() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, n, k in SHAPES:
        for variant, extra in VARIANTS.items():
            y = "bf16" if variant in BF16_OUT else "f32"
            src = OUT / f"{name}.{y}.mlir"
            src.write_text(MODEL.format(N=n, K=k, Y=y))
            if "{S}" in extra:
                extra = extra.format(S=default_gemv_split(src))
            opts = (f"target=cuda output={artifact(name, variant)} max-tokens={max(TOKENS)} "
                    f"max-seqs=1 decode-entry=0 report=1 {extra}")
            subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o", os.devnull],
                           check=True, stderr=subprocess.DEVNULL)
    return 0


def default_gemv_split(src: Path) -> int:
    """The K split S of the default GEMV tile [16, TT, S] for `src` (1
    without one), from k3-compile's report."""
    opts = f"target=cuda output={OUT / 'split-probe.k3bin'} max-tokens=16 max-seqs=1 decode-entry=0 report=1 " \
           f"kernel-config=linear.kernel=linear_gemv"
    err = subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o", os.devnull],
                         capture_output=True, text=True, check=True).stderr
    m = re.search(r"kernel = linear_gemv, tile = \[(\d+), (\d+)(?:, (\d+))?\]", err)
    if not m:
        raise RuntimeError(f"no linear_gemv config in the report of {src}")
    return int(m.group(3) or 1)


def kernel_of(path: Path) -> str:
    """The kernel the artifact launches (k3-run --plan's first launch)."""
    k3run = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin")) / "k3-run"
    plan = subprocess.run([str(k3run), str(path), "--plan"], capture_output=True, text=True).stdout
    for line in plan.splitlines():
        parts = line.split()
        if len(parts) > 1 and parts[0].isdigit():
            return parts[1]
    return "?"


def checked_rows(t: int) -> list[int]:
    return list(range(t)) if t <= 1024 else list(range(64)) + list(range(t - 64, t))


def run() -> int:
    import torch
    from safetensors.torch import save_file
    import k3
    res = protocol.Results("gemm")
    dev = torch.device("cuda:0")
    for name, n, k in SHAPES:
        g = torch.Generator(device=dev).manual_seed(n + k)
        w = (torch.randn(n, k, device=dev, generator=g) / k ** 0.5).to(torch.bfloat16)
        wfile = OUT / f"{name}.w.safetensors"
        save_file({"w": w.cpu()}, str(wfile))
        sessions = {}
        for variant in VARIANTS:
            try:
                s = k3.Session(str(artifact(name, variant)), device="cuda:0")
                s.load_weights(str(wfile))
                sessions[variant] = s
            except Exception as e:  # noqa: BLE001
                for t in TOKENS:
                    res.failed(f"{type(e).__name__}: {e}", case=name, impl="k3", variant=variant,
                               shape={"T": t, "N": n, "K": k})
        for t in TOKENS:
            x = torch.randn(t, k, device=dev, generator=g).to(torch.bfloat16)
            rows = torch.tensor(checked_rows(t), device=dev)
            ref = x[rows].double() @ w.double().T
            shape = {"T": t, "N": n, "K": k}
            flop = 2.0 * t * n * k
            wbytes = 2.0 * n * k

            def rates(s):
                ms = s["median_ms"]
                return {**s, "TFLOPs": flop / ms / 1e9, "weight_TBps": wbytes / ms / 1e9}

            def ours(session, bf16_out):
                syms = {"num_tokens": t, "num_seqs": 1}
                y = torch.from_dlpack(session.run("forward", symbols=syms, outputs="dlpack",
                                                  x=x)["y"])
                err = protocol.rel_err(y[rows], ref)
                # f32 sums of exact bf16 products: the inner product's
                # first-order bound K u (u = 2^-24). (The wgmma sums grow
                # about linearly in K: 2.4e-6 at K = 2304, 1.4e-5 at 12288.)
                # A bf16 y adds its rounding, 2^-9 relative (round to nearest).
                bound = k * 2.0 ** -24 + (2.0 ** -9 if bf16_out else 0.0)
                if not err < bound:
                    raise AssertionError(f"error vs f64 {err:.3e} (bound K u = {bound:.2e})")
                ms = session.time("forward", symbols=syms, warmup=protocol.WARMUP,
                                  reps=protocol.REPS, x=x)
                return {**rates(protocol.summary(ms)), "err_vs_oracle": err}

            def cublas():
                err = protocol.rel_err((x @ w.T)[rows], ref)
                return {**rates(protocol.summary(protocol.cuda_event_times(lambda: x @ w.T))),
                        "err_vs_oracle": err}

            for variant, session in sessions.items():
                if variant.startswith("gemv") and t > GEMV_MAX_TOKENS:
                    continue
                if variant.startswith("prefill-") and t < 1024:
                    continue  # a tuning row: where the tensor cores matter
                res.guard(lambda: ours(session, variant in BF16_OUT), case=name, impl="k3",
                          variant=variant,
                          kernel=kernel_of(artifact(name, variant)), shape=shape)
            res.guard(cublas, case=name, impl="torch", variant="cublas bf16 (bf16 out)", shape=shape)
            del x, ref
        for s in sessions.values():
            s.close()
        del w
        torch.cuda.empty_cache()
    res.write()
    return 1 if res.failures else 0


if __name__ == "__main__":
    cmd = sys.argv[1:] or ["run"]
    sys.exit(prepare() if cmd == ["prepare"] else run())
