"""k3.linear_group (k3-group-linears) on the CPU target against the float64
oracle: one op of three weights (N = 64, 36 and 5: not multiples of the GPU
tile) read from one bf16 input, its results in bf16 and f32; and the
pipeline's grouping, which must not change a model's decode step.

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_linear_group.py
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import k3  # noqa: E402
from k3ref import model, ops  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

T, K = 13, 48
NS = (64, 36, 5)
GROUP = """func.func @forward(
    %x: tensor<?x{K}xbf16> {{k3.name = "x", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x64xbf16> {{k3.name = "a"}}, tensor<?x36xf32> {{k3.name = "b"}},
        tensor<?x5xbf16> {{k3.name = "c"}}) {{
  %wa = k3.weight "wa" : tensor<64x{K}xbf16>
  %wb = k3.weight "wb" : tensor<36x{K}xbf16>
  %wc = k3.weight "wc" : tensor<5x{K}xbf16>
  %a, %b, %c = k3.linear_group %x, %wa, %wb, %wc
      : (tensor<?x{K}xbf16>, tensor<64x{K}xbf16>, tensor<36x{K}xbf16>, tensor<5x{K}xbf16>)
      -> (tensor<?x64xbf16>, tensor<?x36xf32>, tensor<?x5xbf16>)
  return %a, %b, %c : tensor<?x64xbf16>, tensor<?x36xf32>, tensor<?x5xbf16>
}}
"""


def bf16(a):
    """`a` rounded to bf16 and back (what the files hold)."""
    import ml_dtypes
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def test_linear_group_matches_oracle(tmp_path):
    rng = np.random.default_rng(5)
    x = bf16(rng.standard_normal((T, K)))
    ws = [bf16(rng.standard_normal((n, K)) / np.sqrt(K)) for n in NS]
    src, art = tmp_path / "group.mlir", tmp_path / "group.k3bin"
    src.write_text(GROUP.format(K=K))
    r = subprocess.run([f"{BIN}/k3-opt", str(src), f"--k3-compile=output={art} max-tokens=64 max-seqs=1",
                        "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    wfile, infile, outfile = (tmp_path / n for n in ("w.safetensors", "in.safetensors", "out.safetensors"))
    model.save_safetensors(wfile, dict(zip(("wa", "wb", "wc"), ws)), dtype="bf16")
    model.save_safetensors(infile, {"x": x}, dtype="bf16")
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--inputs", str(infile),
                        "--symbol", "num_seqs=1", "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = model.load_safetensors(outfile)
    want = ops.linear_group(x, ws)
    # f32 accumulation; bf16 results round once (2^-8 relative).
    for name, y, tol in zip("abc", want, (8e-3, 1e-5, 8e-3)):
        assert out[name].shape == y.shape
        err = np.linalg.norm(out[name] - y) / np.linalg.norm(y)
        assert err < tol, (name, err)


def test_grouping_keeps_the_decode_step(tmp_path):
    """The tiny example's decode entry with and without k3-group-linears
    (its KDA and MLA projections grouped): the same logits, bit for bit
    (the same sums in the same order on the CPU), over a prompt and three
    steps; and the decode entry refuses two tokens of one sequence (its
    state updates rely on one)."""
    import k3
    ids = np.array([3, 1, 4, 1, 5, 9], np.int32)
    steps = []
    for group in (1, 0):
        art = k3.compile(ROOT / "examples/tiny_k3.mlir", tmp_path / f"tiny-{group}.k3bin",
                         max_tokens=64, max_seqs=2, options=f"group-linears={group}")
        plan = subprocess.run([f"{BIN}/k3-run", str(art.path), "--plan"], capture_output=True, text=True)
        assert ("linear_group" in plan.stdout) == bool(group), plan.stdout
        s = k3.Session(art)
        s.random_weights(7)
        s.run(token_ids=ids[:3], cu_seqlens=np.array([0, 3], np.int32),
              context_lens=np.array([0], np.int32))
        rows = []
        for k in range(3, 6):
            out = s.run("forward_decode", token_ids=ids[k:k + 1], cu_seqlens=np.array([0, 1], np.int32),
                        context_lens=np.array([k], np.int32))
            rows.append(np.asarray(out["logits"]))
        with pytest.raises(k3.K3Error, match="at most one per sequence"):
            s.run("forward_decode", token_ids=ids[:2], cu_seqlens=np.array([0, 2], np.int32),
                  context_lens=np.array([0], np.int32))
        steps.append(np.stack(rows))
    np.testing.assert_array_equal(steps[0], steps[1])
