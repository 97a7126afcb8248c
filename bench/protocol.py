"""The benchmark protocol every script in bench/ follows (issue 18).

* Timing: CUDA events after warm-up, the median of >= 20 runs, with min
  and max. Ours through the runtime's timing API (``k3.Session.time``:
  two CUDA events around the whole entry); anchors (fla, FlashKDA, torch)
  through ``torch.cuda.Event`` pairs (``cuda_event_times``), in the same
  process, on the same device tensors.
* Correctness first: every benchmarked configuration is checked against
  the f64 oracle at its own shapes before its time counts; a crash, an
  exception or a failed check is a FAILED row (``Results.guard``), never a
  missing one.
* Raw results: ``Results.write`` puts one JSON file under bench/results/
  ($K3_RESULTS_DIR overrides) with the GPU, driver, date, commit and every
  row; bench/gpu_session.sh bundles them into $OUT for the trip back.
  docs/benchmarks.md is generated from those files
  (bench/make_benchmarks_md.py).

The commit comes from $K3_COMMIT, else out/bench/COMMIT (written by
bench/prepare_gpu.sh: the device machine gets a copy of the working tree
without .git), else ``git rev-parse`` when there is a .git.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
WARMUP = int(os.environ.get("K3_BENCH_WARMUP", "5"))
REPS = max(20, int(os.environ.get("K3_BENCH_REPS", "20")))  # never fewer than 20


def summary(ms: list[float]) -> dict:
    """median / min / max / number of timed runs, in ms."""
    if not ms:
        raise ValueError("no timed runs")
    return {"median_ms": statistics.median(ms), "min_ms": min(ms), "max_ms": max(ms), "reps": len(ms)}


def cuda_event_times(fn: Callable[[], object], warmup: int = WARMUP, reps: int = REPS) -> list[float]:
    """Times ``fn`` (which launches work on torch's current stream) with a
    pair of torch.cuda.Event per run, after ``warmup`` untimed calls."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def k3_times(session, entry: str, warmup: int = WARMUP, reps: int = REPS, **inputs) -> list[float]:
    """Our time: the runtime's timing API (CUDA events around the entry's
    launches on the GPU; the host clock on the CPU). torch's queue is
    drained first so our events time only our work."""
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except ImportError:
        pass
    return session.time(entry, warmup=warmup, reps=reps, **inputs)


def commit() -> str:
    if os.environ.get("K3_COMMIT"):
        return os.environ["K3_COMMIT"]
    f = ROOT / "out" / "bench" / "COMMIT"
    if f.is_file():
        return f.read_text().strip()
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def environment() -> dict:
    """GPU name, driver, CUDA, torch/triton versions, host, date, commit."""
    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "commit": commit(), "host": platform.node(), "python": sys.version.split()[0]}
    # Runtime settings that change how our rows ran (docs/runtime.md).
    for var in ("K3_LAUNCH_LANES", "K3_LAUNCH_GRAPHS", "K3_GRID_OVERLAP"):
        if os.environ.get(var) is not None:
            env[var] = os.environ[var]
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        if q.returncode == 0 and q.stdout.strip():
            name, driver, clock = [x.strip() for x in q.stdout.splitlines()[0].split(",")][:3]
            env.update(gpu=name, driver=driver, max_sm_clock=clock)
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            env.setdefault("gpu", torch.cuda.get_device_name())
    except ImportError:
        pass
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        pass
    env.setdefault("gpu", "none (CPU)")
    return env


def rel_err(got, want) -> float:
    """Normwise relative error ||got - want|| / ||want|| (torch or numpy),
    inf when got has a non-finite entry."""
    try:
        import torch
        if isinstance(got, torch.Tensor):
            got, want = got.double(), want.double().to(got.device)
            if not torch.isfinite(got).all():
                return float("inf")
            return float((got - want).norm() / want.norm())
    except ImportError:
        pass
    import numpy as np
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


class Results:
    """Rows of one benchmark run. Each row: ``case`` (a label), ``impl``
    (k3, k3-baseline, fla, flashkda, torch...), ``variant``, ``shape`` (a
    dict), ``status`` ("ok" or "FAILED"), ``error`` (why it failed),
    ``median_ms``/``min_ms``/``max_ms``/``reps`` and any extra fields
    (``err_vs_oracle``, ``TBps``, ``ratio_vs_baseline``...)."""

    def __init__(self, name: str, tag: str = ""):
        self.name = name
        self.tag = tag  # part of the file name (one benchmark split over several calls)
        self.env = environment()
        self.rows: list[dict] = []
        # With K3_RESULTS_AUTOSAVE=1 the file is rewritten before and after
        # each guarded row: a run killed by a time limit (or hung in one
        # implementation) leaves every finished row and the unfinished one
        # as FAILED, never a missing row.
        self.autosave = os.environ.get("K3_RESULTS_AUTOSAVE") == "1"
        self._pending: Optional[dict] = None

    def add(self, **row) -> dict:
        row.setdefault("status", "ok")
        self.rows.append(row)
        print(json.dumps(row, default=str), flush=True)
        if self.autosave:
            self.write(quiet=True)
        return row

    def failed(self, why: str, **row) -> dict:
        return self.add(status="FAILED", error=why[-2000:], **row)

    def guard(self, fn: Callable[[], Optional[dict]], **row) -> dict:
        """Runs ``fn`` (returns the row's measured fields, or raises); any
        exception, including a k3 runtime error, becomes a FAILED row with
        the same identifying fields."""
        if self.autosave:
            self._pending = dict(row, status="FAILED",
                                 error="did not finish: the run was killed (time limit) or hung here")
            self.write(quiet=True)
        try:
            fields = fn() or {}
        except Exception as e:  # noqa: BLE001
            tb = traceback.format_exc(limit=3)
            self._pending = None
            return self.failed(f"{type(e).__name__}: {e}\n{tb}", **row)
        self._pending = None
        row.update(fields)
        return self.add(**row)

    @property
    def failures(self) -> list[dict]:
        """FAILED rows (a ``skipped`` row, a case an anchor refuses, is not
        a failure)."""
        return [r for r in self.rows if r.get("status") not in ("ok", "skipped")]

    def write(self, out_dir: Optional[Path] = None, quiet: bool = False) -> Path:
        """bench/results/<name>[-<tag>]-<gpu>-<date>.json (K3_RESULTS_DIR
        overrides the folder)."""
        gpu = "".join(c if c.isalnum() else "-" for c in self.env.get("gpu", "gpu")).strip("-").lower()
        stamp = self.env["date"].replace(":", "").replace("-", "")
        folder = Path(out_dir or os.environ.get("K3_RESULTS_DIR", RESULTS))
        folder.mkdir(parents=True, exist_ok=True)
        tag = f"-{self.tag}" if self.tag else ""
        path = folder / f"{self.name}{tag}-{gpu}-{stamp}.json"
        doc = {"benchmark": self.name, "tag": self.tag, "environment": self.env,
               "protocol": {"timing": "CUDA events after warm-up (ours: k3 Session.time; anchors: "
                                      "torch.cuda.Event in the same process on the same tensors)",
                            "warmup": WARMUP, "reps": REPS, "statistic": "median, min, max",
                            "check": "f64 oracle at the benchmarked shape before timing"},
               "rows": self.rows + ([self._pending] if self._pending else [])}
        path.write_text(json.dumps(doc, indent=1, default=str))
        if not quiet:
            print(f"wrote {path} ({len(self.rows)} rows, {len(self.failures)} FAILED)")
        return path
