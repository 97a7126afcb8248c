"""Launch lanes A/B (GPU machine): one prefill artifact, sessions with
K3_LAUNCH_LANES=1 and =N in turn (read when a session is created; the
runtime's docs/runtime.md "Lanes"). Numbers first: in each session the
logits of a run replayed from its launch graph (captured with lanes) must
equal bit for bit those of its first run (launch by launch, in order), or
the row is FAILED. Then Session.time (CUDA events), 3 warm-up + 20 reps.
One JSON line per (run, lanes, T); runs interleave the lane counts.

    python3 bench/lanes_ab.py --runs 2 --tokens 8192 --lanes 1,4 a.k3bin
"""
import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import k3  # noqa: E402


def logits(s: "k3.Session", call: dict) -> np.ndarray:
    s.reset_state()
    return np.array(s.run("forward", **call)["logits"], copy=True)


def measure(path: str, device: str, lanes: int, t: int, rng: np.random.Generator) -> dict:
    os.environ["K3_LAUNCH_LANES"] = str(lanes)
    art = k3.Artifact(path)
    s = k3.Session(art, device=device)
    try:
        s.random_weights(1)
        call = dict(token_ids=rng.integers(0, art.vocab_size, t).astype(np.int32),
                    cu_seqlens=np.array([0, t], np.int32), context_lens=np.zeros(1, np.int32))
        in_order = logits(s, call)  # first run: launch by launch
        logits(s, call)  # second: captured into a graph, then replayed
        replayed = logits(s, call)
        captured, replays = s.graph_stats
        used, waits = s.graph_lanes
        same = bool(np.array_equal(in_order.view(np.uint8), replayed.view(np.uint8)))
        row = dict(artifact=path, lanes=lanes, lanes_used=used, lane_waits=waits, T=t,
                   graphs=captured, replays=replays, bitwise_equal=same,
                   max_abs_diff=float(np.max(np.abs(in_order.astype(np.float64) -
                                                     replayed.astype(np.float64)))))
        if not same or captured < 1:
            return dict(row, status="FAILED")
        s.reset_state()
        times = sorted(s.time("forward", warmup=3, reps=20, **call))
        return dict(row, median_ms=times[len(times) // 2], min_ms=times[0], max_ms=times[-1],
                    reps=len(times), status="ok")
    except k3.K3Error as e:
        return dict(artifact=path, lanes=lanes, T=t, status="FAILED", error=str(e))
    finally:
        s.close()
        art.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("artifact")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--tokens", default="8192")
    ap.add_argument("--lanes", default="1,4")
    ap.add_argument("--device", default="cuda:0")
    a = ap.parse_args()
    ok = True
    for run in range(1, a.runs + 1):
        for t in [int(v) for v in a.tokens.split(",")]:
            for lanes in [int(v) for v in a.lanes.split(",")]:
                row = measure(a.artifact, a.device, lanes, t, np.random.default_rng(3 + t))
                ok &= row["status"] == "ok"
                print(json.dumps(dict(run=run, **row)), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
