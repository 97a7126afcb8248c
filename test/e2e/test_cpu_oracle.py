"""End to end on the CPU: k3-opt compiles a model description, k3-run
executes it, and the float64 oracle (python/k3ref) checks the logits.

Run by ctest (which sets K3_BIN_DIR to the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e
"""
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model  # noqa: E402
from k3ref.examples import tiny_k3_example_config  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

# Weights the checkpoint keeps in f32 (K3-SPEC.md §2, §5); the rest are bf16.
F32_WEIGHTS = ("conv1d", "A_log", "dt_bias", "o_norm", "e_score_correction_bias")


def rounded_weights(cfg, seed):
    """Random weights rounded to their storage precision, as float64."""
    out = {}
    for name, w in model.random_weights(cfg, seed).items():
        storage = np.float32 if any(s in name for s in F32_WEIGHTS) else ml_dtypes.bfloat16
        out[name] = w.astype(storage).astype(np.float64)
    return out


def rel_err(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


@pytest.fixture(scope="module")
def tiny_k3(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_k3")
    art = d / "tiny.k3bin"
    subprocess.run([f"{BIN}/k3-opt", str(ROOT / "examples/tiny_k3.mlir"),
                    f"--k3-compile=output={art} max-tokens=256 max-seqs=4",
                    "-o", os.devnull], check=True)
    cfg = tiny_k3_example_config()
    weights = rounded_weights(cfg, seed=3)
    wfile = d / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    return d, art, cfg, weights, wfile


def run(d, art, wfile, inputs, tag):
    infile, outfile = d / f"in_{tag}.safetensors", d / f"out_{tag}.safetensors"
    model.save_safetensors(infile, inputs)
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile),
                        "--inputs", str(infile), "--dump", str(outfile)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return model.load_safetensors(outfile)


@pytest.mark.parametrize("lens", [[7], [5, 17, 1, 9], [64, 3], [1, 1, 1]])
def test_prefill_matches_oracle(tiny_k3, lens):
    d, art, cfg, weights, wfile = tiny_k3
    rng = np.random.default_rng(len(lens) * 100 + sum(lens))
    ids = rng.integers(0, cfg.vocab_size, sum(lens)).astype(np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    out = run(d, art, wfile, {"token_ids": ids, "cu_seqlens": cu,
                              "context_lens": np.zeros(len(lens), np.int32)},
              "p" + "_".join(map(str, lens)))
    ref = model.forward(cfg, weights, ids, cu_seqlens=cu)
    assert out["logits"].shape == ref.shape
    err = rel_err(out["logits"], ref)
    assert err <= 1e-4, f"normwise relative error {err:.3e}"
    # Greedy choices agree wherever the oracle's top two are not a near-tie.
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-3
    assert np.array_equal(out["next_tokens"][clear], ref.argmax(axis=1)[clear])


def test_decode_continues_prefill(tiny_k3, tmp_path):
    """Prefill T tokens, then teacher-forced decode of N more, one k3-run call
    per step carrying the decode state, equals prefill of T + N (k3-run's own
    generation loop, compared against the oracle's greedy generation)."""
    d, art, cfg, weights, wfile = tiny_k3
    prompt = [11, 42, 7, 200, 3, 99, 150, 21, 5]
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--prompt",
                        ",".join(map(str, prompt)), "--max-new-tokens", "6", "--quiet"],
                       capture_output=True, text=True, check=True)
    got = [int(t) for t in r.stdout.strip().split(",")]
    # Both start with the argmax of the prefill's last logits.
    assert got == model.greedy_generate(cfg, weights, prompt, 6)
