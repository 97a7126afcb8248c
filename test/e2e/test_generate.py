"""Generation through the runtime's loop (k3_generation_*) on the tiny model:
greedy is exactly the argmax loop over Session.run's logits (the algorithm
k3-run and Session.generate used before), sampling is seeded and
reproducible, a batch of prompts of different lengths with per-sequence
settings gives each sequence what it gets alone, streaming yields the same
tokens, and bad requests are clear errors.

    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_generate.py
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import k3  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")
MAX_TOKENS, MAX_SEQS, SEED = 64, 4, 7


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    d = tmp_path_factory.mktemp("generate")
    return k3.compile(ROOT / "examples/tiny_k3.mlir", d / "tiny.k3bin",
                      max_tokens=MAX_TOKENS, max_seqs=MAX_SEQS)


@pytest.fixture(scope="module")
def sess(art):
    s = k3.Session(art)
    s.random_weights(SEED)
    return s


def argmax_loop(s, prompt, n):
    """The greedy loop as it was: run(), np.argmax of the last logits row
    (the first maximum), the decode entry for the steps after the prompt."""
    s.reset_state(-1)
    out, pos, step = [], 0, list(prompt)
    while len(out) < n:
        k = len(step)
        r = s.run("forward" if pos == 0 else "forward_decode",
                  token_ids=np.asarray(step, np.int32), cu_seqlens=np.asarray([0, k], np.int32),
                  context_lens=np.asarray([pos], np.int32))
        out.append(int(np.argmax(r["logits"][-1])))
        pos += k
        step = [out[-1]]
    return out


def test_greedy_is_exactly_the_argmax_loop(art, sess):
    for prompt in ([1, 2, 3], [200, 17, 5, 9, 33, 100, 2], [42]):
        want = argmax_loop(sess, prompt, 12)
        assert sess.generate(prompt, 12) == want
        r = subprocess.run([f"{BIN}/k3-run", str(art.path), "--random-weights", str(SEED),
                            "--prompt", ",".join(map(str, prompt)), "--max-new-tokens", "12",
                            "--quiet"], capture_output=True, text=True, check=True)
        assert r.stdout.strip() == ",".join(map(str, want))


def test_greedy_matches_the_compiled_argmax_kernel(sess):
    """The model's own `next_tokens` output (the compiled argmax kernel: the
    first maximum wins) agrees with the sampler's greedy rule on every row,
    including rows with ties made on purpose."""
    sess.reset_state()
    # logits=last (the default): one row per sequence.
    out = sess.run(token_ids=np.arange(1, 30, dtype=np.int32),
                   cu_seqlens=np.array([0, 3, 10, 11, 29], np.int32),
                   context_lens=np.zeros(4, np.int32))
    rows = out["logits"]
    assert rows.shape == (4, 256)
    assert [k3.sample(r) for r in rows] == out["next_tokens"].tolist()
    tied = rows[3].copy()
    tied[[7, 200]] = tied.max() + 1.0
    assert k3.sample(tied) == 7 == int(np.argmax(tied))


def test_seeded_sampling_is_reproducible(art, sess):
    kw = dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.02, repetition_penalty=1.1)
    a = sess.generate([5, 6, 7], 16, seed=123, **kw)
    b = sess.generate([5, 6, 7], 16, seed=123, **kw)
    c = sess.generate([5, 6, 7], 16, seed=124, **kw)
    assert a == b and a != c
    args = [f"{BIN}/k3-run", str(art.path), "--random-weights", str(SEED), "--prompt", "5,6,7",
            "--max-new-tokens", "16", "--temperature", "0.9", "--top-k", "40", "--top-p", "0.95",
            "--min-p", "0.02", "--repetition-penalty", "1.1", "--seed", "123", "--quiet"]
    r = subprocess.run(args, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ",".join(map(str, a))  # same sampler, same stream 0


def test_batch_of_different_lengths_per_sequence_settings(sess):
    prompts = [[1, 2, 3], [9] * 11, [100, 101], [7, 8, 9, 10, 11]]
    temps = [0.0, 1.0, 0.0, 0.7]
    seeds = [0, 5, 0, 9]
    maxn = [6, 9, 4, 7]
    batch = sess.generate(prompts, maxn, temperature=temps, seed=seeds, top_k=[0, 50, 0, 0])
    assert [len(b) for b in batch] == maxn
    assert sess.last_generation.finish_reasons == ["length"] * 4
    # With one seed per sequence each uses its own RNG stream 0: alone it
    # gets the same tokens (independent of the batch it is in).
    for p, t, sd, n, k, got in zip(prompts, temps, seeds, maxn, [0, 50, 0, 0], batch):
        alone = sess.generate(p, n, temperature=t, seed=sd, top_k=k)
        assert alone == got
    assert batch[0] == argmax_loop(sess, prompts[0], 6)


def test_stop_tokens_and_streaming(sess):
    full = sess.generate([3, 4, 5], 10)
    stop = full[4]
    cut = sess.generate([3, 4, 5], 10, stop_token_ids=[stop])
    assert cut == full[:full.index(stop) + 1]
    assert sess.last_generation.finish_reasons == ["stop_token"]
    assert list(sess.generate([3, 4, 5], 10, stream=True)) == full
    pieces = list(sess.generate([[3, 4, 5], [6]], 3, stream=True))
    assert sorted({i for i, _ in pieces}) == [0, 1] and len(pieces) == 6
    assert [t for i, t in pieces if i == 0] == full[:3]


def test_a_new_generation_ends_an_open_stream(sess):
    first = sess.generate([3, 4, 5], 10, stream=True)
    assert isinstance(next(first), int)
    assert len(sess.generate([6], 3)) == 3
    with pytest.raises(k3.K3Error, match="ended by a newer generate"):
        list(first)


def test_sample_matches_the_runtime_sampler():
    logits = np.log(np.array([0.05, 0.5, 0.15, 0.3], np.float32))
    draws = [k3.sample(logits, temperature=1.0, top_p=0.7, seed=3, step=i) for i in range(4000)]
    counts = np.bincount(draws, minlength=4) / 4000
    assert counts[0] == 0 and counts[2] == 0
    assert abs(counts[1] - 0.625) < 0.04
    assert k3.sample(logits) == 1  # greedy
    assert k3.sample([1.0, 3.0, 3.0]) == 1  # ties: the lowest id


def test_errors(art, sess):
    with pytest.raises(k3.K3Error, match="prompt token 1 = 256 is out of range for vocab_size 256"):
        sess.generate([1, 256], 4)
    with pytest.raises(k3.K3Error, match="prompt has 65 tokens but the artifact was compiled "
                                         "for max_tokens 64"):
        sess.generate([1] * 65, 4)
    with pytest.raises(k3.K3Error, match="5 sequences but the artifact was compiled for max_seqs 4"):
        sess.generate([[1]] * 5, 2)
    with pytest.raises(k3.K3Error, match="top_p"):
        sess.generate([1], 2, temperature=1.0, top_p=0.0)
    with pytest.raises(k3.K3Error, match="temperature has 1 values for 2 prompts"):
        sess.generate([[1], [2]], 2, temperature=[1.0])
    with pytest.raises(k3.K3Error, match="need a tokenizer"):
        sess.generate("hello", 2)
    for args, msg in ((["--prompt", "1,300"], "prompt token 1 = 300 is out of range"),
                      (["--prompt", ",".join(["1"] * 65)], "compiled for max_tokens 64")):
        r = subprocess.run([f"{BIN}/k3-run", str(art.path), "--random-weights", "1", *args],
                           capture_output=True, text=True)
        assert r.returncode == 1 and msg in r.stderr and "k3-run: error:" in r.stderr
