"""The driver shared by the same-process A/B scripts (bench/decode_ab.py,
bench/prefill_ab.py): runs interleave the artifacts, so that drift between
them shows, and every timed row is one JSON line with its run number."""
import argparse
import json
from typing import Callable, Iterable

import numpy as np

TimeArtifact = Callable[[str, list, np.random.Generator], Iterable[dict]]


def ab_main(doc: str, flag: str, default: str, time_artifact: TimeArtifact) -> int:
    """Command line: artifacts, --runs, and `flag` (comma-separated integers
    handed to time_artifact, e.g. --batches or --tokens)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("artifacts", nargs="+")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument(flag, default=default)
    a = ap.parse_args()
    values = [int(v) for v in getattr(a, flag.lstrip("-")).split(",")]
    rng = np.random.default_rng(3)
    failed = 0
    for run in range(1, a.runs + 1):
        for path in a.artifacts:
            # A crash or a failed check is a failed row, never a missing one
            # (the artifacts after it still get theirs).
            try:
                for row in time_artifact(path, values, rng):
                    print(json.dumps(dict(run=run, status="ok", **row)), flush=True)
            except Exception as e:  # noqa: BLE001 (any failure is the row's)
                failed += 1
                print(json.dumps(dict(run=run, artifact=path, status="FAILED",
                                      error=f"{type(e).__name__}: {e}")), flush=True)
    return 1 if failed else 0
