"""Where a prefill's time goes outside its kernels (GPU machine), in one
session: for each run, the whole `forward` by graph replay (Session.time:
CUDA events around the entry, 3 warm-up + 20 reps), then the same call
profiled (every launch between its own events, graphs off: the entry's
time and the sum of its kernels' times). The three figures of a run share
the weights, the inputs and the process, so that their differences are not
run-to-run spread. One JSON line per run, then the profile of the last run.

    python3 bench/prefill_gap.py --runs 2 --tokens 8192 kl48b-prefill.k3bin
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import k3  # noqa: E402
from protocol import summary  # noqa: E402


def profiled(s, call, reps):
    """Entry times with profiling on, and the kernel sum a run."""
    s.profiling = True
    s.reset_profile()
    walls = s.time("forward", warmup=0, reps=reps, **call)
    rows = s.profile("forward")
    s.profiling = False
    runs = max(r["runs"] for r in rows) if rows else 1
    return walls, sum(r["total_ms"] for r in rows) / runs, rows, runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("artifact")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--profiled-reps", type=int, default=5)
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    art = k3.Artifact(args.artifact)
    s = k3.Session(art, device=args.device)
    s.random_weights(1)
    rng = np.random.default_rng(args.tokens)
    t = args.tokens
    call = dict(token_ids=rng.integers(0, art.vocab_size, t).astype(np.int32),
                cu_seqlens=np.array([0, t], np.int32), context_lens=np.zeros(1, np.int32))
    rows, runs = [], 1
    for run in range(args.runs):
        s.reset_state()
        graph = s.time("forward", warmup=3, reps=20, **call)
        walls, kernel_sum, rows, runs = profiled(s, call, args.profiled_reps)
        g = summary(graph)
        print(json.dumps(dict(artifact=args.artifact, T=t, run=run, graph_median_ms=g["median_ms"],
                              graph_min_ms=g["min_ms"], graph_max_ms=g["max_ms"],
                              profiled_median_ms=summary(walls)["median_ms"], kernel_sum_ms=kernel_sum,
                              launches=sum(r["calls"] for r in rows) // runs)), flush=True)
    for r in rows:
        print(f"  {r['kernel']:<32} {r['calls'] // runs:4d} {r['total_ms'] / runs:9.4f} ms"
              f"  {r['min_ms']:.4f}-{r['max_ms']:.4f}  grid {r['grid']}")
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
