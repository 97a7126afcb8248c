"""The precision policy (docs/precision.md) end to end on the CPU: bf16
activations between kernels (k3-compile activation-dtype=bf16, or
k3-import --activation-dtype bf16) against the float64 oracle.

* tight: against the oracle that rounds activations to bf16 at the same
  places (Config.activation_dtype = "bf16"); what is left is f32 against
  f64 arithmetic, which can move a value across a bf16 rounding boundary
  (one bf16 ulp on that element). Measured 5e-8 on Kimi Linear (prefill,
  chunkwise KDA) and on the tiny K3's decode entry: the places match.
* The tiny K3 prefill is ill-conditioned under bf16 rounding with these
  random weights: the rounded oracle itself moves by ~2e-2 when the
  weights move by 1e-7 (rounding-boundary flips amplified over 8 layers of
  AttnRes, SiTU and top-2 of 8 routing; 1.5e-3 to 2e-2 over the seeds
  tried). There the "tight" check is 3e-2, the order of that sensitivity.
* loose: against the exact f64 oracle, the error of bf16 storage itself
  (Kimi Linear 1.9e-2; the tiny K3, 0.38: see above);
* issue 14's bound: our error against the exact reference is no larger
  than the bf16 reference's own (the rounded oracle's), up to the tight
  term.

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_precision.py
"""
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model  # noqa: E402
from k3ref.storage import rel_err, rounded_random_weights as rounded_weights  # noqa: E402
from k3ref.examples import tiny_k3_example_config  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

TIGHT = 1e-4   # against the oracle rounded at the same places (measured 5e-8)
LOOSE = 3e-2   # Kimi Linear against the exact f64 oracle (measured 1.9e-2)
TINY_K3_TIGHT = 3e-2  # the tiny K3 prefill: chaotic under bf16 rounding (above)
LENS = [5, 17, 1, 9]
# The bf16 KDA state (kda-state-dtype=bf16): against the oracle that rounds
# the state where the runtime stores it, f32 against f64 arithmetic (a value
# can land on the other side of a bf16 rounding boundary); against the
# exact-state oracle, the rounding itself (measured: see the test's print).
STATE_TIGHT = 1e-3
STATE_LOOSE = 5e-2


def compile_art(src, art, options):
    r = subprocess.run([f"{BIN}/k3-opt", str(src),
                        f"--k3-compile=output={art} max-tokens=160 max-seqs=4 report=1 {options}",
                        "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return int(re.search(r"arena (\d+) bytes", r.stderr + r.stdout).group(1))


def run(tmp, art, wfile, inputs, tag):
    infile, outfile = tmp / f"in_{tag}.safetensors", tmp / f"out_{tag}.safetensors"
    model.save_safetensors(infile, inputs)
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--inputs", str(infile),
                        "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return model.load_safetensors(outfile)


def packed(cfg, lens, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, sum(lens)).astype(np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return {"token_ids": ids, "cu_seqlens": cu, "context_lens": np.zeros(len(lens), np.int32)}


def check_bounds(out, cfg, weights, inp, logits, tight_bound=TIGHT, loose_bound=LOOSE):
    """Tight, loose and issue 14's bound; returns the three errors."""
    bf = dataclasses.replace(cfg, activation_dtype="bf16")
    ref_bf16 = model.forward(bf, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"], logits=logits)
    ref = model.forward(cfg, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"], logits=logits)
    got = out["logits"]
    assert got.shape == ref.shape
    tight, loose, ref_err = rel_err(got, ref_bf16), rel_err(got, ref), rel_err(ref_bf16, ref)
    print(f"bf16 activations: vs rounded oracle {tight:.2e}, vs f64 oracle {loose:.2e}, "
          f"rounded oracle vs f64 {ref_err:.2e}")
    assert tight <= tight_bound, f"vs the oracle rounded at the same places: {tight:.3e}"
    assert loose <= loose_bound, f"vs the f64 oracle: {loose:.3e}"
    assert loose <= ref_err + tight, f"{loose:.3e} > bf16 reference's {ref_err:.3e} + {tight:.3e}"
    return tight, loose, ref_err


def sensitivity(cfg, weights, inp, logits):
    """How far the rounded oracle moves when the weights move by 1e-7
    (relative, f32-sized): the floor of any comparison with it."""
    bf = dataclasses.replace(cfg, activation_dtype="bf16")
    dumps = {}
    ref = model.forward(bf, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"], logits=logits,
                        dumps=dumps)
    forced = {i: dumps[f"layers.{i}.router_indices"] for i in range(cfg.num_hidden_layers)
              if cfg.is_moe(i)}
    rng = np.random.default_rng(1)
    noisy = {k: v * (1 + 1e-7 * rng.standard_normal(np.shape(v))) for k, v in weights.items()}
    moved = model.forward(bf, noisy, inp["token_ids"], cu_seqlens=inp["cu_seqlens"], logits=logits,
                          forced_routing=forced)
    return rel_err(moved, ref)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("precision")
    cfg = tiny_k3_example_config()
    weights = rounded_weights(cfg, seed=3)
    wfile = d / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    return d, cfg, weights, wfile


@pytest.mark.parametrize("logits", ["all", "last"])
def test_tiny_k3_bf16_activations(tiny, logits):
    d, cfg, weights, wfile = tiny
    src = ROOT / "examples/tiny_k3.mlir"
    art = d / f"bf16_{logits}.k3bin"
    arena_bf16 = compile_art(src, art, f"activation-dtype=bf16 logits={logits}")
    arena_f32 = compile_art(src, d / f"f32_{logits}.k3bin", f"logits={logits}")
    # Activations take half; the chunkwise KDA intermediates stay f32.
    assert arena_bf16 < 0.9 * arena_f32, (arena_bf16, arena_f32)
    inp = packed(cfg, LENS, seed=12)
    sens = sensitivity(cfg, weights, inp, logits)
    print(f"tiny K3: the rounded oracle's sensitivity to 1e-7 weight noise {sens:.2e}")
    check_bounds(run(d, art, wfile, inp, f"tiny_{logits}"), cfg, weights, inp, logits,
                 tight_bound=TINY_K3_TIGHT, loose_bound=0.5)


def test_the_policy_in_the_ir(tiny):
    """The pass records the policy on the module and retypes the activations;
    decode state, router weights and the logits stay f32, except the MLA
    latent cache, which stores bf16 latents and becomes bf16."""
    ir = subprocess.run([f"{BIN}/k3-opt", str(ROOT / "examples/tiny_k3.mlir"), "--k3-inline-layers",
                         "--k3-activation-precision=activation-dtype=bf16"],
                        capture_output=True, text=True, check=True).stdout
    assert "k3.activation_dtype = #k3<activation_dtype bf16>" in ir
    assert re.search(r"k3.rms_norm .* -> tensor<\?x64xbf16>", ir)
    assert re.search(r"k3.kda .* -> \(tensor<1x\?x2x16xbf16>, tensor<\?x2x16x16xf32>\)", ir)
    assert re.search(r"k3.moe_router .* -> \(tensor<\?x2xi32>, tensor<\?x2xf32>\)", ir)
    assert re.search(r"k3.linear .* -> tensor<\?x256xf32>", ir)  # the logits
    assert "tensor<?x128x24xbf16>" in ir  # the latent cache
    assert "tensor<?x128x24xf32>" not in ir
    bad = subprocess.run([f"{BIN}/k3-opt", str(ROOT / "examples/tiny_k3.mlir"), "--k3-inline-layers",
                          "--k3-activation-precision=activation-dtype=f16"],
                         capture_output=True, text=True)
    assert bad.returncode != 0
    assert "activation-dtype must be f32 or bf16, got 'f16'" in bad.stderr


def test_decode_entry_with_bf16_activations(tiny):
    """Prefill, then one-token steps through the decode entry (token-by-token
    KDA, its own kernels) under the policy: every step's logits within the
    tight bound of the rounded oracle's row (teacher forced: greedy tokens
    can flip on bf16-sized near ties)."""
    d, cfg, weights, wfile = tiny
    art = d / "bf16_gen.k3bin"
    # The latent form in the prefill too: the oracle below runs the whole
    # sequence at once, so it can round at the decode steps' places only if
    # the prompt's attention rounds at the same ones (the expanded prefill
    # is checked by test_tiny_k3_bf16_activations).
    compile_art(ROOT / "examples/tiny_k3.mlir", art, "activation-dtype=bf16 mla-expand=0")
    ids = np.random.default_rng(5).integers(0, cfg.vocab_size, 15).astype(np.int32)
    T = 9
    rows = _decode_rows(cfg, weights, wfile, art, ids, T)
    bf = dataclasses.replace(cfg, activation_dtype="bf16")
    from k3ref import ops
    with ops.mla_latent_form():
        ref = model.forward(bf, weights, ids)[T - 1:]  # rows T-1 .. 14
    err = rel_err(rows, ref)
    print(f"decode entry, bf16 activations: vs rounded oracle {err:.2e}")
    assert err <= TIGHT


def _decode_rows(cfg, weights, wfile, art, ids, T):
    """Our logits: a prefill of T tokens, then one-token decode steps."""
    import k3
    s = k3.Session(k3.Artifact(art))
    s.load_weights([wfile])
    rows = [s.run(token_ids=ids[:T], cu_seqlens=np.array([0, T], np.int32),
                  context_lens=np.array([0], np.int32))["logits"][0]]
    for k in range(T, len(ids)):
        rows.append(s.run("forward_decode", token_ids=ids[k:k + 1], cu_seqlens=np.array([0, 1], np.int32),
                          context_lens=np.array([k], np.int32))["logits"][0])
    return np.stack(rows)


def _oracle_rows(cfg, weights, ids, T):
    """The oracle call by call, its state carried as the runtime carries it
    (the KDA state rounded to bf16 at each call's end when
    cfg.kda_state_dtype is "bf16")."""
    from k3ref import ops
    with ops.mla_latent_form():
        logits, st = model.forward(cfg, weights, ids[:T], return_state=True)
        rows = [logits[-1]]
        for k in range(T, len(ids)):
            logits, st = model.forward(cfg, weights, ids[k:k + 1], state=st, return_state=True)
            rows.append(logits[-1])
    return np.stack(rows)


@pytest.mark.parametrize("ranks", ["", "tp=2", "ep=2"])
def test_decode_with_bf16_kda_state(tiny, ranks):
    """kda-state-dtype=bf16 (k3-kda-state-precision): the KDA state kept in
    bf16 between calls. Every call's logits within the tight bound of the
    oracle that rounds the state at each call's end; the rounding's own
    effect (against the exact-state oracle) is reported, bounded loosely
    here and measured in bench/results (docs/precision.md). Also split
    over two ranks by heads (each rank's share of the state) and by
    experts."""
    d, cfg, weights, wfile = tiny
    art = d / f"bf16_state{ranks.replace('=', '')}.k3bin"
    compile_art(ROOT / "examples/tiny_k3.mlir", art, f"kda-state-dtype=bf16 mla-expand=0 {ranks}")
    ids = np.random.default_rng(6).integers(0, cfg.vocab_size, 24).astype(np.int32)
    T = 9
    got = _decode_rows(cfg, weights, wfile, art, ids, T)
    bf = dataclasses.replace(cfg, kda_state_dtype="bf16")
    tight = rel_err(got, _oracle_rows(bf, weights, ids, T))
    loose = rel_err(got, _oracle_rows(cfg, weights, ids, T))
    print(f"bf16 KDA state: vs the oracle rounding it {tight:.2e}, vs the exact state {loose:.2e}")
    assert tight <= STATE_TIGHT, tight
    assert loose <= STATE_LOOSE, loose


def test_bf16_kda_state_refused_where_another_op_reads_it(tmp_path):
    """Context parallelism folds the KDA state outside k3.kda: the option
    is an error there, naming the state, not a silent f32 state."""
    r = subprocess.run([f"{BIN}/k3-opt", str(ROOT / "examples/tiny_k3.mlir"),
                        f"--k3-compile=output={tmp_path / 'cp.k3bin'} max-tokens=64 max-seqs=2 "
                        "kda-state-dtype=bf16 cp=2", "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode != 0
    assert "reads the KDA state 'model.layers.1.self_attn.recurrent_state'" in r.stderr
    assert "only k3.kda takes a bf16 state" in r.stderr


def test_bf16_kda_state_in_the_ir(tiny):
    """The state reads and writes, and k3.kda's states, become bf16; the
    other states (convolutions, the latent cache) keep their types, and the
    state buffers shrink."""
    ir = subprocess.run([f"{BIN}/k3-opt", str(ROOT / "examples/tiny_k3.mlir"), "--k3-inline-layers",
                         "--k3-kda-state-precision=kda-state-dtype=bf16"],
                        capture_output=True, text=True, check=True).stdout
    assert re.search(r'k3.state.read "[^"]*recurrent_state" : tensor<\?x2x16x16xbf16>', ir)
    assert not re.search(r'recurrent_state" : tensor<\?x2x16x16xf32>', ir)
    assert re.search(r'conv_state" : tensor<\?x32x3xf32>', ir)
    # The artifact's KDA state buffers are half as large; the others keep
    # their sizes.
    import k3
    d = tiny[0]
    sizes = {}
    for tag, opts in (("f32", ""), ("bf16", "kda-state-dtype=bf16")):
        art = d / f"state_{tag}.k3bin"
        compile_art(ROOT / "examples/tiny_k3.mlir", art, f"mla-expand=0 {opts}")
        sizes[tag] = {b.name: b.size for b in k3.Artifact(art).state_buffers()}
    assert sizes["f32"].keys() == sizes["bf16"].keys()
    kda = [n for n in sizes["f32"] if n.endswith("recurrent_state")]
    assert kda
    for n, size in sizes["f32"].items():
        assert sizes["bf16"][n] == (size // 2 if n in kda else size), n


def test_import_activation_dtype(tmp_path):
    """k3-import --activation-dtype bf16 records the policy; k3-compile
    applies it (Kimi Linear: plain residuals, fused add + RMSNorm in bf16,
    full-width experts, MLA)."""
    from test_import_oracle import oracle_config
    cpath = ROOT / "examples/configs/tiny-kimi-linear.json"
    mlir = tmp_path / "kl.mlir"
    subprocess.run([f"{BIN}/k3-import", str(cpath), "--activation-dtype", "bf16", "-o", str(mlir)],
                   check=True)
    assert "k3.activation_dtype = #k3<activation_dtype bf16>" in mlir.read_text()
    art = tmp_path / "kl.k3bin"
    compile_art(mlir, art, "logits=all")
    cfg = oracle_config(json.loads(cpath.read_text()))
    weights = rounded_weights(cfg, 5)
    wfile = tmp_path / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    inp = packed(cfg, LENS, seed=13)
    # The loose bound as for tiny K3: with h rounded between the experts'
    # GEMMs a router of this random model flips, and the rounded oracle
    # itself lands 0.19 from f64; ours must match it (tight) and be no
    # further from f64 than it is.
    check_bounds(run(tmp_path, art, wfile, inp, "kl"), cfg, weights, inp, "all", loose_bound=0.5)
    # The compile option overrides the model's policy.
    art32 = tmp_path / "kl32.k3bin"
    compile_art(mlir, art32, "logits=all activation-dtype=f32")
    out = run(tmp_path, art32, wfile, inp, "kl32")
    ref = model.forward(cfg, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"])
    assert rel_err(out["logits"], ref) <= 1e-4
