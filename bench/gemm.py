"""k3.linear on the GPU (issue 14): the TMA + wgmma kernel
(lowering/cuda/LinearWGMMA.cpp, config kernel linear_tma_wgmma) beside
cuBLAS (torch.matmul) on the same device tensors, after a check against an
f64 reference, by the protocol of bench/protocol.py.

    .venv/bin/python bench/gemm.py prepare     # here: one artifact per shape
    python3 bench/gemm.py run                  # on the GPU machine

Shapes: projections of Kimi-Linear-48B (hidden 2304; 32 heads x 128) and
of K3 (hidden 7168), y[T, N] = x[T, K] W[N, K]^T with bf16 x and W, f32 y,
at T in {128, 1024, 4096}. (Skinny decode shapes, T <= 64, need a GEMV or
split-K kernel: not built yet.)
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

OUT = ROOT / "out" / "gemm"
K3OPT = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin")) / "k3-opt"
TOKENS = (128, 1024, 4096)
# (name, N, K)
SHAPES = (("kl-qkv", 4096, 2304), ("kl-o", 2304, 4096),
          ("kl-mlp-up", 9216, 2304), ("k3-q", 7168, 7168))
MODEL = """func.func @forward(%x: tensor<?x{K}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x{N}xf32> {{k3.name = "y"}}) {{
  %w = k3.weight "w" : tensor<{N}x{K}xbf16>
  %y = k3.linear %x, %w : (tensor<?x{K}xbf16>, tensor<{N}x{K}xbf16>) -> tensor<?x{N}xf32>
  return %y : tensor<?x{N}xf32>
}}
"""


def prepare() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, n, k in SHAPES:
        src = OUT / f"{name}.mlir"
        src.write_text(MODEL.format(N=n, K=k))
        opts = (f"target=cuda output={OUT / name}.k3bin max-tokens={max(TOKENS)} "
                "max-seqs=1 decode-entry=0 kernel-config=linear.kernel=linear_tma_wgmma")
        subprocess.run([str(K3OPT), str(src), f"--k3-compile={opts}", "-o", "/dev/null"],
                       check=True)
    return 0


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
        session = None
        try:
            session = k3.Session(str(OUT / f"{name}.k3bin"), device="cuda:0")
            session.load_weights(str(wfile))
        except Exception as e:  # noqa: BLE001
            for t in TOKENS:
                res.failed(f"{type(e).__name__}: {e}", case=name, impl="k3", shape={"T": t, "N": n, "K": k})
            continue
        for t in TOKENS:
            x = torch.randn(t, k, device=dev, generator=g).to(torch.bfloat16)
            ref = x.double() @ w.double().T
            shape = {"T": t, "N": n, "K": k}
            flop = 2.0 * t * n * k

            def ours():
                syms = {"num_tokens": t, "num_seqs": 1}
                got = session.run("forward", symbols=syms, outputs="numpy", x=x)["y"]
                err = protocol.rel_err(torch.from_numpy(got).to(dev), ref)
                if not err < 1e-5:
                    raise AssertionError(f"error vs f64 {err:.3e} (bound 1e-5: f32 sums of exact bf16 products)")
                ms = session.time("forward", symbols=syms, warmup=protocol.WARMUP,
                                  reps=protocol.REPS, x=x)
                s = protocol.summary(ms)
                return {**s, "err_vs_oracle": err, "TFLOPs": flop / s["median_ms"] / 1e9}

            def cublas():
                err = protocol.rel_err(x @ w.T, ref)
                s = protocol.summary(protocol.cuda_event_times(lambda: x @ w.T))
                return {**s, "err_vs_oracle": err, "TFLOPs": flop / s["median_ms"] / 1e9}

            res.guard(ours, case=name, impl="k3", variant="linear_tma_wgmma", shape=shape)
            res.guard(cublas, case=name, impl="torch", variant="cublas bf16 (bf16 out)", shape=shape)
        session.close()
    res.write()
    return 1 if res.failures else 0


if __name__ == "__main__":
    cmd = sys.argv[1:] or ["run"]
    sys.exit(prepare() if cmd == ["prepare"] else run())
