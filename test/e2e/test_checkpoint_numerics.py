"""bench/checkpoint_numerics.py on the CPU, on the tiny Kimi-Linear config:
prepare (CPU target), the checkpoint stage (make_checkpoint, then reused),
our side loading it from the directory, a transformers side that cannot
run here (no torch) giving FAILED rows rather than missing ones, and the
compare stage's errors, greedy tokens and issue 17's bound on stand-in
transformers logits. The GPU run is the script's header's."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "checkpoint_numerics.py"
CONFIG = ROOT / "examples" / "configs" / "tiny-kimi-linear.json"
BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")
T = [8, 33]


def bench(tmp_path, *argv, check=True):
    env = dict(os.environ, K3_RESULTS_DIR=str(tmp_path / "results"), K3_COMMIT="test")
    common = ["--out", str(tmp_path / "out")]
    if argv[0] == "run":
        common += ["--work", str(tmp_path / "work")]
    p = subprocess.run([sys.executable, str(SCRIPT), *argv, *common], env=env, capture_output=True,
                       text=True, check=False, timeout=120)
    if check and p.returncode:
        raise AssertionError(p.stdout[-3000:] + p.stderr[-3000:])
    return p


def latest(tmp_path) -> list[dict]:
    files = sorted((tmp_path / "results").glob("checkpoint-numerics-*.json"), key=os.path.getmtime)
    doc = json.loads(files[-1].read_text())
    assert doc["environment"]["commit"] == "test" and doc["benchmark"] == "checkpoint-numerics"
    return doc["rows"]


def find(rows, **want) -> list[dict]:
    return [r for r in rows if all(r.get(k) == v for k, v in want.items())]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("numerics")
    bench(tmp, "prepare", "--config", str(CONFIG), "--target", "cpu", "--max-tokens", "64")
    return tmp


def test_ours_side_and_failed_rows(prepared):
    tmp = prepared
    p = bench(tmp, "run", "--stages", "checkpoint,ours,hf-f32,compare", "--device", "cpu",
              "--T", ",".join(map(str, T)), "--shard-gb", "0.00002", check=False)
    assert p.returncode == 1  # the transformers side cannot run here
    rows = latest(tmp)
    ck = find(rows, case="checkpoint")[0]
    assert ck["status"] == "ok" and not ck["reused"] and ck["shards"] > 1
    for variant in ("bf16 activations", "f32 activations"):
        load = find(rows, case="load", impl="k3", variant=variant)[0]
        assert load["status"] == "ok" and load["GBps"] > 0
        assert [r["status"] for r in find(rows, case="prefill", impl="k3", variant=variant)] == ["ok", "ok"]
    # No torch here: the side's setup error and every row it owed are FAILED, none missing.
    hf = find(rows, impl="transformers") + find(rows, case="setup")
    assert hf and all(r["status"] == "FAILED" for r in hf)
    assert "torch" in find(rows, case="setup")[0]["error"]
    assert len(find(rows, case="prefill", impl="transformers")) == len(T)
    # compare: ours f32 activations vs ours bf16 are not a pair; pairs needing transformers fail.
    num = find(rows, case="numerics")
    assert len(num) == 4 * len(T) and all(r["status"] == "FAILED" for r in num)
    assert all(r["status"] == "FAILED" for r in find(rows, case="bound"))
    # A second call reuses the checkpoint (same config, seed, names).
    bench(tmp, "run", "--stages", "checkpoint", "--shard-gb", "0.00002")
    assert find(latest(tmp), case="checkpoint")[0]["reused"] is True


def test_compare_rows_and_bound(prepared):
    tmp = prepared
    work = tmp / "work"
    f32 = dict(np.load(work / "logits-ours-f32.npz"))
    bf16 = dict(np.load(work / "logits-ours-bf16.npz"))
    rng = np.random.default_rng(0)

    def stand_in(name, src, scale):
        """Transformers' logits, made from ours: the reference (f32) and a
        bf16 farther from it than ours at T[0] and nearer at T[1]."""
        d = dict(src)
        for t, s in zip(T, scale, strict=True):
            x = src[f"T{t}"]
            d[f"T{t}"] = (x + s * np.linalg.norm(x) / np.sqrt(x.size) * rng.standard_normal(x.size)).astype(
                np.float32)
        np.savez(work / f"logits-{name}.npz", **d)

    stand_in("hf-f32", f32, [0.0, 0.0])
    err_ours = [np.linalg.norm(bf16[f"T{t}"] - f32[f"T{t}"]) / np.linalg.norm(f32[f"T{t}"]) for t in T]
    assert all(e > 0 for e in err_ours)
    stand_in("hf-bf16", f32, [2 * err_ours[0], err_ours[1] / 2])
    p = bench(tmp, "run", "--stages", "compare", "--T", ",".join(map(str, T)), check=False)
    assert p.returncode == 1  # the bound fails at T[1]
    rows = latest(tmp)
    assert {r["case"] for r in rows} == {"numerics", "bound"}
    ours = find(rows, case="numerics", pair="ours-bf16 vs hf-f32")
    assert [r["rel_err"] for r in ours] == pytest.approx(err_ours, rel=1e-6)
    assert find(rows, case="numerics", pair="ours-f32 vs hf-f32")[0]["rel_err"] == 0.0
    num = find(rows, case="numerics")
    assert all(r["status"] == "ok" and isinstance(r["same_argmax"], bool) for r in num)
    bound = find(rows, case="bound")
    assert [b["status"] for b in bound] == ["ok", "FAILED"]
    assert bound[0]["transformers_bf16_err"] == pytest.approx(2 * err_ours[0], rel=0.2)
    assert "> transformers bf16" in bound[1]["error"]
    # Logits of another checkpoint or other prompts are refused, not compared.
    d = dict(np.load(work / "logits-hf-bf16.npz"))
    d[f"ids{T[0]}"] = d[f"ids{T[0]}"][::-1].copy()
    np.savez(work / "logits-hf-bf16.npz", **d)
    bench(tmp, "run", "--stages", "compare", "--T", str(T[0]), check=False)
    bad = find(latest(tmp), case="numerics", pair="ours-bf16 vs hf-bf16")[0]
    assert bad["status"] == "FAILED" and "different checkpoints or prompts" in bad["error"]
    # The generated table shows them.
    sys.path.insert(0, str(ROOT / "bench"))
    import make_benchmarks_md as mk
    md = mk.render(tmp / "results", tmp)
    assert "bound: ours ≤ transformers" in md and "FAILED" in md
