"""The Python layer (python/k3) end to end on the CPU: compile the tiny
example, run it through ctypes bindings over libk3runtime.so, and check
prefill/decode consistency, batching, state reset and error reporting
against the float64 oracle (python/k3ref).

Run by ctest (which sets K3_BIN_DIR to the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_python_api.py
"""
import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import k3  # noqa: E402
from k3ref import model  # noqa: E402
from k3ref.examples import tiny_k3_example_config  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

MAX_TOKENS, MAX_SEQS = 256, 4
# Weights the checkpoint keeps in f32 (K3-SPEC.md §2, §5); the rest are bf16.
F32_WEIGHTS = ("conv1d", "A_log", "dt_bias", "o_norm", "e_score_correction_bias")


def rel_err(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("py_api")
    # Every token's logits (these tests compare prefill rows with decode
    # steps); test_last_token_logits checks the default, logits=last.
    art = k3.compile(ROOT / "examples/tiny_k3.mlir", d / "tiny.k3bin",
                     max_tokens=MAX_TOKENS, max_seqs=MAX_SEQS, options="logits=all")
    cfg = tiny_k3_example_config()
    weights = {}
    for name, w in model.random_weights(cfg, 5).items():
        storage = np.float32 if any(s in name for s in F32_WEIGHTS) else ml_dtypes.bfloat16
        weights[name] = w.astype(storage).astype(np.float64)
    wfile = d / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    return art, cfg, weights, wfile


def session(tiny):
    art, _, _, wfile = tiny
    s = k3.Session(art)
    s.load_weights([wfile])
    return s


def prefill(s, seqs, ctx=None):
    """One call with the sequences packed; returns logits per sequence."""
    lens = [len(q) for q in seqs]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    out = s.run(token_ids=np.concatenate(seqs).astype(np.int32), cu_seqlens=cu,
                context_lens=np.asarray(ctx if ctx is not None else [0] * len(seqs), np.int32))
    return [out["logits"][cu[i]:cu[i + 1]] for i in range(len(seqs))]


def prompt_then_decode(s, ids, T):
    """Prefill ids[:T] through `forward`, then one token at a time through
    `forward_decode`; the logits of the prompt's last token and of every step."""
    rows = [prefill(s, [ids[:T]])[0][-1]]
    for k in range(len(ids) - T):
        out = s.run("forward_decode", token_ids=ids[T + k:T + k + 1],
                    cu_seqlens=np.array([0, 1], np.int32),
                    context_lens=np.array([T + k], np.int32))
        rows.append(out["logits"][0])
    return np.stack(rows)


def test_artifact_introspection(tiny):
    art = tiny[0]
    assert art.vocab_size == 256
    assert art.max_tokens == MAX_TOKENS and art.max_seqs == MAX_SEQS
    fwd = art.entry("forward")
    assert [t.name for t in fwd.inputs] == ["token_ids", "cu_seqlens", "context_lens"]
    assert [t.name for t in fwd.outputs] == ["logits", "next_tokens"]
    assert str(fwd.inputs[1].shape[0]) == "num_seqs+1"
    assert fwd.outputs[0].shape_for({"num_tokens": 7, "num_seqs": 1}) == (7, 256)
    w = {x.name: x for x in art.weights}
    assert w["model.embed_tokens.weight"].shape == (256, 64)
    assert w["model.embed_tokens.weight"].dtype == "bf16"
    assert w["lm_head.weight"].init == "normal" and len(w) == len(art.weights)
    assert art.state_buffers(), "the tiny model has decode state"


@pytest.mark.parametrize("T,N", [(9, 6), (1, 4), (33, 3)])
def test_teacher_forced_decode_matches_prefill(tiny, T, N):
    """Prefill T, then N one-token calls (context_lens = tokens consumed,
    state carried by the session) == prefill of T + N, and == the oracle."""
    _, cfg, weights, _ = tiny
    ids = np.random.default_rng(T * 10 + N).integers(0, cfg.vocab_size, T + N).astype(np.int32)
    s = session(tiny)
    first = prefill(s, [ids[:T]])[0]
    decoded = [first[-1]]
    for k in range(N):
        out = s.run("forward_decode", token_ids=ids[T + k:T + k + 1], cu_seqlens=np.array([0, 1], np.int32),
                    context_lens=np.array([T + k], np.int32))
        assert out["logits"].shape == (1, cfg.vocab_size)
        decoded.append(out["logits"][0])
    decoded = np.stack(decoded[:-1] + [decoded[-1]])  # rows T-1 .. T+N-1
    s.reset_state()
    full = prefill(s, [ids])[0]
    ref = model.forward(cfg, weights, ids)
    rows = slice(T - 1, T + N)
    assert rel_err(decoded, full[rows]) <= 1e-4
    assert rel_err(decoded, ref[rows]) <= 1e-4
    assert rel_err(full, ref) <= 1e-4


def test_decode_entry_matches_oracle(tiny):
    """The artifact's second entry (k3-decode-entry: token-by-token KDA for
    one-token calls) continues the prefill entry's state: a prompt through
    `forward`, then steps through `forward_decode`, equal the oracle."""
    art, cfg, weights, _ = tiny
    assert set(art.entries) == {"forward", "forward_decode"}
    fwd, dec = art.entry("forward"), art.entry("forward_decode")
    assert [t.name for t in dec.inputs] == [t.name for t in fwd.inputs]
    assert [t.name for t in dec.outputs] == [t.name for t in fwd.outputs]
    T, N = 21, 5
    ids = np.random.default_rng(99).integers(0, cfg.vocab_size, T + N).astype(np.int32)
    got = prompt_then_decode(session(tiny), ids, T)
    ref = model.forward(cfg, weights, ids)
    assert rel_err(got, ref[T - 1:T + N]) <= 1e-4


def test_last_token_logits(tiny, tmp_path):
    """The default logits=last: the prefill entry returns one row per
    sequence (its last token), the decode entry one per token (= sequence);
    the rows equal the logits=all artifact's last rows and the oracle's, and
    batched generation samples the right row of each sequence."""
    _, cfg, weights, wfile = tiny
    art = k3.compile(ROOT / "examples/tiny_k3.mlir", tmp_path / "last.k3bin",
                     max_tokens=MAX_TOKENS, max_seqs=MAX_SEQS)
    fwd, dec = art.entry("forward"), art.entry("forward_decode")
    assert str(fwd.outputs[0].shape[0]) == "num_seqs"
    assert fwd.outputs[0].shape_for({"num_tokens": 7, "num_seqs": 2}) == (2, 256)
    assert fwd.outputs[1].shape_for({"num_tokens": 7, "num_seqs": 2}) == (2,)
    assert dec.outputs[0].shape_for({"num_tokens": 2, "num_seqs": 2}) == (2, 256)
    s = k3.Session(art)
    s.load_weights([wfile])
    seqs = [[5, 17, 1, 9, 200, 3], [7], [40, 41, 42]]
    lens = [len(q) for q in seqs]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    ids = np.concatenate(seqs).astype(np.int32)
    out = s.run(token_ids=ids, cu_seqlens=cu, context_lens=np.zeros(3, np.int32))
    assert out["logits"].shape == (3, 256) and out["next_tokens"].shape == (3,)
    s_all = session(tiny)
    full = prefill(s_all, [np.asarray(q, np.int32) for q in seqs])
    assert rel_err(out["logits"], np.stack([f[-1] for f in full])) <= 1e-6
    ref = model.forward(cfg, weights, ids, cu_seqlens=cu, logits="last")
    assert rel_err(out["logits"], ref) <= 1e-4
    s.reset_state()
    s_all.reset_state()
    assert s.generate(seqs, 5) == s_all.generate(seqs, 5)
    assert s.generate(seqs[0], 5) == model.greedy_generate(cfg, weights, seqs[0], 5)


def test_launch_graphs_replay_decode(tiny, monkeypatch):
    """A decode loop repeats one entry with the same symbol values: the
    second step is captured into a launch graph and every later step
    replays it (on the CPU the recorded launches, on CUDA a CUDA graph).
    Replays give the logits of launching one by one (K3_LAUNCH_GRAPHS=0),
    and a run with other symbol values (a prefill) does not replay."""
    _, cfg, _, _ = tiny
    T, N = 9, 6
    ids = np.random.default_rng(5).integers(0, cfg.vocab_size, T + N).astype(np.int32)

    with_graphs = session(tiny)
    got = prompt_then_decode(with_graphs, ids, T)
    assert with_graphs.graph_stats == (1, N - 2)
    monkeypatch.setenv("K3_LAUNCH_GRAPHS", "0")
    without = session(tiny)
    ref = prompt_then_decode(without, ids, T)
    assert without.graph_stats == (0, 0)
    np.testing.assert_array_equal(got, ref)
    # A new prompt (other symbol values) launches one by one; its decode
    # steps replay the graph kept from the first loop, from the first step.
    for s in (with_graphs, without):
        s.reset_state()
    got = prompt_then_decode(with_graphs, ids[1:], T - 1)
    assert with_graphs.graph_stats == (1, (N - 2) + N)
    np.testing.assert_array_equal(got, prompt_then_decode(without, ids[1:], T - 1))


def test_batched_decode(tiny):
    """Sequences of different lengths prefilled in one packed call, then
    decoded together (one token per sequence per call)."""
    _, cfg, weights, _ = tiny
    rng = np.random.default_rng(7)
    lens, N = [5, 12, 1], 4
    seqs = [rng.integers(0, cfg.vocab_size, n + N).astype(np.int32) for n in lens]
    s = session(tiny)
    got = [[x] for x in prefill(s, [q[:n] for q, n in zip(seqs, lens)])]
    for k in range(N):
        out = s.run("forward_decode", token_ids=np.array([q[n + k] for q, n in zip(seqs, lens)], np.int32),
                    cu_seqlens=np.arange(len(lens) + 1, dtype=np.int32),
                    context_lens=np.array([n + k for n in lens], np.int32))
        for i in range(len(lens)):
            got[i].append(out["logits"][i:i + 1])
    for q, n, g in zip(seqs, lens, got):
        g = np.concatenate(g)
        ref = model.forward(cfg, weights, q)
        assert rel_err(g, ref) <= 1e-4
    # The same decode in a batch equals each sequence decoded alone.
    alone = session(tiny)
    prefill(alone, [seqs[1][:lens[1]]])
    out = alone.run("forward_decode", token_ids=seqs[1][lens[1]:lens[1] + 1], cu_seqlens=np.array([0, 1], np.int32),
                    context_lens=np.array([lens[1]], np.int32))
    assert rel_err(out["logits"], got[1][1]) <= 1e-5


def test_reset_state_equals_fresh_session(tiny):
    _, cfg, _, _ = tiny
    rng = np.random.default_rng(11)
    a, b = (rng.integers(0, cfg.vocab_size, 8).astype(np.int32) for _ in range(2))
    fresh = session(tiny)
    ref_prefill = prefill(fresh, [b])[0]
    ref_step = fresh.run("forward_decode", token_ids=a[:1], cu_seqlens=np.array([0, 1], np.int32),
                         context_lens=np.array([8], np.int32))["logits"]

    s = session(tiny)
    names = [buf.name for buf in s.artifact.state_buffers()]
    assert all(not s.state(n).any() for n in names)
    prefill(s, [a, a[::-1].copy()])
    assert any(s.state(n).any() for n in names)
    s.reset_state()
    assert all(not s.state(n).any() for n in names)
    np.testing.assert_array_equal(prefill(s, [b])[0], ref_prefill)
    step = s.run("forward_decode", token_ids=a[:1], cu_seqlens=np.array([0, 1], np.int32),
                 context_lens=np.array([8], np.int32))["logits"]
    np.testing.assert_array_equal(step, ref_step)

    # One slot: resetting slot 0 leaves slot 1 alone.
    prefill(s, [a, b])
    before = {n: s.state(n) for n in names}
    s.reset_state(0)
    for n in names:
        st = s.state(n)
        if st.ndim == 2:
            assert not st[0].any()
            np.testing.assert_array_equal(st[1:], before[n][1:])
    np.testing.assert_array_equal(prefill(s, [b])[0], ref_prefill)
    with pytest.raises(k3.K3Error, match="slot"):
        s.reset_state(MAX_SEQS)


def test_generate_matches_oracle(tiny):
    _, cfg, weights, _ = tiny
    prompt = [11, 42, 7, 200, 3, 99, 150, 21, 5]
    s = session(tiny)
    assert s.generate(prompt, 6) == model.greedy_generate(cfg, weights, prompt, 6)
    # Generation resets the state itself.
    assert s.generate(prompt, 3) == model.greedy_generate(cfg, weights, prompt, 3)


def test_random_weights_are_deterministic(tiny):
    art = tiny[0]
    outs = []
    for _ in range(2):
        s = k3.Session(art)
        s.random_weights(3)
        outs.append(s.run(token_ids=[1, 2, 3], cu_seqlens=[0, 3], context_lens=[0])["logits"])
    np.testing.assert_array_equal(outs[0], outs[1])
    assert np.isfinite(outs[0]).all() and outs[0].dtype == np.float32


def test_errors_carry_runtime_message(tiny):
    s = session(tiny)
    ok = dict(token_ids=np.array([1, 2, 3], np.int32), cu_seqlens=np.array([0, 3], np.int32),
              context_lens=np.array([0], np.int32))
    s.run(**ok)

    with pytest.raises(k3.K3Error, match=r"input 'token_ids'.*f32.*i32|input 'token_ids'.*i32.*f32") as e:
        s.run(**{**ok, "token_ids": np.array([1, 2, 3], np.float32)})
    assert e.value.status == "INVALID_ARGUMENT"
    assert "\n" not in str(e.value)

    with pytest.raises(k3.K3Error, match=r"input 'cu_seqlens': shape \[3\], expected \[2\]"):
        s.run(token_ids=ok["token_ids"], cu_seqlens=np.array([0, 1, 3], np.int32),
              context_lens=ok["context_lens"], symbols={"num_seqs": 1})

    with pytest.raises(k3.K3Error, match=r"input 'token_ids'.*rank|input 'token_ids': shape"):
        s.run(**{**ok, "token_ids": np.array([[1, 2, 3]], np.int32)}, symbols={"num_tokens": 3})

    with pytest.raises(k3.K3Error, match="token 1 = 256 is out of range for vocab_size 256"):
        s.run(**{**ok, "token_ids": np.array([1, 256, 3], np.int32)})
    with pytest.raises(k3.K3Error, match="out of range"):
        s.run(**{**ok, "token_ids": np.array([-1, 2, 3], np.int32)})

    too_many = np.zeros(MAX_TOKENS + 1, np.int32)
    with pytest.raises(k3.K3Error, match=r"num_tokens.*257.*256|num_tokens.*256.*257") as e:
        s.run(token_ids=too_many, cu_seqlens=np.array([0, MAX_TOKENS + 1], np.int32),
              context_lens=ok["context_lens"])
    assert e.value.status == "INVALID_ARGUMENT"

    with pytest.raises(k3.K3Error, match="context_lens"):
        s.run(token_ids=ok["token_ids"], cu_seqlens=ok["cu_seqlens"])
    with pytest.raises(k3.K3Error, match="has no input 'positions'"):
        s.run(**ok, positions=np.arange(3, dtype=np.int32))
    with pytest.raises(k3.K3Error, match="unknown entry 'decode'"):
        s.run("decode", **ok)
    with pytest.raises(k3.K3Error, match="no buffer named"):
        s.state("nope")

    # The session still works after errors.
    s.run(**ok)


def test_weights_and_artifact_errors(tiny, tmp_path):
    art, _, _, _ = tiny
    s = k3.Session(art)
    with pytest.raises(k3.K3Error) as e:
        s.run(token_ids=[1], cu_seqlens=[0, 1], context_lens=[0])
    assert e.value.status == "WEIGHTS"
    with pytest.raises(k3.K3Error) as e:
        s.load_weights([tmp_path / "missing.safetensors"])
    assert e.value.status == "IO" and "missing.safetensors" in str(e.value)
    partial = tmp_path / "partial.safetensors"
    model.save_safetensors(partial, {"model.norm.weight": np.ones(64, np.float32)})
    with pytest.raises(k3.K3Error, match="model.embed_tokens.weight") as e:
        s.load_weights(partial)
    assert e.value.status == "WEIGHTS"
    bad = tmp_path / "bad.k3bin"
    bad.write_bytes(b"not an artifact")
    with pytest.raises(k3.K3Error) as e:
        k3.Artifact(bad)
    assert e.value.status == "FORMAT"
    with pytest.raises(k3.K3Error) as e:
        k3.Session(art, device="tpu")
    assert "tpu" in str(e.value)


def test_compile_errors(tmp_path):
    src = tmp_path / "bad.mlir"
    src.write_text("func.func @forward(%x: tensor<?xf32>) -> tensor<?xf32> {\n"
                   "  return %x : tensor<?xf32>\n}\n")
    with pytest.raises(k3.K3Error, match="needs k3.name") as e:
        k3.compile(src, tmp_path / "bad.k3bin", max_tokens=8, max_seqs=1)
    assert e.value.status == "COMPILE"


def test_partitioned_session_matches_one_rank(tiny, tmp_path):
    """k3.compile(options="tp=2"): one Session drives both ranks (the C API
    fans every call out to a thread per rank); prefill, decode through
    generate, and a state reset agree with the one-rank session."""
    art, cfg, weights, wfile = tiny
    art2 = k3.compile(ROOT / "examples/tiny_k3.mlir", tmp_path / "tiny_tp2.k3bin",
                      max_tokens=MAX_TOKENS, max_seqs=MAX_SEQS, options="logits=all tp=2")
    one, two = session(tiny), k3.Session(art2)
    two.load_weights([wfile])
    seqs = [[5, 9, 200, 31], [7, 7, 1]]
    for a, b in zip(prefill(one, seqs), prefill(two, seqs)):
        assert rel_err(b, a) <= 1e-5
    prompt = [11, 42, 7, 200, 3, 99, 150, 21, 5]
    assert two.generate(prompt, 4) == one.generate(prompt, 4)
    # Slot 0 holds the generation's state on both: reset everywhere, the
    # ranks start the same sequences again from an empty state.
    one.reset_state()
    two.reset_state()
    assert rel_err(prefill(two, seqs)[0], prefill(one, seqs)[0]) <= 1e-5
