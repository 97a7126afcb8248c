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

T, D = 37, 48
# (experts, top-k): a small router, and K3's 896 experts top-16.
SIZES = [(40, 6), (896, 16)]
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


def router_text(score, with_bias, E, K):
    types = f"tensor<?x{D}xf32>, tensor<{E}x{D}xf32>" + (f", tensor<{E}xf32>" if with_bias else "")
    return ROUTER.format(D=D, E=E, K=K, SCORE=score, TYPES=types,
                         BIASDEF=f'%b = k3.weight "b" : tensor<{E}xf32>' if with_bias else "",
                         BIAS="bias(%b)" if with_bias else "")


def inputs(seed, E, K):
    """x, W, bias with every token's K-th and (K+1)-th choices apart (no
    near-ties, relative to the row's scale), for both score functions."""
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
                # Apart by 1e-4 of the row's largest choice score (softmax
                # scores of 896 experts are ~1e-3 each).
                ok &= bool(np.min((c[:, K - 1] - c[:, K]) / np.abs(c[:, 0])) > 1e-4)
        if ok:
            return x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("split", [1, 0])
@pytest.mark.parametrize("E,K", SIZES, ids=[f"E{e}k{k}" for e, k in SIZES])
def test_router_forms_match_oracle(tmp_path, score, with_bias, split, E, K):
    x, w, b = inputs(11, E, K)
    src, art = tmp_path / "router.mlir", tmp_path / "router.k3bin"
    src.write_text(router_text(score, with_bias, E, K))
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
    E, K = SIZES[0]
    x, w, b = inputs(12, E, K)
    a = ops.moe_router(x, w, b, K, "sigmoid", True, 2.5)
    t = ops.moe_topk(x.astype(np.float64) @ w.astype(np.float64).T, b, K, "sigmoid", True, 2.5)
    np.testing.assert_array_equal(a[0], t[0])
    np.testing.assert_allclose(a[1], t[1])


TOPK = """func.func @forward(
    %l: tensor<?x{E}xf32> {{k3.name = "logits", k3.dims = array<i64: -1, {E}>}})
    -> (tensor<?x{K}xi32> {{k3.name = "idx"}}, tensor<?x{K}xf32> {{k3.name = "wts"}}) {{
  %idx, %wts = k3.moe_topk {SCORE} %l {{renormalize, routed_scaling_factor = 1.0 : f64, top_k = {K} : i64}}
      : (tensor<?x{E}xf32>) -> (tensor<?x{K}xi32>, tensor<?x{K}xf32>)
  return %idx, %wts : tensor<?x{K}xi32>, tensor<?x{K}xf32>
}}
"""


def tied_logits(E, K, seed):
    """Rows whose scores tie exactly, across the K-th choice too: every
    logit equal; a row of two levels (the upper level has fewer than K
    experts, so the rest of the choice comes from a tie of many); a row
    where each value repeats four times at scattered experts."""
    rng = np.random.default_rng(seed)
    rows = [np.zeros(E), np.full(E, -3.0)]
    two = np.full(E, 0.5)
    two[rng.choice(E, K // 2, replace=False)] = 1.5
    rows.append(two)
    levels = rng.standard_normal(E // 4).repeat(4)
    rows.append(levels[rng.permutation(E)])
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
@pytest.mark.parametrize("E,K", SIZES, ids=[f"E{e}k{k}" for e, k in SIZES])
def test_exact_ties_choose_the_lower_expert(tmp_path, score, E, K):
    """Exact ties break towards the lower expert id, the oracle's rule
    (a stable sort of the choice scores), whatever the count of tied
    experts and wherever they sit: the CPU target picks the oracle's
    experts in the oracle's order."""
    logits = tied_logits(E, K, 5)
    src, art = tmp_path / "topk.mlir", tmp_path / "topk.k3bin"
    src.write_text(TOPK.format(E=E, K=K, SCORE=score))
    r = subprocess.run([f"{BIN}/k3-opt", str(src), f"--k3-compile=output={art} max-tokens=8 max-seqs=1",
                        "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    infile, outfile = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    model.save_safetensors(infile, {"logits": logits}, dtype="f32")
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--inputs", str(infile), "--symbol", "num_seqs=1",
                        "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = model.load_safetensors(outfile)
    want_idx, want_wts = ops.moe_topk(logits.astype(np.float64), None, K, score, True, 1.0)
    # The rule itself: all-equal rows choose experts 0 .. K-1 in order.
    np.testing.assert_array_equal(want_idx[0], np.arange(K))
    np.testing.assert_array_equal(out["idx"], want_idx)
    np.testing.assert_allclose(out["wts"], want_wts, rtol=1e-5, atol=1e-6)
