"""bench/ on the CPU: the f64 KDA oracle the GPU benchmark runs in torch
(bench/kda_oracle.py, here through numpy) against k3ref's recurrence, the
protocol's FAILED rows and raw JSON (bench/protocol.py), our timing API
feeding it, and docs/benchmarks.md generated from results
(bench/make_benchmarks_md.py). No timed assertions."""
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import kda_oracle  # noqa: E402
import protocol  # noqa: E402
from k3ref import ops  # noqa: E402


@pytest.mark.parametrize("lens", [[37], [1, 63, 64, 65, 7], [5, 5, 9]])
def test_kda_oracle_matches_k3ref(lens):
    rng = np.random.default_rng(len(lens))
    T, N, H, K, V = sum(lens), len(lens), 3, 8, 6
    q, k, g = (rng.standard_normal((1, T, H, K)) for _ in range(3))
    v = rng.standard_normal((1, T, H, V))
    beta = rng.standard_normal((1, T, H))
    A_log, dt_bias = rng.standard_normal(H), rng.standard_normal(H * K)
    s0 = rng.standard_normal((N, H, K, V))
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    gate = ops.kda_gate_lower_bounded(g, A_log, dt_bias, -5.0)
    o_ref, s_ref = ops.kda_recurrent(q, k, v, gate, ops.sigmoid(beta), K ** -0.5, initial_state=s0,
                                     cu_seqlens=cu, use_qk_l2norm=True)
    gate2 = kda_oracle.gate_lower_bounded(g, A_log, dt_bias.reshape(H, K), -5.0)
    np.testing.assert_allclose(gate2, gate, rtol=1e-13, atol=1e-13)
    o, s = kda_oracle.kda_f64(q, k, v, gate2, kda_oracle.sigmoid(beta), K ** -0.5, s0, lens)
    np.testing.assert_allclose(o, o_ref, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(s, s_ref, rtol=1e-11, atol=1e-11)


def test_results_failed_rows_and_json(tmp_path, monkeypatch):
    monkeypatch.setenv("K3_COMMIT", "abc123")
    monkeypatch.delenv("OUT", raising=False)
    r = protocol.Results("unit")
    assert r.env["commit"] == "abc123" and r.env["date"].endswith("Z")
    ok = r.guard(lambda: protocol.summary([3.0, 1.0, 2.0] * 7), case="a", impl="k3")
    assert ok["status"] == "ok" and ok["median_ms"] == 2.0 and ok["min_ms"] == 1.0
    assert ok["max_ms"] == 3.0 and ok["reps"] == 21

    def crash():
        raise RuntimeError("k3-run died")
    bad = r.guard(crash, case="b", impl="k3", variant="mma")
    assert bad["status"] == "FAILED" and "k3-run died" in bad["error"] and bad["variant"] == "mma"
    assert r.failures == [bad]
    # An anchor that refuses a case is a skipped row, not a failure.
    r.add(status="skipped", case="c", impl="torch", error="No available kernel")
    assert r.failures == [bad]
    path = r.write(tmp_path)
    doc = json.loads(path.read_text())
    assert doc["environment"]["commit"] == "abc123"
    assert [row["status"] for row in doc["rows"]] == ["ok", "FAILED", "skipped"]
    assert doc["protocol"]["reps"] >= 20
    with pytest.raises(ValueError):
        protocol.summary([])
    assert protocol.rel_err([1.0, np.inf], [1.0, 1.0]) == float("inf")


def test_results_autosave_marks_the_unfinished_row(tmp_path, monkeypatch):
    """A run killed inside an implementation leaves that row FAILED in the
    file, beside every finished row."""
    monkeypatch.setenv("K3_RESULTS_AUTOSAVE", "1")
    monkeypatch.setenv("K3_RESULTS_DIR", str(tmp_path))
    r = protocol.Results("unit")
    r.guard(lambda: {"median_ms": 1.0}, case="a", impl="fla")
    seen = {}

    def running():
        (path,) = tmp_path.glob("unit-*.json")
        seen["rows"] = json.loads(path.read_text())["rows"]
        return {"median_ms": 2.0}
    r.guard(running, case="b", impl="flashkda")
    assert [(x["case"], x["status"]) for x in seen["rows"]] == [("a", "ok"), ("b", "FAILED")]
    assert "did not finish" in seen["rows"][1]["error"]
    (path,) = tmp_path.glob("unit-*.json")
    assert [x["status"] for x in json.loads(path.read_text())["rows"]] == ["ok", "ok"]


@pytest.mark.skipif(not os.environ.get("K3_BIN_DIR"), reason="K3_BIN_DIR not set")
def test_k3_times_on_cpu(tmp_path):
    import k3
    art = k3.compile(ROOT / "examples/tiny_k3.mlir", tmp_path / "tiny.k3bin", max_tokens=32, max_seqs=1)
    s = k3.Session(art)
    s.random_weights(1)
    ms = protocol.k3_times(s, "forward", warmup=1, reps=protocol.REPS,
                           token_ids=np.array([1, 2, 3], np.int32), cu_seqlens=np.array([0, 3], np.int32),
                           context_lens=np.array([0], np.int32))
    st = protocol.summary(ms)
    assert st["reps"] == protocol.REPS >= 20 and st["min_ms"] <= st["median_ms"] <= st["max_ms"]


def test_make_benchmarks_md(tmp_path):
    import make_benchmarks_md as mk
    res = tmp_path / "results"
    res.mkdir()
    doc = {"benchmark": "kda_forward",
           "environment": {"gpu": "NVIDIA H200", "driver": "580.1", "date": "2026-12-02T01:00:00Z",
                           "commit": "deadbeef"},
           "rows": [
               {"case": "B1 T8192 H96", "impl": "fla", "variant": "chunk_kda", "status": "ok",
                "median_ms": 2.6, "min_ms": 2.5, "max_ms": 2.7, "reps": 20,
                "err_vs_oracle": {"o": 3e-3, "final_state": 1e-3}},
               {"case": "B1 T8192 H96", "impl": "k3", "variant": "mma", "status": "ok",
                "median_ms": 1.1, "min_ms": 1.0, "max_ms": 1.2, "reps": 20,
                "err_vs_oracle": {"o": 4e-3, "final_state": 2e-3}, "ratio_vs_baseline": 1.01},
               {"case": "B1 T8192 H96", "impl": "k3", "variant": "recurrent", "status": "FAILED",
                "error": "k3-run crashed"}]}
    (res / "kda_forward-nvidia-h200-20261202T010000Z.json").write_text(json.dumps(doc))
    md = mk.render(res, ROOT)
    assert "B1 T8192 H96" in md and "FAILED" in md and "1.100" in md
    assert "kda_forward-nvidia-h200-20261202T010000Z.json" in md
    assert "deadbeef" in md and "NVIDIA H200" in md


def test_benchmarks_md_latest_run_merges_parts(tmp_path):
    """A benchmark split over device calls (tags) whose harness changed in
    between: the newest file's commit, plus each other tag's newest file of
    the day before it on the same GPU; older ones stay links, and the cases
    they measured that the latest run did not keep their newest row. Each
    GPU has a section of its own."""
    import make_benchmarks_md as mk
    res = tmp_path / "results"
    res.mkdir()

    def write(tag, date, commit, case, ms):
        doc = {"benchmark": "kda_forward", "tag": tag,
               "environment": {"gpu": "NVIDIA H200", "date": date, "commit": commit},
               "rows": [{"case": case, "impl": "k3", "variant": "mma", "status": "ok",
                         "median_ms": ms, "min_ms": ms, "max_ms": ms, "reps": 20}]}
        stamp = date.replace(":", "").replace("-", "")
        (res / f"kda_forward-{tag}-nvidia-h200-{stamp}.json").write_text(json.dumps(doc))
    write("a", "2026-12-01T10:00:00Z", "old", "too old", 9.0)      # a day and more before
    write("b", "2026-12-04T09:00:00Z", "c1", "B8 T4096 H32", 1.5)  # another part, earlier commit
    write("a", "2026-12-04T09:30:00Z", "c1", "superseded", 2.0)    # the same part, newer below
    write("a", "2026-12-04T10:00:00Z", "c2", "B1 T8192 H96", 1.05)
    write("a", "2026-12-05T10:00:00Z", "c3", "B1 T8192 H96", 1.2)  # another GPU, newer
    doc = json.loads(next(res.glob("*20261205T100000Z.json")).read_text())
    doc["environment"]["gpu"] = "NVIDIA H100 80GB HBM3"
    next(res.glob("*20261205T100000Z.json")).write_text(json.dumps(doc))
    md = mk.render(res, ROOT)
    # One section per GPU, the most recently measured first.
    h100, h200 = md.split("### kda_forward: NVIDIA H100")[1].split("### kda_forward: NVIDIA H200")
    assert "1.200" in h100 and "1.050" not in h100 and "B8 T4096 H32" not in h100
    table, carried = h200.split("Cases that the run above did not measure")
    assert "B8 T4096 H32" in table and "B1 T8192 H96" in table
    assert "superseded" not in table and "too old" not in table
    assert "`c1`" in table and "`c2`" in table  # each part's commit
    # The cases the latest run did not measure keep their newest row, with
    # its file; the older files stay links.
    carried = carried.split("Earlier run")[0]
    assert "superseded" in carried and "20261204T093000Z" in carried
    assert "too old" in carried and "20261201T100000Z" in carried
    assert "1.500" not in carried and "1.050" not in carried
    assert h200.count("Earlier run") == 2


def test_kda_forward_rows(tmp_path, monkeypatch):
    """bench/kda_forward.py's per-variant logic with stand-ins for the GPU
    session: a check failure, a crash and a missing artifact are FAILED rows;
    with a baseline both are timed and the row carries the ratio."""
    import kda_forward as kf
    ref = (np.ones((1, 4, 2, 3)), np.ones((1, 2, 3, 3)))

    class Fake:
        def __init__(self, path, entry="forward"):
            if "missing" in str(path):
                raise FileNotFoundError(f"{path}: artifact missing")
            self.path = str(path)

        def outputs(self, torch, ins):
            if "crash" in self.path:
                raise RuntimeError("device error: illegal address")
            bad = "wrong" in self.path
            return ref[0] * (2.0 if bad else 1.0), ref[1]

        def times(self, ins):
            return [2.0 if "base" in self.path else 1.0] * protocol.REPS

        def close(self):
            pass

    monkeypatch.setattr(kf, "Ours", Fake)
    res = protocol.Results("unit")
    ident = {"case": "c", "variant": "mma"}
    kf.run_ours(res, None, "new.k3bin", None, {}, ref, ident)
    kf.run_ours(res, None, "wrong.k3bin", None, {}, ref, ident)
    kf.run_ours(res, None, "crash.k3bin", None, {}, ref, ident)
    kf.run_ours(res, None, "new.k3bin", "base/new.k3bin", {}, ref, ident)
    kf.run_ours(res, None, "new.k3bin", "missing/new.k3bin", {}, ref, ident)
    st = [(r["impl"], r["status"]) for r in res.rows]
    assert st == [("k3", "ok"), ("k3", "FAILED"), ("k3", "FAILED"), ("k3", "ok"), ("k3-baseline", "ok"),
                  ("k3-baseline", "FAILED"), ("k3", "ok")], st
    assert res.rows[0]["median_ms"] == 1.0 and res.rows[0]["err_vs_oracle"]["o"] == 0.0
    assert "numerics" in res.rows[1]["error"] and "illegal address" in res.rows[2]["error"]
    assert res.rows[3]["ratio_vs_baseline"] == 0.5 and res.rows[3]["reps"] == 3 * protocol.REPS
    assert "missing" in res.rows[5]["error"]


def test_benchmarks_md_is_generated():
    """docs/benchmarks.md is bench/make_benchmarks_md.py's output for the
    committed results (run it after adding results)."""
    import make_benchmarks_md as mk
    assert mk.render() == (ROOT / "docs" / "benchmarks.md").read_text(), \
        "docs/benchmarks.md is stale: python3 bench/make_benchmarks_md.py"


def test_ab_runs_interleave(monkeypatch, capsys):
    """bench/ab_runs.py (the A/B scripts' driver): every run visits every
    artifact in order with every value, one JSON line per row."""
    import ab_runs
    seen = []

    def time_artifact(path, values, rng):
        for v in values:
            seen.append((path, v))
            yield dict(artifact=path, T=v, median_ms=1.0)
    monkeypatch.setattr(sys, "argv", ["prefill_ab.py", "--runs", "2", "--tokens", "8,16", "a", "b"])
    assert ab_runs.ab_main("doc", "--tokens", "8192", time_artifact) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["run"], r["artifact"], r["T"]) for r in rows] == [
        (run, a, t) for run in (1, 2) for a in ("a", "b") for t in (8, 16)]
    assert len(seen) == 8


def test_ab_runs_failed_artifact_is_a_row(monkeypatch, capsys):
    """An artifact that raises (a failed check, a device error) gives a
    failed row with the error, the others still run, and the exit status
    says that one failed."""
    import ab_runs

    def time_artifact(path, values, rng):
        if path == "bad":
            raise RuntimeError("illegal address")
        for v in values:
            yield dict(artifact=path, T=v, median_ms=1.0)
    monkeypatch.setattr(sys, "argv", ["prefill_ab.py", "--runs", "1", "--tokens", "8", "bad", "good"])
    assert ab_runs.ab_main("doc", "--tokens", "8192", time_artifact) == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [dict(run=1, artifact="bad", status="FAILED", error="RuntimeError: illegal address"),
                    dict(run=1, status="ok", artifact="good", T=8, median_ms=1.0)]
