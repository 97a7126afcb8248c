"""The chunkwise KDA core (--k3-kda-chunkwise, --k3-tile-tri-solve) against
the float64 recurrence of the oracle (k3ref.ops.kda_recurrent).

Models under Inputs/ are the KDA core alone with every operand an input
(`k3-run --inputs`). Awkward shapes: T not a multiple of the chunk, T shorter
than a chunk, packed variable-length batches, non-zero initial state, gates
at the -5 bound, the unbounded softplus gate, K != V, H > 1; chunk sizes
16/32/64, both tri solvers and the segment (state-passing) form.

    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_kda_chunkwise.py
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
INPUTS = Path(__file__).parent / "Inputs"
H, K, V = 2, 16, 32
TOL = 1e-5  # normwise, f32 (issue 5)


def rel_err(got, ref):
    return float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))


_compiled = {}


def compile_model(tmp, gate, options):
    key = (gate, options)
    if key not in _compiled:
        art = tmp / f"{gate}_{abs(hash(options))}.k3bin"
        subprocess.run([f"{BIN}/k3-opt", str(INPUTS / f"kda_{gate}.mlir"),
                        f"--k3-compile=output={art} max-tokens=1100 max-seqs=8 {options}",
                        "-o", os.devnull], check=True)
        _compiled[key] = art
    return _compiled[key]


def make_inputs(lens, gate, regime, seed):
    rng = np.random.default_rng(seed)
    T, N = sum(lens), len(lens)
    f = np.float32
    x = {"q": rng.standard_normal((1, T, H, K)).astype(f),
         "k": rng.standard_normal((1, T, H, K)).astype(f),
         "v": rng.standard_normal((1, T, H, V)).astype(f),
         "beta": rng.standard_normal((1, T, H)).astype(f),
         "initial_state": (0.5 * rng.standard_normal((N, H, K, V))).astype(f),
         "cu_seqlens": np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)}
    if regime == "beta_extreme":
        x["beta"] = np.where(rng.random((1, T, H)) < 0.5, -12.0, 12.0).astype(f)
    if gate == "ext_gate":
        g = -np.exp(rng.standard_normal((1, T, H, K)) - 1.0)  # mixed small/large
        if regime == "near_zero":
            g = -1e-3 * rng.random((1, T, H, K))
        x["g"] = g.astype(f)
    else:
        z = rng.standard_normal((1, T, H, K))
        if regime == "bound":  # sigmoid saturated: g at -5
            z = 30.0 + z
        x["g"] = z.astype(f)
        x["A_log"] = (0.5 * rng.standard_normal(H)).astype(f)
        x["dt_bias"] = rng.standard_normal(H * K).astype(f)
        if gate == "softplus_gate" and regime == "large":
            x["g"] = (5.0 + 3.0 * z).astype(f)  # decays of e^-10 and beyond
    return x


def reference(x, gate):
    g = x["g"].astype(np.float64)
    if gate == "lb_gate":
        g = ops.kda_gate_lower_bounded(g, x["A_log"], x["dt_bias"], -5.0)
    elif gate == "softplus_gate":
        g = ops.kda_gate_softplus(g, x["A_log"], x["dt_bias"])
    beta = ops.sigmoid(x["beta"].astype(np.float64))
    return ops.kda_recurrent(x["q"], x["k"], x["v"], g, beta, 0.25,
                             initial_state=x["initial_state"],
                             cu_seqlens=x["cu_seqlens"], use_qk_l2norm=True)


def run(tmp, art, x, tag):
    infile, outfile = tmp / f"in_{tag}.safetensors", tmp / f"out_{tag}.safetensors"
    model.save_safetensors(infile, x)
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--inputs", str(infile),
                        "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return model.load_safetensors(outfile)


def check(tmp, gate, options, lens, regime="random", seed=0):
    art = compile_model(tmp, gate, options)
    x = make_inputs(lens, gate, regime, seed)
    out = run(tmp, art, x, f"{gate}_{len(lens)}_{sum(lens)}_{regime}")
    o_ref, s_ref = reference(x, gate)
    for name, ref in (("o", o_ref), ("final_state", s_ref)):
        got = np.asarray(out[name], np.float64)
        assert got.shape == ref.shape, (name, got.shape, ref.shape)
        assert np.all(np.isfinite(got)), f"{name}: inf/NaN"
        err = rel_err(got, ref)
        assert err <= TOL, f"{name}: normwise relative error {err:.3e} ({options}, {lens})"
    return rel_err(np.asarray(out["o"], np.float64), o_ref)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("kda_chunkwise")


LENS = [[1], [15], [16], [17], [63], [64], [65], [1, 63, 64, 65, 300]]


@pytest.mark.parametrize("lens", LENS, ids=lambda l: "x".join(map(str, l)))
@pytest.mark.parametrize("gate", ["ext_gate", "lb_gate", "softplus_gate"])
def test_chunkwise_matches_recurrence(tmp, gate, lens):
    check(tmp, gate, "kda=chunkwise", lens, seed=sum(lens))


@pytest.mark.parametrize("chunk", [16, 32, 64])
@pytest.mark.parametrize("solver", ["forward", "block-inverse"])
def test_chunk_sizes_and_solvers(tmp, chunk, solver):
    check(tmp, "lb_gate", f"kda=chunkwise kda-chunk-size={chunk} kda-solver={solver}",
          [1, 63, 64, 65, 300], regime="bound", seed=chunk)


@pytest.mark.parametrize("regime,gate", [("bound", "lb_gate"), ("large", "softplus_gate"),
                                         ("near_zero", "ext_gate"),
                                         ("beta_extreme", "lb_gate")])
def test_gate_regimes(tmp, regime, gate):
    check(tmp, gate, "kda=chunkwise", [17, 200, 64], regime=regime, seed=7)


def test_long_sequence(tmp):
    check(tmp, "lb_gate", "kda=chunkwise kda-solver=block-inverse", [1000], regime="bound", seed=1)


@pytest.mark.parametrize("segments", [1, 2, 3, 7])
def test_segment_state_passing(tmp, segments):
    check(tmp, "lb_gate", f"kda=chunkwise kda-chunk-size=16 kda-segments={segments}",
          [1, 63, 64, 65, 300], seed=segments)
    check(tmp, "softplus_gate", f"kda=chunkwise kda-chunk-size=32 kda-segments={segments}",
          [130, 5], regime="large", seed=segments)
