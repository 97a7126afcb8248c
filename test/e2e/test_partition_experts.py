"""Expert parallelism on the CPU target (issue 19; docs/scaling.md):
k3-compile ep=N keeps 1/N of every MoE layer's routed experts on each rank
(stacks sliced along E), turns the router's ids into the rank's own
(k3.moe_local_ids, reading the entry input k3.rank.ep that the runtime
fills per rank; other ranks' pairs are skipped), and one all-reduce over
ep sums the layer. Tokens stay replicated, so no all-to-all is needed.
Logits must match one rank (<= 1e-5 normwise, f32) and the float64
oracle, alone and with TP (up to tp = 4 x ep = 2 and tp = 2 x ep = 4: 8
ranks); greedy decode must give the oracle's tokens, as threads and as MPI
processes.

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_partition_experts.py
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from k3ref import model  # noqa: E402
from k3ref.storage import rel_err  # noqa: E402
from test_import_oracle import packed, run  # noqa: E402
from test_partition import (BIN, MPIRUN, compile_with, describe, example,  # noqa: E402
                            mpirun, partitioned_models)

pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")
# Kimi Linear with 4 KDA and 4 MLA heads and 8 routed experts, for TP = 4
# with EP (the tiny configs have 2 heads).
WIDE = dict(example("tiny-kimi-linear"), num_attention_heads=4, num_key_value_heads=4,
            num_experts=8)
WIDE["linear_attn_config"] = dict(WIDE["linear_attn_config"], num_heads=4, head_dim=8)
# (name, weight seed, config, {artifact key: k3-compile options}); tiny K3
# has 8 routed experts, tiny Kimi Linear 6.
MODELS = [("tiny-k3", 11, example("tiny-k3"),
           {"one": "", "ep2": "ep=2", "ep4": "ep=4", "tp2_ep2": "tp=2 ep=2", "tp2_ep4": "tp=2 ep=4"}),
          ("tiny-kimi-linear", 13, example("tiny-kimi-linear"),
           {"one": "", "ep2": "ep=2", "ep3": "ep=3", "tp2_ep2": "tp=2 ep=2"}),
          ("kimi-linear-4-heads-8-experts", 17, WIDE,
           {"one": "", "ep2": "ep=2", "tp4_ep2": "tp=4 ep=2", "tp2_ep4": "tp=2 ep=4"})]


@pytest.fixture(scope="module", params=MODELS, ids=[m[0] for m in MODELS])
def experts(request, tmp_path_factory):
    return partitioned_models(tmp_path_factory.mktemp(request.param[0]), *request.param)


def test_artifact_holds_the_expert_split(experts):
    """ep=2: every routed expert stack sliced along E over ep, one
    all-reduce over ep per MoE layer (prefill and decode entries), the rank
    input in both entries; nothing split over tp."""
    tmp, mlir, arts, cfg, weights, wfile = experts
    text = describe(arts["ep2"])
    shards = [l for l in text.splitlines() if l.startswith("shard ")]
    moe = sum(cfg.is_moe(i) for i in range(cfg.num_hidden_layers))
    assert len(shards) == 3 * moe and all("dim 0 split 2 ways over group ep" in l for l in shards)
    reduces = [l for l in text.splitlines() if "all_reduce sum over ep (2 ranks)" in l]
    assert len(reduces) == 2 * moe and "over tp" not in text
    assert text.count("k3.rank.ep") >= 2, text


@pytest.mark.parametrize("lens", [[7], [5, 17, 1, 9]], ids=["7", "5_17_1_9"])
def test_ep_matches_one_rank_and_oracle(experts, lens):
    tmp, mlir, arts, cfg, weights, wfile = experts
    inp = packed(cfg, lens, seed=len(lens) * 100 + sum(lens))
    tag = "_".join(map(str, lens))
    one = run(tmp, arts["one"], [wfile], inp, f"one_{tag}")
    ref = model.forward(cfg, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"],
                        logits="last")
    for key in sorted(arts):
        if key == "one":
            continue
        got = run(tmp, arts[key], [wfile], inp, f"{key}_{tag}")
        err = rel_err(got["logits"], one["logits"])
        assert err <= 1e-5, f"{key} vs one rank: normwise {err:.3e}"
        assert rel_err(got["logits"], ref) <= 1e-4, key


def test_ep_decode_continues_prefill(experts):
    """Greedy generation: the decode entry's MoE (its grouped form, tiles
    of 4 rows) skips the other ranks' pairs as the prefill's does."""
    tmp, mlir, arts, cfg, weights, wfile = experts
    prompt = [int(x) for x in np.random.default_rng(2).integers(0, cfg.vocab_size, 9)]
    want = model.greedy_generate(cfg, weights, prompt, 5)
    for key in sorted(arts):
        r = subprocess.run([f"{BIN}/k3-run", str(arts[key]), "--weights", str(wfile), "--prompt",
                            ",".join(map(str, prompt)), "--max-new-tokens", "5", "--quiet"],
                           capture_output=True, text=True, check=True)
        assert [int(t) for t in r.stdout.strip().split(",")] == want, key
    key = "tp2_ep2" if "tp2_ep2" in arts else "tp4_ep2"
    r = subprocess.run([f"{BIN}/k3-run", str(arts[key]), "--weights", str(wfile), "--prompt",
                        "1,2", "--max-new-tokens", "1"], capture_output=True, text=True, check=True)
    tp = 2 if key == "tp2_ep2" else 4
    assert f"device: cpu ({2 * tp} ranks, tp={tp} ep=2 cp=1, a thread each)" in r.stdout, r.stdout


def test_rank_input_is_the_runtimes(experts):
    """The caller never passes k3.rank.ep: the runtime fills it per rank."""
    tmp, mlir, arts, cfg, weights, wfile = experts
    import k3
    s = k3.Session(k3.Artifact(str(arts["ep2"])), device="cpu")
    s.load_weights(str(wfile))
    inp = packed(cfg, [3], seed=1)
    with pytest.raises(k3.K3Error, match="'k3.rank.ep' is filled by the runtime"):
        s.run("forward", **inp, **{"k3.rank.ep": np.zeros(1, np.int32)})
    assert np.isfinite(s.run("forward", **inp)["logits"]).all()


def test_indivisible_experts_are_refused(experts):
    tmp, mlir, arts, cfg, weights, wfile = experts
    r = compile_with(mlir, tmp / "bad.k3bin", "ep=5")
    assert r.returncode != 0
    assert f"has {cfg.num_experts} routed experts, not divisible by ep = 5" in r.stderr


def test_ep_on_cuda_is_refused(experts):
    tmp, mlir, arts, cfg, weights, wfile = experts
    r = compile_with(mlir, tmp / "cuda.k3bin", "ep=2 target=cuda")
    assert r.returncode != 0
    assert "(expert parallelism) runs on the CPU target only" in r.stderr


@pytest.mark.skipif(not MPIRUN, reason="mpirun (Debian's openmpi-bin) not installed")
def test_mpirun_ep(experts):
    """ep=2 under `mpirun -np 2 k3-run --mpi`: a process per rank, each
    filling its own rank input; the same tokens as two threads."""
    tmp, _, arts, _, _, wfile = experts
    args = [str(arts["ep2"]), "--weights", str(wfile), "--prompt", "3,1,4,1,5", "--prompt", "9,2",
            "--max-new-tokens", "6", "--quiet"]
    threads = subprocess.run([f"{BIN}/k3-run", *args], capture_output=True, text=True, check=True)
    mpi = mpirun(2, args)
    assert mpi.returncode == 0, mpi.stderr
    assert mpi.stdout == threads.stdout and len(threads.stdout.splitlines()) == 2
