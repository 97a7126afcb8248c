"""Session.profile() and Session.time() on the CPU (docs/runtime.md,
"Profiling and timing"): every launched kernel appears with the right
launch count, shares sum to 1, prefill and decode entries are kept apart,
and time() returns one time per timed run. No timed assertions."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import k3  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile")
    return k3.compile(ROOT / "examples/tiny_k3.mlir", d / "tiny.k3bin", max_tokens=64, max_seqs=2)


def inputs(ids, ctx=0):
    return dict(token_ids=np.asarray(ids, np.int32), cu_seqlens=np.array([0, len(ids)], np.int32),
                context_lens=np.array([ctx], np.int32))


def test_profile_counts_and_shares(art):
    s = k3.Session(art)
    s.random_weights(3)
    assert s.profile() == []  # turns profiling on, empty
    assert s.profiling and s.clock == "host steady_clock"
    T = 11
    ids = list(range(1, T + 1))
    ref = s.run(**inputs(ids))["logits"]
    n_fwd = art.entry("forward").num_launches
    prof = s.profile("forward")
    assert prof, "nothing profiled"
    assert sum(r["calls"] for r in prof) == n_fwd  # no empty grid at T=11, N=1
    assert all(r["runs"] == 1 and r["entry"] == "forward" for r in prof)
    assert abs(sum(r["share"] for r in prof) - 1.0) < 1e-9
    assert [r["total_ms"] for r in prof] == sorted((r["total_ms"] for r in prof), reverse=True)
    assert all(0 <= r["min_ms"] <= r["max_ms"] <= r["total_ms"] + 1e-12 for r in prof)
    assert all(len(r["grid"]) == 3 and min(r["block"]) >= 1 for r in prof)
    # Decode steps through the decode entry: counted apart, no launch graph.
    for k in range(3):
        s.run("forward_decode", **inputs([7], T + k))
    assert s.graph_stats == (0, 0)
    dec = s.profile("forward_decode")
    assert sum(r["calls"] for r in dec) == 3 * art.entry("forward_decode").num_launches
    assert all(r["runs"] == 3 for r in dec)
    both = s.profile()
    assert sum(r["calls"] for r in both) == n_fwd + 3 * art.entry("forward_decode").num_launches
    assert abs(sum(r["share"] for r in both) - 1.0) < 1e-9
    # Profiling does not change results.
    s.reset_state()
    np.testing.assert_array_equal(s.run(**inputs(ids))["logits"], ref)
    s.reset_profile()
    assert s.profile() == []
    s.profiling = False
    s.run(**inputs(ids))
    assert s.profile() == []  # profile() turned it back on, empty


def test_time_returns_each_run(art):
    s = k3.Session(art)
    s.random_weights(3)
    ms = s.time("forward", warmup=2, reps=20, **inputs([1, 2, 3]))
    assert len(ms) == 20 and all(isinstance(t, float) and t >= 0 for t in ms)
    s.profiling = True
    s.reset_state()
    s.time("forward", warmup=1, reps=3, **inputs([1, 2, 3]))
    assert {r["runs"] for r in s.profile("forward")} == {4}
    with pytest.raises(k3.K3Error, match="reps >= 1"):
        s.time("forward", warmup=0, reps=0, **inputs([1, 2, 3]))
