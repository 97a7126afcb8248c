"""End to end on the CPU: k3-opt compiles a model description, k3-run
executes it, and the float64 oracle (python/k3ref) checks the logits.

Run by ctest (which sets K3_BIN_DIR to the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model  # noqa: E402
from k3ref.storage import rel_err, rounded_random_weights as rounded_weights  # noqa: E402,F401
from k3ref.examples import tiny_k3_example_config  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

@pytest.fixture(scope="module")
def tiny_k3(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_k3")
    # The default (logits=last: each sequence's last token) and logits=all.
    art = d / "tiny.k3bin"
    for path, extra in ((art, ""), (d / "tiny_all.k3bin", " logits=all")):
        subprocess.run([f"{BIN}/k3-opt", str(ROOT / "examples/tiny_k3.mlir"),
                        f"--k3-compile=output={path} max-tokens=256 max-seqs=4" + extra,
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


@pytest.mark.parametrize("logits", ["last", "all"])
@pytest.mark.parametrize("lens", [[7], [5, 17, 1, 9], [64, 3], [1, 1, 1]])
def test_prefill_matches_oracle(tiny_k3, lens, logits):
    """logits=last: [N, V], the last token of each sequence; all: [T, V]."""
    d, art, cfg, weights, wfile = tiny_k3
    if logits == "all":
        art = d / "tiny_all.k3bin"
    rng = np.random.default_rng(len(lens) * 100 + sum(lens))
    ids = rng.integers(0, cfg.vocab_size, sum(lens)).astype(np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    out = run(d, art, wfile, {"token_ids": ids, "cu_seqlens": cu,
                              "context_lens": np.zeros(len(lens), np.int32)},
              logits + "_p" + "_".join(map(str, lens)))
    ref = model.forward(cfg, weights, ids, cu_seqlens=cu, logits=logits)
    assert ref.shape[0] == (len(lens) if logits == "last" else sum(lens))
    assert out["logits"].shape == ref.shape
    assert out["next_tokens"].shape == ref.shape[:1]
    err = rel_err(out["logits"], ref)
    assert err <= 1e-4, f"normwise relative error {err:.3e}"
    # Greedy choices agree wherever the oracle's top two are not a near-tie.
    top2 = np.sort(ref, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-3
    assert np.array_equal(out["next_tokens"][clear], ref.argmax(axis=1)[clear])


@pytest.mark.parametrize("logits", ["last", "all"])
def test_decode_continues_prefill(tiny_k3, tmp_path, logits):
    """Prefill T tokens, then teacher-forced decode of N more, one k3-run call
    per step carrying the decode state, equals prefill of T + N (k3-run's own
    generation loop, compared against the oracle's greedy generation). The
    runtime samples row n of a logits=last prefill, the sequence's last
    token's row of a logits=all one."""
    d, art, cfg, weights, wfile = tiny_k3
    if logits == "all":
        art = d / "tiny_all.k3bin"
    prompt = [11, 42, 7, 200, 3, 99, 150, 21, 5]
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--prompt",
                        ",".join(map(str, prompt)), "--max-new-tokens", "6", "--quiet"],
                       capture_output=True, text=True, check=True)
    got = [int(t) for t in r.stdout.strip().split(",")]
    # Both start with the argmax of the prefill's last logits.
    assert got == model.greedy_generate(cfg, weights, prompt, 6)


def test_routing_choice_and_replay(tiny_k3, tmp_path):
    """MoE choices can flip on near-ties between f32 and f64. With
    expose-routing the compiled model returns each router's expert ids: the
    oracle replays them (logits within the bound), and the choice itself is
    checked apart, allowing a difference only where the oracle's k-th and
    (k+1)-th biased scores are within a margin."""
    d, _, cfg, weights, wfile = tiny_k3
    art = tmp_path / "routing.k3bin"
    subprocess.run([f"{BIN}/k3-opt", str(ROOT / "examples/tiny_k3.mlir"),
                    f"--k3-compile=output={art} max-tokens=256 max-seqs=4 expose-routing=1",
                    "-o", os.devnull], check=True)
    lens = [40, 23, 1]
    rng = np.random.default_rng(7)
    ids = rng.integers(0, cfg.vocab_size, sum(lens)).astype(np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    out = run(tmp_path, art, wfile, {"token_ids": ids, "cu_seqlens": cu,
                                     "context_lens": np.zeros(len(lens), np.int32)}, "routing")
    moe_layers = [i for i in range(cfg.num_hidden_layers) if cfg.is_moe(i)]
    chosen = {i: out[f"model.layers.{i}.block_sparse_moe.router_indices"] for i in moe_layers}
    assert all(c.shape == (len(ids), cfg.num_experts_per_token) for c in chosen.values())

    # The default logits=last: routing is per token, logits per sequence.
    replay = model.forward(cfg, weights, ids, cu_seqlens=cu, forced_routing=chosen, logits="last")
    assert out["logits"].shape == (len(lens), cfg.vocab_size)
    assert rel_err(out["logits"], replay) <= 1e-4

    dumps = {}
    model.forward(cfg, weights, ids, cu_seqlens=cu, dumps=dumps)
    k = cfg.num_experts_per_token
    for i in moe_layers:
        p = f"model.layers.{i}.block_sparse_moe.gate."
        logits = dumps[f"layers.{i}.mlp_in"] @ weights[p + "weight"].T
        biased = 1.0 / (1.0 + np.exp(-logits)) + weights[p + "e_score_correction_bias"]
        top = np.sort(biased, axis=1)[:, ::-1]
        ours = np.sort(chosen[i], axis=1)
        ref = np.sort(np.argsort(-biased, axis=1, kind="stable")[:, :k], axis=1)
        differ = np.any(ours != ref, axis=1)
        near_tie = (top[:, k - 1] - top[:, k]) < 1e-4
        assert not np.any(differ & ~near_tie), f"layer {i}: expert choice differs without a near-tie"
