"""The dedicated CUDA kernels of single ops against float64 / numpy at
awkward shapes (the GPU side of "every lowering is checked against the
oracle"): the GEMV linear (lowering/cuda/LinearGEMV.cpp) with token counts
that are not multiples of its 4-token tile, K with a partial last step,
odd N (one row per warp), f32/bf16 weights and inputs, bf16 output; the
block-per-row argmax (lowering/cuda/ArgmaxRows.cpp) with ties, rows of
-inf, the maximum in the first or last column, vocabularies smaller than a
block.

    .venv/bin/python bench/gpu_kernels_check.py prepare   # here (k3-opt)
    python3 bench/gpu_kernels_check.py check              # GPU machine

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

OUT = ROOT / "out" / "kernels_check"
K3OPT = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin")) / "k3-opt"

# (name, N, K, weight dtype, input dtype, output dtype)
LINEARS = (("gemv_f32_n40_k96", 40, 96, "f32", "f32", "f32"),
           ("gemv_bf16w_f32x_n256_k2304", 256, 2304, "bf16", "f32", "f32"),
           ("gemv_bf16_n576_k2304_bf16out", 576, 2304, "bf16", "bf16", "bf16"),
           ("gemv_bf16_n41_k2312", 41, 2312, "bf16", "bf16", "f32"),
           ("gemv_bf16_n4096_k128", 4096, 128, "bf16", "f32", "f32"))
# The prefill default on bf16 inputs (TMA + wgmma) with a partial last
# column tile (N not a multiple of 128) and row counts across its 128-row
# tiles: (name, N, K, w, x, y); kernel as k3-compile chooses it.
WGMMA_LINEARS = (("wgmma_n576_k2304", 576, 2304, "bf16", "bf16", "f32"),
                 ("wgmma_n40_k512_bf16out", 40, 512, "bf16", "bf16", "bf16"))
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
ARGMAX_MODEL = """func.func @forward(%l: tensor<?x{V}xf32> {{k3.name = "l", k3.dims = array<i64: -1, {V}>}})
    -> (tensor<?xi32> {{k3.name = "a"}}) {{
  %a = k3.argmax %l : (tensor<?x{V}xf32>) -> tensor<?xi32>
  return %a : tensor<?xi32>
}}
"""


def compile_model(name: str, text: str, extra: str) -> None:
    src = OUT / f"{name}.mlir"
    src.write_text(text)
    opts = (f"target=cuda output={OUT / name}.k3bin max-tokens=256 max-seqs=1 "
            f"decode-entry=0 {extra}")
    subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o", os.devnull], check=True)


def prepare() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, n, k, w, x, y in LINEARS:
        compile_model(name, LINEAR_MODEL.format(N=n, K=k, W=w, X=x, Y=y),
                      "kernel-config=linear.kernel=linear_gemv")
    for name, n, k, w, x, y in WGMMA_LINEARS:
        compile_model(name, LINEAR_MODEL.format(N=n, K=k, W=w, X=x, Y=y), "")
    for v in VOCABS:
        compile_model(f"argmax_v{v}", ARGMAX_MODEL.format(V=v), "")
    # Inputs for compute-sanitizer runs through k3-run (--random-weights):
    # f32 x of 5 tokens (not a multiple of the 4-token tile), 6 argmax rows.
    from safetensors.numpy import save_file
    rng = np.random.default_rng(1)
    for name, n, k, w, x, y in LINEARS:
        if x == "f32":
            save_file({"x": rng.standard_normal((5, k)).astype(np.float32)},
                      str(OUT / f"in_{name}.safetensors"))
    save_file({"l": argmax_rows(163840, rng)}, str(OUT / "in_argmax_v163840.safetensors"))
    return 0


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
    for name, n, k, wt, xt, yt in LINEARS + WGMMA_LINEARS:
        kernel = "linear_gemv" if (name, n, k, wt, xt, yt) in LINEARS else "linear_tma_wgmma"
        w = (torch.randn(n, k, device=dev, generator=g) / k ** 0.5).to(dt[wt])
        wfile = OUT / f"{name}.w.safetensors"
        save_file({"w": w.cpu()}, str(wfile))
        for t in LINEAR_TOKENS:
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
            res.guard(case, case=name, impl="k3", variant=kernel,
                      shape={"T": t, "N": n, "K": k, "w": wt, "x": xt, "y": yt})
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
    res.write()
    return 1 if res.failures else 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "check"
    sys.exit(prepare() if cmd == "prepare" else check())
