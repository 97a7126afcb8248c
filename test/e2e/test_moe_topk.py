"""k3-split-router on the CPU target against the float64 oracle: the MoE
router as a k3.linear and a k3.moe_topk (the default), and as the fused
k3.moe_router (split-router=0), on the same inputs: sigmoid and softmax
scores, with and without the correction bias, renormalised and scaled.
Both must choose the oracle's experts (inputs without near-ties) and give
its weights within 1e-5 (f32 logits).

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_moe_topk.py
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model, ops  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

T, D, E, K = 37, 48, 40, 6
ROUTER = """func.func @forward(
    %x: tensor<?x{D}xf32> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}})
    -> (tensor<?x{K}xi32> {{k3.name = "idx"}}, tensor<?x{K}xf32> {{k3.name = "wts"}}) {{
  %w = k3.weight "w" : tensor<{E}x{D}xf32>
  {BIASDEF}
  %idx, %wts = k3.moe_router {SCORE} %x, %w {BIAS} {{top_k = {K} : i64, renormalize, routed_scaling_factor = 2.5 : f64}}
      : ({TYPES}) -> (tensor<?x{K}xi32>, tensor<?x{K}xf32>)
  return %idx, %wts : tensor<?x{K}xi32>, tensor<?x{K}xf32>
}}
"""


def router_text(score, with_bias):
    types = f"tensor<?x{D}xf32>, tensor<{E}x{D}xf32>" + (f", tensor<{E}xf32>" if with_bias else "")
    return ROUTER.format(D=D, E=E, K=K, SCORE=score, TYPES=types,
                         BIASDEF=f'%b = k3.weight "b" : tensor<{E}xf32>' if with_bias else "",
                         BIAS="bias(%b)" if with_bias else "")


def inputs(seed):
    """x, W, bias with every token's K-th and (K+1)-th choices apart (no
    near-ties), for both score functions."""
    rng = np.random.default_rng(seed)
    while True:
        x = rng.standard_normal((T, D))
        w = rng.standard_normal((E, D)) / np.sqrt(D)
        b = rng.standard_normal(E) * 0.1
        logits = x @ w.T
        ok = True
        for s in (1 / (1 + np.exp(-logits)), np.exp(logits) / np.exp(logits).sum(1, keepdims=True)):
            for bias in (b, 0.0):
                c = np.sort(s + bias, axis=1)[:, ::-1]
                ok &= bool(np.min(c[:, K - 1] - c[:, K]) > 1e-4)
        if ok:
            return x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("split", [1, 0])
def test_router_forms_match_oracle(tmp_path, score, with_bias, split):
    x, w, b = inputs(11)
    src, art = tmp_path / "router.mlir", tmp_path / "router.k3bin"
    src.write_text(router_text(score, with_bias))
    r = subprocess.run([f"{BIN}/k3-opt", str(src),
                        f"--k3-compile=output={art} max-tokens=64 max-seqs=1 split-router={split}",
                        "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    plan = subprocess.run([f"{BIN}/k3-run", str(art), "--plan"], capture_output=True, text=True)
    assert ("moe_topk" in plan.stdout) == bool(split), plan.stdout
    weights = {"w": w, **({"b": b} if with_bias else {})}
    wfile, infile, outfile = (tmp_path / n for n in ("w.safetensors", "in.safetensors", "out.safetensors"))
    model.save_safetensors(wfile, weights, dtype="f32")
    model.save_safetensors(infile, {"x": x}, dtype="f32")
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--inputs", str(infile),
                        "--symbol", "num_seqs=1", "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = model.load_safetensors(outfile)
    want_idx, want_wts = ops.moe_router(x.astype(np.float64), w.astype(np.float64),
                                        b.astype(np.float64) if with_bias else None, K, score,
                                        True, 2.5)
    np.testing.assert_array_equal(out["idx"], want_idx)
    np.testing.assert_allclose(out["wts"], want_wts, rtol=1e-5, atol=1e-6)


def test_moe_topk_is_moe_router_of_the_logits():
    """The oracle's split: moe_router(x, W) = moe_topk(x W^T)."""
    x, w, b = inputs(12)
    a = ops.moe_router(x, w, b, K, "sigmoid", True, 2.5)
    t = ops.moe_topk(x.astype(np.float64) @ w.astype(np.float64).T, b, K, "sigmoid", True, 2.5)
    np.testing.assert_array_equal(a[0], t[0])
    np.testing.assert_allclose(a[1], t[1])
