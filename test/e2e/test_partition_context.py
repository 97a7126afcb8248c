"""Context parallelism on the CPU target (issue 19; docs/scaling.md):
k3-compile cp=N rewrites the prefill entry (k3-partition-context) so that
rank r of the cp group runs the r-th segment of every sequence; the runtime
cuts the call's sequences, each KDA layer folds the ranks' segment states
(seed §7.5), each short convolution its history, each MLA layer reads a
cache the ranks' shares fill, and the last rank's outputs are the call's. Logits must match one rank (<= 1e-5 normwise, f32)
and the float64 oracle, for segments shorter than the convolution's window
and empty ones; greedy decoding after a context-parallel prefill must give
one rank's tokens (every rank holds the whole state).

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_partition_context.py
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_partition import (BIN, CONFIGS, MPIRUN, ROOT, check_against_one_rank,  # noqa: E402
                            compile_with, mpirun, partitioned_models)
from test_import_oracle import packed, run  # noqa: E402

sys.path.insert(0, str(ROOT / "python"))
from k3ref import model  # noqa: E402
from k3ref.storage import rel_err  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")


def example(name):
    return json.loads((CONFIGS / f"{name}.json").read_text())


def kda_only():
    """Tiny Kimi Linear with every layer KDA."""
    c = example("tiny-kimi-linear")
    c["linear_attn_config"] = dict(c["linear_attn_config"], kda_layers=[1, 2, 3, 4],
                                   full_attn_layers=[])
    return c


SPLITS = {1: "tp=1", "cp2": "cp=2", "cp3": "cp=3", "cp4": "cp=4", "tp2cp2": "tp=2 cp=2",
          "ep2cp2": "ep=2 cp=2", "tp2ep2cp2": "tp=2 ep=2 cp=2",
          # The routed experts over the cp ranks too, by all-to-all.
          "cp2x": "cp=2 cp-experts=1", "cp3x": "cp=3 cp-experts=1", "cp4x": "cp=4 cp-experts=1"}
# (name, weight seed, config, {artifact key: k3-compile options})
def only(*keys):
    return {k: SPLITS[k] for k in (1,) + keys}


# 6 experts (Kimi Linear's tiny configs) split 2 or 3 ways, 8 (tiny K3) 2 or 4.
MODELS = [("kda-linear", 5, kda_only(), only("cp2", "cp3", "cp4", "tp2cp2", "ep2cp2",
                                              "tp2ep2cp2", "cp2x", "cp3x")),
          ("tiny-kimi-linear", 5, example("tiny-kimi-linear"),
           only("cp2", "cp3", "cp4", "tp2cp2", "ep2cp2", "tp2ep2cp2", "cp2x", "cp3x")),
          ("tiny-k3", 3, example("tiny-k3"),
           only("cp2", "cp4", "tp2cp2", "ep2cp2", "tp2ep2cp2", "cp2x", "cp4x"))]


@pytest.fixture(scope="module", params=MODELS, ids=[m[0] for m in MODELS])
def split(request, tmp_path_factory):
    return partitioned_models(tmp_path_factory.mktemp(request.param[0]), *request.param)


def describe(art):
    return subprocess.run([f"{BIN}/k3-run", str(art), "--describe"], capture_output=True,
                          text=True, check=True).stdout


def test_artifact_gathers_over_cp(split):
    """Per KDA layer: one all-gather of the segments' states and three of
    the convolutions' tails; cu_seqlens once; per MLA layer one all-reduce
    of the cache shares; the decode entry none."""
    tmp, mlir, arts, cfg, weights, wfile = split
    text = describe(arts["cp2"])
    lines = text.splitlines()
    kda = sum(cfg.is_kda(i) for i in range(cfg.num_hidden_layers))
    gathers = [l for l in lines if "all_gather over cp (2 ranks)" in l]
    reduces = [l for l in lines if "all_reduce sum over cp (2 ranks)" in l]
    assert len(gathers) == 1 + 4 * kda, text
    assert len(reduces) == cfg.num_hidden_layers - kda, text
    assert "input k3.rank.cp" in text
    # Only the prefill is cut; the decode entry runs replicated.
    assert text.count("context-parallel: each cp rank runs its segment") == 1


# Lengths with segments shorter than the window (W - 1 = 3) and empty ones
# (a 1-token sequence leaves cp - 1 ranks nothing).
@pytest.mark.parametrize("lens", [[7], [5, 17, 1, 9], [2, 3, 40]], ids=["7", "5_17_1_9", "2_3_40"])
@pytest.mark.parametrize("key", ["cp2", "cp3", "cp4", "tp2cp2", "ep2cp2", "tp2ep2cp2", "cp2x",
                                 "cp3x", "cp4x"])
def test_cp_matches_one_rank_and_oracle(split, lens, key):
    tmp, mlir, arts, cfg, weights, wfile = split
    if key not in arts:
        pytest.skip(f"{key} is not compiled for this model")
    check_against_one_rank(tmp, arts, cfg, weights, wfile, key, lens,
                           seed=len(lens) * 100 + sum(lens))


def test_experts_over_cp_ranks(split):
    """cp-experts=1: each rank holds 1/cp of every MoE layer's routed
    experts (shards over cp); the prefill moves the routed rows by
    all-to-all (rows, expert ids, weights, and back: four a layer), the
    decode entry keeps its rank's pairs and all-reduces."""
    tmp, mlir, arts, cfg, weights, wfile = split
    text = describe(arts["cp2x"])
    moe = sum(cfg.is_moe(i) for i in range(cfg.num_hidden_layers))
    assert text.count("all_to_all over cp (2 ranks)") == 4 * moe, text
    shards = [l for l in text.splitlines() if l.startswith("shard ")]
    assert len(shards) == 3 * moe and all("dim 0 split 2 ways over group cp" in l for l in shards)


def test_per_token_logits(split):
    """logits=all: the per-token output put together from every rank's
    segments in the sequences' order."""
    tmp, mlir, arts, cfg, weights, wfile = split
    art = tmp / "cp2-all.k3bin"
    r = compile_with(mlir, art, "cp=2 logits=all")
    assert r.returncode == 0, r.stderr
    inp = packed(cfg, [5, 1, 8], seed=9)
    got = run(tmp, art, [wfile], inp, "cp2_all")
    ref = model.forward(cfg, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"])
    assert got["logits"].shape == ref.shape
    assert rel_err(got["logits"], ref) <= 1e-4


def test_decode_continues_a_context_parallel_prefill(split):
    """Greedy generation: the prefill on segments, then decode steps run
    replicated on every rank from the folded KDA and convolution states and
    the whole MLA cache."""
    tmp, mlir, arts, cfg, weights, wfile = split
    prompt = [int(x) for x in np.random.default_rng(3).integers(0, cfg.vocab_size, 11)]
    want = model.greedy_generate(cfg, weights, prompt, 5)
    for key in ("cp2", "cp4", "tp2cp2", "cp2x", "cp4x"):
        if key not in arts:
            continue
        r = subprocess.run([f"{BIN}/k3-run", str(arts[key]), "--weights", str(wfile), "--prompt",
                            ",".join(map(str, prompt)), "--max-new-tokens", "5", "--quiet"],
                           capture_output=True, text=True, check=True)
        assert [int(t) for t in r.stdout.strip().split(",")] == want, key
    r = subprocess.run([f"{BIN}/k3-run", str(arts["cp2"]), "--weights", str(wfile), "--prompt",
                        "1,2", "--max-new-tokens", "1"], capture_output=True, text=True, check=True)
    assert "device: cpu (2 ranks, tp=1 ep=1 cp=2, a thread each)" in r.stdout, r.stdout


@pytest.mark.skipif(not MPIRUN, reason="mpirun (Debian's openmpi-bin) not installed")
@pytest.mark.parametrize("key", ["cp2", "tp2cp2", "cp2x"])
def test_mpirun(split, key):
    """Under `mpirun -np N k3-run --mpi` each process cuts its own part of
    the call and the outputs travel through all-gathers over cp: the same
    generated ids (two prompts, carried decode state) and the same dumped
    bits as the threads of one process, per-token logits included."""
    tmp, mlir, arts, cfg, weights, wfile = split
    world = 4 if key == "tp2cp2" else 2
    if key not in arts:
        pytest.skip(f"{key} is not compiled for this model")
    args = [str(arts[key]), "--weights", str(wfile), "--prompt", "3,1,4,1,5,9,2", "--prompt", "9,2",
            "--max-new-tokens", "5", "--quiet"]
    threads = subprocess.run([f"{BIN}/k3-run", *args, "--dump", str(tmp / f"{key}-threads.st")],
                             capture_output=True, text=True, check=True)
    mpi = mpirun(world, args + ["--dump", str(tmp / f"{key}-mpi.st")])
    assert mpi.returncode == 0, mpi.stderr
    assert mpi.stdout == threads.stdout and len(threads.stdout.splitlines()) == 2
    a = model.load_safetensors(tmp / f"{key}-threads.st", to_float64=False, strip_prefix="")
    b = model.load_safetensors(tmp / f"{key}-mpi.st", to_float64=False, strip_prefix="")
    assert a.keys() == b.keys() and a
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    # Per-token outputs put together from the processes' parts.
    art = tmp / "cp2-all-mpi.k3bin"
    assert compile_with(mlir, art, "cp=2 logits=all").returncode == 0
    inp = packed(cfg, [5, 1, 8], seed=9)
    infile = tmp / "cp2-all-in.safetensors"
    model.save_safetensors(infile, inp)
    outs = []
    for how in ("threads", "mpi"):
        o = tmp / f"cp2-all-{how}.safetensors"
        cmd = [str(art), "--weights", str(wfile), "--inputs", str(infile), "--dump", str(o)]
        r = (mpirun(2, cmd) if how == "mpi" else
             subprocess.run([f"{BIN}/k3-run", *cmd], capture_output=True, text=True))
        assert r.returncode == 0, r.stderr
        outs.append(model.load_safetensors(o, to_float64=False, strip_prefix="")["logits"])
    assert np.array_equal(outs[0], outs[1])


def test_bad_call_is_refused(split):
    """A call whose cu_seqlens do not cover its tokens cannot be cut into
    segments: a clear error naming the entry, not a wrong answer."""
    tmp, mlir, arts, cfg, weights, wfile = split
    inp = packed(cfg, [4, 3], seed=1)
    inp["cu_seqlens"] = np.array([0, 4, 6], dtype=np.int32)
    infile = tmp / "bad_cu.safetensors"
    model.save_safetensors(infile, inp)
    r = subprocess.run([f"{BIN}/k3-run", str(arts["cp2"]), "--weights", str(wfile), "--inputs",
                        str(infile)], capture_output=True, text=True)
    assert r.returncode != 0
    assert ("entry 'forward' (context-parallel over 2 ranks): cu_seqlens must run from 0 to "
            "num_tokens = 7") in r.stderr, r.stderr


def test_bf16_activations(split):
    """activation-dtype=bf16: the context-parallel prefill (with experts
    over the cp ranks too) keeps the precision policy (the corrected KDA
    output, the routed rows sent and returned in bf16; the segment run,
    fold and states in f32), and its logits are as close to one rank's
    bf16 logits as bf16 rounding allows."""
    tmp, mlir, arts, cfg, weights, wfile = split
    bf = {}
    for key, opts in ((1, "tp=1"), ("cp2", "cp=2"), ("cp2x", "cp=2 cp-experts=1")):
        bf[key] = tmp / f"bf16-{key}.k3bin"
        r = compile_with(mlir, bf[key], opts + " activation-dtype=bf16")
        assert r.returncode == 0, r.stderr
    inp = packed(cfg, [5, 17, 1, 9], seed=12)
    one = run(tmp, bf[1], [wfile], inp, "bf16_one")
    ref = model.forward(cfg, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"],
                        logits="last")
    base = rel_err(one["logits"], ref)
    for key in ("cp2", "cp2x"):
        got = run(tmp, bf[key], [wfile], inp, f"bf16_{key}")
        assert rel_err(got["logits"], one["logits"]) <= 2e-2, key
        assert rel_err(got["logits"], ref) <= max(2 * base, 1e-2), (key, base)


def test_prefill_continues_across_calls(split):
    """A context-parallel prefill may continue its sequences (context_lens >
    0: MLA keeps its cache form, so the entry takes them): a prompt
    prefilled in two calls gives one rank's logits of the whole prompt in
    one call, the KDA and convolution states and the latent cache carried
    between the calls on every rank."""
    import k3  # noqa: E402  (python/ is on sys.path above)

    tmp, mlir, arts, cfg, weights, wfile = split
    prompt = [int(x) for x in np.random.default_rng(5).integers(0, cfg.vocab_size, 23)]

    def call(s, toks, ctx):
        return s.run("forward", token_ids=np.array(toks, np.int32),
                     cu_seqlens=np.array([0, len(toks)], np.int32),
                     context_lens=np.array([ctx], np.int32))["logits"]

    one = k3.Session(str(arts[1]))
    one.load_weights(str(wfile))
    one.reset_state()
    want = call(one, prompt, 0)
    for key in ("cp2", "cp3", "cp4x"):
        if key not in arts:
            continue
        s = k3.Session(str(arts[key]))
        s.load_weights(str(wfile))
        s.reset_state()
        call(s, prompt[:9], 0)
        got = call(s, prompt[9:], 9)
        assert rel_err(got, want) <= 1e-5, key
