"""A/B of decode artifacts of one model in one process (GPU machine): for
each run and each artifact, a 128-token prompt per sequence, then the
decode entry timed with Session.time (CUDA events; a launch graph after the
first replays), 3 warm-up + 20 reps, at B = 1, 8 and 64. Runs interleave
the artifacts so that drift shows. One JSON line per (run, artifact, B).

    python3 bench/decode_ab.py --runs 2 a.k3bin b.k3bin

K3_DECODE_AB_PROMPT sets the prompt length (an artifact compiled for
max-tokens M runs B sequences of prompts up to M / B tokens).
"""
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import k3  # noqa: E402
from ab_runs import ab_main  # noqa: E402

PROMPT = int(os.environ.get("K3_DECODE_AB_PROMPT", "128"))


def time_artifact(path: str, batches, rng) -> None:
    art = k3.Artifact(path)
    s = k3.Session(art, device="cuda:0")
    s.random_weights(1)
    for b in batches:
        s.reset_state()
        ids = rng.integers(0, art.vocab_size, b * PROMPT).astype(np.int32)
        first = s.run("forward", token_ids=ids, cu_seqlens=np.arange(b + 1, dtype=np.int32) * PROMPT,
                      context_lens=np.zeros(b, np.int32))["next_tokens"]
        step = dict(token_ids=np.asarray(first, np.int32), cu_seqlens=np.arange(b + 1, dtype=np.int32),
                    context_lens=np.full(b, PROMPT, np.int32))
        s.run("forward_decode", **step)
        t = sorted(s.time("forward_decode", warmup=3, reps=20, **step))
        yield dict(artifact=path, B=b, median_ms=t[len(t) // 2], min_ms=t[0], max_ms=t[-1], reps=len(t))
    s.close()


def main() -> int:
    return ab_main(__doc__, "--batches", "1,8,64", time_artifact)


if __name__ == "__main__":
    sys.exit(main())
