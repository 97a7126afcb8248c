"""Tensor parallelism on the CPU target (issue 19; docs/scaling.md):
k3-compile tp=N makes one SPMD program (k3-partition: every KDA and MLA
layer's heads and each MLP block's intermediate width split over the
ranks, one all-reduce after each output projection and block), the
artifact carries the collectives and weight shards (format 1.3), and k3-run
runs its N ranks as threads of one process with the host communicator, each
slicing its shard of the same checkpoint at load. Logits must match one rank
(<= 1e-5 normwise, f32) and the float64 oracle; greedy generation with
carried decode state must give the same tokens.

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_partition.py
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from k3ref import model  # noqa: E402
from k3ref.storage import rel_err, rounded_random_weights  # noqa: E402
from test_import_oracle import oracle_config, packed, run  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")
CONFIGS = ROOT / "examples" / "configs"
# Kimi Linear's shape with 4 KDA and 4 MLA heads, for TP = 4 (the tiny
# configs have 2 heads).
FOUR_HEADS = dict(json.loads((CONFIGS / "tiny-kimi-linear.json").read_text()),
                  num_attention_heads=4, num_key_value_heads=4)
FOUR_HEADS["linear_attn_config"] = dict(FOUR_HEADS["linear_attn_config"], num_heads=4, head_dim=8)


def example(name):
    return json.loads((CONFIGS / f"{name}.json").read_text())


# (name, weight seed, config, {artifact key: k3-compile options})
MODELS = [("tiny-k3", 3, example("tiny-k3"), {1: "tp=1", 2: "tp=2"}),
          ("tiny-kimi-linear", 5, example("tiny-kimi-linear"), {1: "tp=1", 2: "tp=2"}),
          ("kimi-linear-4-heads", 7, FOUR_HEADS, {1: "tp=1", 2: "tp=2", 4: "tp=4"})]


def compile_with(mlir, art, options):
    return subprocess.run([f"{BIN}/k3-opt", str(mlir),
                           f"--k3-compile=output={art} max-tokens=160 max-seqs=4 {options}",
                           "-o", os.devnull], capture_output=True, text=True)


def compile_tp(mlir, art, tp, extra=""):
    return compile_with(mlir, art, f"tp={tp}{extra}")


def partitioned_models(tmp, name, seed, config, splits):
    """`config` (a dict) imported, compiled once per k3-compile options of
    `splits` ({key: options}), with seeded weights (f32 file) for it:
    (tmp, mlir, {key: artifact}, oracle config, weights, weight file)."""
    cpath = tmp / f"{name}.json"
    cpath.write_text(json.dumps(config))
    mlir = tmp / f"{name}.mlir"
    subprocess.run([f"{BIN}/k3-import", str(cpath), "-o", str(mlir)], check=True)
    arts = {}
    for key, options in splits.items():
        arts[key] = tmp / f"{name}-{key}.k3bin"
        r = compile_with(mlir, arts[key], options)
        assert r.returncode == 0, r.stderr
    cfg = oracle_config(config)
    weights = rounded_random_weights(cfg, seed)
    wfile = tmp / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    return tmp, mlir, arts, cfg, weights, wfile


@pytest.fixture(scope="module", params=MODELS, ids=[m[0] for m in MODELS])
def partitioned(request, tmp_path_factory):
    return partitioned_models(tmp_path_factory.mktemp(request.param[0]), *request.param)


def describe(art):
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--describe"], capture_output=True,
                       text=True, check=True)
    return r.stdout


def test_artifact_holds_the_partition(partitioned):
    """tp=2: the heads' projections sliced by rows and the output
    projections by columns, every MLP block's weights sliced (gate/up rows,
    down columns); one all-reduce per attention layer and per block, in the
    prefill and the decode entry."""
    tmp, mlir, arts, cfg, weights, wfile = partitioned
    one, two = describe(arts[1]), describe(arts[2])
    assert "all_reduce" not in one and "shard " not in one
    shards = {l.split("'")[1]: l for l in two.splitlines() if l.startswith("shard ")}
    assert all("split 2 ways over group tp" in l for l in shards.values())
    rows = lambda n: ": dim 0 split" in shards[n]  # noqa: E731
    layer = "model.layers.0.self_attn."
    assert rows(layer + "q_proj.weight") and rows(layer + "q_conv1d.weight")
    assert rows(layer + "dt_bias") and ": dim 1 split" in shards[layer + "o_proj.weight"]
    assert layer + "o_norm.weight" not in shards  # per channel of a head: whole
    if cfg.gate_lower_bound is not None:  # K3 pads A_log: the slices cover its first H
        assert "(of " in shards[layer + "A_log"]
    mla = next(i for i in range(cfg.num_hidden_layers) if not cfg.is_kda(i))
    mla = f"model.layers.{mla}.self_attn."
    assert rows(mla + "kv_b_proj.weight") and ": dim 1 split" in shards[mla + "o_proj.weight"]
    assert mla + "kv_a_proj_with_mqa.weight" not in shards  # the latent is every head's
    reduces = [l for l in two.splitlines() if "all_reduce sum over tp (2 ranks)" in l]
    moe = sum(cfg.is_moe(i) for i in range(cfg.num_hidden_layers))
    blocks = (cfg.num_hidden_layers - moe) + moe * (1 + (cfg.num_shared_experts > 0))
    assert len(reduces) == 2 * (cfg.num_hidden_layers + blocks)


@pytest.mark.parametrize("lens", [[7], [5, 17, 1, 9]], ids=["7", "5_17_1_9"])
def test_tp_matches_one_rank_and_oracle(partitioned, lens):
    tmp, mlir, arts, cfg, weights, wfile = partitioned
    for tp in sorted(arts)[1:]:
        check_tp(tmp, arts, cfg, weights, wfile, tp, lens)


def check_tp(tmp, arts, cfg, weights, wfile, tp, lens):
    check_against_one_rank(tmp, arts, cfg, weights, wfile, tp, lens,
                           seed=len(lens) * 100 + sum(lens) + tp)


def check_against_one_rank(tmp, arts, cfg, weights, wfile, key, lens, seed):
    """Packed prompts of `lens`: artifact `key`'s last-token logits within
    1e-5 normwise of one rank's (arts[1]) and 1e-4 of the float64 oracle."""
    inp = packed(cfg, lens, seed=seed)
    tag = "_".join(map(str, lens))
    one = run(tmp, arts[1], [wfile], inp, f"one_{tag}_{key}")
    got = run(tmp, arts[key], [wfile], inp, f"{key}_{tag}")
    assert got["logits"].shape == one["logits"].shape
    err = rel_err(got["logits"], one["logits"])
    assert err <= 1e-5, f"{key} vs one rank: normwise {err:.3e}"
    ref = model.forward(cfg, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"],
                        logits="last")
    assert rel_err(got["logits"], ref) <= 1e-4


def test_tp_decode_continues_prefill(partitioned):
    """Greedy generation with the decode state (each rank's heads' KDA and
    conv states, the whole MLA latent cache) carried on every rank."""
    tmp, mlir, arts, cfg, weights, wfile = partitioned
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, cfg.vocab_size, 9)]
    want = model.greedy_generate(cfg, weights, prompt, 5)
    for tp in sorted(arts)[1:]:
        r = subprocess.run([f"{BIN}/k3-run", str(arts[tp]), "--weights", str(wfile), "--prompt",
                            ",".join(map(str, prompt)), "--max-new-tokens", "5", "--quiet"],
                           capture_output=True, text=True, check=True)
        assert [int(t) for t in r.stdout.strip().split(",")] == want, f"tp={tp}"
    # Without --quiet the device line names the ranks.
    r = subprocess.run([f"{BIN}/k3-run", str(arts[2]), "--weights", str(wfile), "--prompt", "1,2",
                        "--max-new-tokens", "1"], capture_output=True, text=True, check=True)
    assert "device: cpu (2 ranks, tp=2 ep=1 cp=1, a thread each)" in r.stdout, r.stdout


def test_random_weights_are_the_slices_of_one_ranks(partitioned):
    """--random-weights: each rank's shard holds the slice of the values one
    rank would have (the same seed), so the logits agree."""
    tmp, mlir, arts, cfg, weights, wfile = partitioned
    inp = packed(cfg, [6, 3], seed=2)
    infile = tmp / "rand_in.safetensors"
    model.save_safetensors(infile, inp)
    outs = []
    for tp in (1, 2):
        o = tmp / f"rand_tp{tp}.safetensors"
        subprocess.run([f"{BIN}/k3-run", str(arts[tp]), "--random-weights", "7", "--inputs",
                        str(infile), "--dump", str(o)], capture_output=True, text=True, check=True)
        outs.append(model.load_safetensors(o)["logits"])
    assert rel_err(outs[1], outs[0]) <= 1e-5


def test_indivisible_width_is_refused(partitioned):
    tmp, mlir, arts, cfg, weights, wfile = partitioned
    r = compile_tp(mlir, tmp / "tp3.k3bin", 3)
    assert r.returncode != 0
    assert "is not divisible by tp = 3" in r.stderr, r.stderr


def test_partitioned_artifact_refuses_a_gpu(partitioned):
    tmp, mlir, arts, cfg, weights, wfile = partitioned
    r = subprocess.run([f"{BIN}/k3-run", str(arts[2]), "--device", "cuda", "--random-weights", "1",
                        "--prompt", "1,2"], capture_output=True, text=True)
    assert r.returncode != 0
    assert r.stderr.count("\n") <= 2, r.stderr


def test_spmd_program_of_one_rank_is_the_plain_one(partitioned):
    """spmd=1 at tp=1: shards of one part and collectives of one rank (the
    communicator's path on one device, as bench/gpu_partition_check.py runs
    it with NCCL on one GPU) give the plain artifact's bits."""
    tmp, mlir, arts, cfg, weights, wfile = partitioned
    art = tmp / "spmd1.k3bin"
    r = compile_tp(mlir, art, 1, " spmd=1")
    assert r.returncode == 0, r.stderr
    assert "all_reduce sum over tp (1 ranks)" in describe(art)
    inp = packed(cfg, [5, 17, 1, 9], seed=4)
    plain = run(tmp, arts[1], [wfile], inp, "spmd_plain")
    spmd = run(tmp, art, [wfile], inp, "spmd_one")
    assert np.array_equal(spmd["logits"], plain["logits"])



def test_vocab_split_lm_head(partitioned):
    """vocab-split=1: each rank keeps half of the LM head's vocabulary rows
    and one all-gather along the vocabulary completes the logits (on each
    sequence's last token: k3-last-token-logits moves the selection before
    the gather); the logits match one rank's, and greedy decoding after the
    prefill continues as one rank's does."""
    tmp, mlir, arts, cfg, weights, wfile = partitioned
    art = tmp / "tp2-vocab.k3bin"
    r = compile_tp(mlir, art, 2, " vocab-split=1")
    assert r.returncode == 0, r.stderr
    text = describe(art)
    if cfg.tie_word_embeddings or cfg.vocab_size % 2:  # the LM head stays whole
        assert "all_gather" not in text and "lm_head.weight': dim 0" not in text
        return
    assert "lm_head.weight': dim 0 split 2 ways over group tp" in text, text
    assert "all_gather over tp (2 ranks)" in text
    inp = packed(cfg, [5, 17, 1, 9], seed=11)
    one = run(tmp, arts[1], [wfile], inp, "vocab_one")
    got = run(tmp, art, [wfile], inp, "vocab_two")
    assert got["logits"].shape == one["logits"].shape
    assert rel_err(got["logits"], one["logits"]) <= 1e-5
    gen = lambda a: subprocess.run(  # noqa: E731
        [f"{BIN}/k3-run", str(a), "--weights", str(wfile), "--prompt", "3,1,4,1,5",
         "--max-new-tokens", "6", "--quiet"], capture_output=True, text=True, check=True).stdout
    assert gen(art) == gen(arts[1])


MPIRUN = shutil.which("mpirun")
# Open MPI as CI runs it: as root in a container, two processes on any
# number of cores, no cross-memory attach between them.
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")


def mpirun(np_, args):
    return subprocess.run([MPIRUN, "-np", str(np_), "--oversubscribe", f"{BIN}/k3-run", *args, "--mpi"],
                          capture_output=True, text=True, env=MPI_ENV, timeout=300)


@pytest.mark.skipif(not MPIRUN, reason="mpirun (Debian's openmpi-bin) not installed")
def test_mpirun_two_ranks(partitioned):
    """The tp=2 artifact under `mpirun -np 2 k3-run --mpi`: a process per
    rank, collectives through Open MPI (an all-gather, then the host
    communicator's rank-order arithmetic): the same generated ids for two
    prompts with carried decode state, and the same output bits (dumped by
    rank 0), as the two threads of one process."""
    tmp, _, arts, _, _, wfile = partitioned
    args = [str(arts[2]), "--weights", str(wfile), "--prompt", "3,1,4,1,5", "--prompt", "9,2",
            "--max-new-tokens", "6", "--quiet"]
    threads = subprocess.run([f"{BIN}/k3-run", *args, "--dump", str(tmp / "threads.safetensors")],
                             capture_output=True, text=True, check=True)
    mpi = mpirun(2, args + ["--dump", str(tmp / "mpi.safetensors")])
    assert mpi.returncode == 0, mpi.stderr
    assert mpi.stdout == threads.stdout and len(threads.stdout.splitlines()) == 2
    a = model.load_safetensors(tmp / "threads.safetensors", to_float64=False, strip_prefix="")
    b = model.load_safetensors(tmp / "mpi.safetensors", to_float64=False, strip_prefix="")
    assert a.keys() == b.keys() and a
    for k in a:
        assert np.array_equal(a[k], b[k]), k


@pytest.mark.skipif(not MPIRUN, reason="mpirun (Debian's openmpi-bin) not installed")
def test_mpirun_wrong_world(partitioned):
    """A job of another size than the artifact's ranks, or a GPU device
    that the machine lacks, is refused by every process with the reason;
    the job fails."""
    tmp, _, arts, _, _, wfile = partitioned
    args = [str(arts[2]), "--weights", str(wfile), "--prompt", "1,2", "--quiet"]
    r = mpirun(3, args)
    assert r.returncode != 0
    assert "partitioned over 2 ranks, the MPI job has 3 processes (mpirun -np 2)" in r.stderr
    # On GPUs each process takes cuda:N plus its rank on the node, with
    # NCCL across the processes: here there is none to take.
    r = mpirun(2, args + ["--device", "cuda"])
    assert r.returncode != 0
    assert "MPI rank 0 needs cuda:0" in r.stderr or "MPI rank 1 needs cuda:1" in r.stderr, r.stderr


MPI_PY = """
import sys
import k3
s = k3.Session(sys.argv[1], mpi=True)
s.load_weights(sys.argv[2])
out = s.generate([[3, 1, 4, 1, 5], [9, 2]], 6)
if s.rank == 0:
    print(s.device)
    print(out)
"""


@pytest.mark.skipif(not MPIRUN, reason="mpirun (Debian's openmpi-bin) not installed")
def test_mpirun_python(partitioned):
    """The same from Python: k3.Session(..., mpi=True) in each process of
    `mpirun -np 2 python`, rank 0 printing; the tokens are one process's."""
    tmp, _, arts, _, _, wfile = partitioned
    script = tmp / "mpi_generate.py"
    script.write_text(MPI_PY)
    env = dict(MPI_ENV, PYTHONPATH=str(ROOT / "python"), K3_BIN_DIR=BIN)
    r = subprocess.run([MPIRUN, "-np", "2", "--oversubscribe", sys.executable, str(script),
                        str(arts[2]), str(wfile)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    device, tokens = r.stdout.splitlines()
    assert "(rank 0 of 2, tp=2 ep=1 cp=1, MPI, a process each)" in device
    want = subprocess.run([f"{BIN}/k3-run", str(arts[2]), "--weights", str(wfile), "--prompt",
                           "3,1,4,1,5", "--prompt", "9,2", "--max-new-tokens", "6", "--quiet"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert tokens == str([[int(t) for t in w.split(",")] for w in want])


A2A_MLIR = """func.func @forward(%x: tensor<?x8xf32> {k3.name = "x", k3.dims = array<i64: -1, 8>})
    -> (tensor<?x8xf32> {k3.name = "y"}) {
  %s = k3.reduce_scatter sum %x {group = "tp", group_size = 2 : i64, dim = 1 : i64}
      : (tensor<?x8xf32>) -> tensor<?x4xf32>
  %a = k3.all_to_all %s {group = "tp", group_size = 2 : i64, split_dim = 1 : i64, concat_dim = 1 : i64}
      : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %y = k3.all_gather %a {group = "tp", group_size = 2 : i64, dim = 1 : i64}
      : (tensor<?x4xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
"""


@pytest.mark.parametrize("launcher", ["threads", "mpirun"])
def test_all_to_all(tmp_path, launcher):
    """An SPMD program of three collectives over two ranks: a
    reduce-scatter gives rank r columns 4r..4r+3 of 2x (different data per
    rank), the all-to-all swaps their halves (rank r gets shard r of each
    rank's), an all-gather joins them: y = 2 x[:, [0, 1, 4, 5, 2, 3, 6,
    7]], as threads of one process and as two MPI processes."""
    if launcher == "mpirun" and not MPIRUN:
        pytest.skip("mpirun (Debian's openmpi-bin) not installed")
    src, art = tmp_path / "a2a.mlir", tmp_path / "a2a.k3bin"
    src.write_text(A2A_MLIR)
    subprocess.run([f"{BIN}/k3-opt", str(src), f"--k3-compile=output={art} max-tokens=16 "
                    "max-seqs=1 tp=2", "-o", os.devnull], check=True)
    x = np.arange(5 * 8, dtype=np.float32).reshape(5, 8) - 7.5
    model.save_safetensors(tmp_path / "in.safetensors", {"x": x})
    args = [str(art), "--inputs", str(tmp_path / "in.safetensors"), "--dump",
            str(tmp_path / "out.safetensors"), "--quiet"]
    if launcher == "threads":
        subprocess.run([f"{BIN}/k3-run", *args], check=True)
    else:
        r = mpirun(2, args)
        assert r.returncode == 0, r.stderr
    y = model.load_safetensors(tmp_path / "out.safetensors", to_float64=False, strip_prefix="")["y"]
    assert np.array_equal(y, 2 * x[:, [0, 1, 4, 5, 2, 3, 6, 7]])
