"""A/B of prefill artifacts of one model in one process (GPU machine): for
each run and each artifact, one sequence of T random tokens (the same
tokens for every artifact) through `forward`, timed with Session.time (CUDA
events), 3 warm-up + 20 reps. Numbers first: each row gives the normwise
relative error of its last-token logits against the first artifact's on
the same weights and tokens (`err_vs_first`). Runs interleave the artifacts
so that drift shows. One JSON line per (run, artifact, T). The counterpart
of bench/decode_ab.py.

    python3 bench/prefill_ab.py --runs 2 --tokens 8192 a.k3bin b.k3bin
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import k3  # noqa: E402
from ab_runs import ab_main  # noqa: E402


FIRST_LOGITS = {}  # T -> the first artifact's last-token logits


def time_artifact(path: str, tokens, rng):
    art = k3.Artifact(path)
    s = k3.Session(art, device="cuda:0")
    s.random_weights(1)
    for t in tokens:
        s.reset_state()
        ids = np.random.default_rng(t).integers(0, art.vocab_size, t).astype(np.int32)
        call = dict(token_ids=ids, cu_seqlens=np.array([0, t], np.int32),
                    context_lens=np.zeros(1, np.int32))
        logits = np.asarray(s.run("forward", **call)["logits"], np.float64)[-1]
        ref = FIRST_LOGITS.setdefault(t, logits)
        err = float(np.linalg.norm(logits - ref) / np.linalg.norm(ref))
        s.reset_state()
        times = sorted(s.time("forward", warmup=3, reps=20, **call))
        yield dict(artifact=path, T=t, err_vs_first=err, median_ms=times[len(times) // 2],
                   min_ms=times[0], max_ms=times[-1], reps=len(times))
    s.close()


def main() -> int:
    return ab_main(__doc__, "--tokens", "8192", time_artifact)


if __name__ == "__main__":
    sys.exit(main())
