"""The grouped MoE form (k3-moe-grouped: dispatch, grouped GEMMs, combine;
docs/moe.md) on the CPU target against the float64 oracle, at routings that
stress the dispatch: an expert no token chose, every token on the same three
experts (each segment holds all T rows), one token, and ids in every slot
order. The fused form (moe-grouped=0) must give the same bits: the combine
adds each token's experts in slot order, as the fused op does. So must the
decode entry's form (an entry marked k3.decode: the dispatch's tiles of 4
rows, on CUDA the moe_grouped_gemv kernels), and the tables cut in tiles
of 384 rows (moe-tile-rows=384, on CUDA the tall tiles).

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_moe_grouped.py
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

E, K, D, I = 8, 3, 24, 20
MODEL = f"""func.func @forward(
    %x: tensor<?x{D}xf32> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %idx: tensor<?x{K}xi32> {{k3.name = "idx", k3.dims = array<i64: -1, {K}>}},
    %wts: tensor<?x{K}xf32> {{k3.name = "wts", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x{D}xf32> {{k3.name = "y"}}) {{
  %w1 = k3.weight "w1" : tensor<{E}x{I}x{D}xf32>
  %w3 = k3.weight "w3" : tensor<{E}x{I}x{D}xf32>
  %w2 = k3.weight "w2" : tensor<{E}x{D}x{I}xf32>
  %y = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x{D}xf32>, tensor<?x{K}xi32>, tensor<?x{K}xf32>, tensor<{E}x{I}x{D}xf32>,
         tensor<{E}x{I}x{D}xf32>, tensor<{E}x{D}x{I}xf32>) -> tensor<?x{D}xf32>
  return %y : tensor<?x{D}xf32>
}}
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe_grouped")
    src = d / "moe.mlir"
    src.write_text(MODEL)
    arts = {}
    decode = d / "moe_decode.mlir"
    decode.write_text(MODEL.replace("-> (tensor<?x{D}xf32> {{k3.name = \"y\"}}) {{".format(D=D),
                                    "-> (tensor<?x{D}xf32> {{k3.name = \"y\"}}) attributes {{k3.decode}} {{"
                                    .format(D=D)))
    assert "k3.decode" in decode.read_text()
    for name, opt, text in (("grouped", "", src), ("fused", "moe-grouped=0", src), ("decode", "", decode),
                            ("tall", "moe-tile-rows=384", src)):
        arts[name] = d / f"{name}.k3bin"
        subprocess.run([f"{BIN}/k3-opt", str(text),
                        f"--k3-compile=output={arts[name]} max-tokens=64 max-seqs=1 {opt}",
                        "-o", os.devnull], check=True, capture_output=True)
    rng = np.random.default_rng(15)
    w = {"w1": rng.standard_normal((E, I, D)) / 5, "w3": rng.standard_normal((E, I, D)) / 5,
         "w2": rng.standard_normal((E, D, I)) / 5}
    wfile = d / "w.safetensors"
    model.save_safetensors(wfile, w, dtype="f32")
    return d, arts, {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}, wfile


def routing(kind, t, rng):
    if kind == "random_one_unused":   # expert E - 1 never chosen
        return np.stack([rng.choice(E - 1, K, replace=False) for _ in range(t)])
    if kind == "three_experts_only":  # each of 3 segments holds every token
        return np.stack([rng.permutation([5, 0, 2]) for _ in range(t)])
    if kind == "descending":          # ids in decreasing slot order
        return np.stack([np.sort(rng.choice(E, K, replace=False))[::-1] for _ in range(t)])
    raise ValueError(kind)


def run(d, art, wfile, inputs, tag):
    infile, outfile = d / f"in_{tag}.safetensors", d / f"out_{tag}.safetensors"
    model.save_safetensors(infile, inputs)
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--inputs", str(infile),
                        "--symbol", "num_seqs=1", "--dump", str(outfile)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return model.load_safetensors(outfile)["y"]


@pytest.mark.parametrize("kind,t", [("random_one_unused", 37), ("three_experts_only", 50),
                                    ("descending", 1), ("random_one_unused", 1)])
def test_grouped_matches_oracle_and_fused(setup, kind, t):
    d, arts, w, wfile = setup
    rng = np.random.default_rng(t)
    idx = routing(kind, t, rng).astype(np.int32)
    wts = rng.random((t, K)).astype(np.float32)
    x = rng.standard_normal((t, D)).astype(np.float32)
    inputs = {"x": x, "idx": idx, "wts": wts}
    tag = f"{kind}_{t}"
    got = run(d, arts["grouped"], wfile, inputs, tag + "_g")
    fused = run(d, arts["fused"], wfile, inputs, tag + "_f")
    decode = run(d, arts["decode"], wfile, inputs, tag + "_d")
    tall = run(d, arts["tall"], wfile, inputs, tag + "_t")
    want = ops.moe_experts(x.astype(np.float64), idx, wts.astype(np.float64),
                           w["w1"], w["w3"], w["w2"])
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert err < 1e-5, f"grouped vs f64 oracle {err:.2e}"
    assert np.array_equal(got, fused), "the grouped and fused forms differ"
    assert np.array_equal(decode, fused), "the decode entry's grouped form and the fused form differ"
    assert np.array_equal(tall, fused), "the 384-row tables' grouped form and the fused form differ"


# A MoE layer with its shared expert (a k3.glu_mlp of the same input and
# width, added to the routed output), as Kimi Linear has it: in the decode
# entry k3-fuse-shared-expert (k3-compile's default, fuse-shared-expert=1) runs the
# shared expert as rows T K + t of the grouped ops and the combine adds it
# last (docs/moe.md).
SHARED_MODEL = f"""func.func @forward(
    %x: tensor<?x{D}xf32> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %idx: tensor<?x{K}xi32> {{k3.name = "idx", k3.dims = array<i64: -1, {K}>}},
    %wts: tensor<?x{K}xf32> {{k3.name = "wts", k3.dims = array<i64: -1, {K}>}})
    -> (tensor<?x{D}xf32> {{k3.name = "y"}}) attributes {{k3.decode}} {{
  %w1 = k3.weight "w1" : tensor<{E}x{I}x{D}xf32>
  %w3 = k3.weight "w3" : tensor<{E}x{I}x{D}xf32>
  %w2 = k3.weight "w2" : tensor<{E}x{D}x{I}xf32>
  %r = k3.moe_experts silu %x, %idx, %wts, %w1, %w3, %w2
      : (tensor<?x{D}xf32>, tensor<?x{K}xi32>, tensor<?x{K}xf32>, tensor<{E}x{I}x{D}xf32>,
         tensor<{E}x{I}x{D}xf32>, tensor<{E}x{D}x{I}xf32>) -> tensor<?x{D}xf32>
  %sg = k3.weight "sg" : tensor<{I}x{D}xf32>
  %su = k3.weight "su" : tensor<{I}x{D}xf32>
  %sd = k3.weight "sd" : tensor<{D}x{I}xf32>
  %s = k3.glu_mlp silu %x, %sg, %su, %sd
      : (tensor<?x{D}xf32>, tensor<{I}x{D}xf32>, tensor<{I}x{D}xf32>, tensor<{D}x{I}xf32>) -> tensor<?x{D}xf32>
  %y = k3.add %r, %s : tensor<?x{D}xf32>
  return %y : tensor<?x{D}xf32>
}}
"""


@pytest.fixture(scope="module")
def shared_setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe_shared")
    src = d / "moe_shared.mlir"
    src.write_text(SHARED_MODEL)
    arts = {}
    for name, opt in (("fused", ""), ("separate", "fuse-shared-expert=0")):
        arts[name] = d / f"{name}.k3bin"
        subprocess.run([f"{BIN}/k3-opt", str(src),
                        f"--k3-compile=output={arts[name]} max-tokens=64 max-seqs=1 {opt}",
                        "-o", os.devnull], check=True, capture_output=True)
    ir = subprocess.run([f"{BIN}/k3-opt", str(src), "--k3-moe-grouped", "--k3-split-glu-mlp",
                         "--k3-fuse-shared-expert"], check=True, capture_output=True, text=True).stdout
    rng = np.random.default_rng(16)
    w = {"w1": rng.standard_normal((E, I, D)) / 5, "w3": rng.standard_normal((E, I, D)) / 5,
         "w2": rng.standard_normal((E, D, I)) / 5, "sg": rng.standard_normal((I, D)) / 5,
         "su": rng.standard_normal((I, D)) / 5, "sd": rng.standard_normal((D, I)) / 5}
    wfile = d / "w.safetensors"
    model.save_safetensors(wfile, w, dtype="f32")
    return d, arts, ir, {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}, wfile


def test_shared_expert_is_in_the_grouped_ops(shared_setup):
    ir = shared_setup[2]
    assert "shared(" in ir and "k3.glu_gate_up" not in ir and "k3.add" not in ir, ir


@pytest.mark.parametrize("kind,t", [("random_one_unused", 37), ("three_experts_only", 5),
                                    ("descending", 1)])
def test_shared_expert_in_grouped_ops_matches_oracle(shared_setup, kind, t):
    d, arts, _, w, wfile = shared_setup
    rng = np.random.default_rng(100 + t)
    idx = routing(kind, t, rng).astype(np.int32)
    wts = rng.random((t, K)).astype(np.float32)
    x = rng.standard_normal((t, D)).astype(np.float32)
    inputs = {"x": x, "idx": idx, "wts": wts}
    tag = f"shared_{kind}_{t}"
    got = run(d, arts["fused"], wfile, inputs, tag + "_f")
    separate = run(d, arts["separate"], wfile, inputs, tag + "_s")
    x64 = x.astype(np.float64)
    want = ops.moe_experts(x64, idx, wts.astype(np.float64), w["w1"], w["w3"], w["w2"]) + \
        ops.glu_mlp(x64, w["sg"], w["su"], w["sd"])
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    assert err < 1e-5, f"shared expert in the grouped ops vs f64 oracle {err:.2e}"
    sep = float(np.linalg.norm(separate - want) / np.linalg.norm(want))
    assert sep < 1e-5, f"separate shared expert vs f64 oracle {sep:.2e}"
