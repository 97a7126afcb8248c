"""MXFP4 routed experts end to end on the CPU target: a tiny K3 config with a
compressed-tensors `quantization_config` imports with f4E2M1FN expert stacks,
compiles, loads a checkpoint holding the experts as `weight_packed` /
`weight_scale` U8 pairs, and matches the f64 oracle on the dequantised
weights; the same model imported with `--dequantized-experts` and run on
those dequantised values in bf16 gives the same bits. Lying checkpoints
(a NaN scale, a wrong dtype, a wrong shape, a missing scale) are refused
with the tensor's name.

    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_mxfp4.py
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model, mxfp4  # noqa: E402
from k3ref.storage import rel_err, rounded_random_weights  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")


def tiny_config(quantized: bool) -> dict:
    """examples/configs/tiny-k3.json with expert widths in whole 32-element
    scale blocks (the routed experts' in-dims: 32 latent, 32 intermediate)."""
    d = json.loads((ROOT / "examples/configs/tiny-k3.json").read_text())
    d["text_config"]["moe_intermediate_size"] = 32
    if quantized:
        d["quantization_config"] = mxfp4.quantization_config()
    return d


def compile_model(tmp: Path, quantized: bool, *import_flags) -> Path:
    cfg = tmp / "config.json"
    cfg.write_text(json.dumps(tiny_config(quantized)))
    mlir, art = tmp / "model.mlir", tmp / "model.k3bin"
    subprocess.run([f"{BIN}/k3-import", str(cfg), "-o", str(mlir), *import_flags], check=True)
    subprocess.run([f"{BIN}/k3-opt", str(mlir),
                    f"--k3-compile=output={art} max-tokens=64 max-seqs=2 logits=all",
                    "-o", os.devnull], check=True)
    return art


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """The MXFP4 artifact, its checkpoint and the oracle's weights."""
    tmp = tmp_path_factory.mktemp("mxfp4")
    art = compile_model(tmp, True)
    cfg = model.Config.from_hf(tiny_config(True)["text_config"])
    weights = rounded_random_weights(cfg, seed=13)
    ckpt, dequantized = mxfp4.quantize_experts(weights)
    stored = {k: (v if v.dtype == np.uint8 else v.astype(np.float32)) for k, v in ckpt.items()}
    wfile = tmp / "weights.safetensors"
    model.save_safetensors(wfile, stored)
    return tmp, art, cfg, stored, dequantized, wfile


def inputs(cfg, lens, seed):
    rng = np.random.default_rng(seed)
    return {"token_ids": rng.integers(0, cfg.vocab_size, sum(lens)).astype(np.int32),
            "cu_seqlens": np.concatenate([[0], np.cumsum(lens)]).astype(np.int32),
            "context_lens": np.zeros(len(lens), np.int32)}


def run(tmp, art, wfile, inp, tag, *extra):
    infile, outfile = tmp / f"in_{tag}.safetensors", tmp / f"out_{tag}.safetensors"
    model.save_safetensors(infile, inp)
    return subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--inputs",
                           str(infile), "--dump", str(outfile), *extra],
                          capture_output=True, text=True), outfile


def test_import_types_experts_as_mxfp4(quantized):
    tmp = quantized[0]
    text = (tmp / "model.mlir").read_text()
    assert 'experts.{expert}.w1.weight" : tensor<8x32x32xf4E2M1FN>' in text
    assert 'experts.{expert}.w2.weight" : tensor<8x32x32xf4E2M1FN>' in text
    mxfp4_lines = [l for l in text.splitlines() if "f4E2M1FN" in l and "k3.weight" in l]
    # Three stacks per MoE layer, nothing else quantised.
    assert mxfp4_lines and all("experts.{expert}.w" in l for l in mxfp4_lines)


def test_matches_oracle_on_dequantised_weights(quantized):
    tmp, art, cfg, _, dequantized, wfile = quantized
    inp = inputs(cfg, [9, 4], seed=5)
    r, out = run(tmp, art, wfile, inp, "oracle")
    assert r.returncode == 0, r.stderr
    got = model.load_safetensors(out)["logits"]
    ref = model.forward(cfg, dequantized, inp["token_ids"], cu_seqlens=inp["cu_seqlens"])
    assert rel_err(got, ref) <= 1e-4


def test_same_bits_as_bf16_experts_on_dequantised_values(quantized, tmp_path):
    """Dequantised MXFP4 values are exact in bf16, so the bf16 model on them
    must give the MXFP4 model's logits bit for bit."""
    tmp, art, cfg, stored, dequantized, wfile = quantized
    art_bf16 = compile_model(tmp_path, True, "--dequantized-experts")
    plain = {k: v for k, v in stored.items() if not k.endswith(("_packed", "_scale"))}
    for k, v in dequantized.items():
        if mxfp4.is_routed_expert_weight(k):
            plain[k] = v.astype(np.float32)
    bf16_file = tmp_path / "dequantised.safetensors"
    model.save_safetensors(bf16_file, plain)
    inp = inputs(cfg, [7, 1], seed=6)
    r4, out4 = run(tmp, art, wfile, inp, "bits4")
    r16, out16 = run(tmp_path, art_bf16, bf16_file, inp, "bits16")
    assert r4.returncode == 0 and r16.returncode == 0, r4.stderr + r16.stderr
    a = model.load_safetensors(out4)["logits"]
    b = model.load_safetensors(out16)["logits"]
    assert np.array_equal(a, b)


def expert_w1(stored):
    """The first routed expert's w1 (its checkpoint name without _packed)."""
    return sorted(k for k in stored if k.endswith("w1.weight_packed"))[0][:-len("_packed")]


def lying(stored, name, value):
    name = name.replace("W1", expert_w1(stored))
    out = dict(stored)
    if value is None:
        del out[name]
    else:
        out[name] = value
    return out


CASES = {
    "nan-scale": (lambda s, w: lying(s, "W1_scale", np.full_like(s[w + "_scale"], 0xFF)),
                  "is 0xFF (NaN in E8M0)"),
    "packed-as-f32": (lambda s, w: lying(s, "W1_packed", s[w + "_packed"].astype(np.float32)),
                      "but MXFP4 codes are U8"),
    "scale-shape": (lambda s, w: lying(s, "W1_scale", s[w + "_scale"][:, :0]),
                    "but the artifact expects [32, 1]"),
    "missing-scale": (lambda s, w: lying(s, "W1_scale", None),
                      "(u8 MXFP4 scales [32, 1]) not found"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lying_checkpoint_is_refused(quantized, tmp_path, case):
    tmp, art, cfg, stored, _, _ = quantized
    make, message = CASES[case]
    bad = tmp_path / "bad.safetensors"
    w1 = expert_w1(stored)
    model.save_safetensors(bad, make(stored, w1))
    r, _ = run(tmp_path, art, bad, inputs(cfg, [3], seed=1), case)
    assert r.returncode != 0
    assert message in r.stderr and w1 in r.stderr, r.stderr


def test_random_weights_run(quantized, tmp_path):
    tmp, art, cfg, _, _, _ = quantized
    infile, outfile = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    model.save_safetensors(infile, inputs(cfg, [5], seed=2))
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--random-weights", "3", "--inputs",
                        str(infile), "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert np.isfinite(model.load_safetensors(outfile)["logits"]).all()


def test_expert_parallel_mxfp4(quantized, tmp_path):
    """K3's deployment form: MXFP4 routed experts split over ep = 2 ranks
    (each loads its experts' packed codes and scales): the same logits as
    one rank, within 1e-5, from a checkpoint and from random weights."""
    tmp, art, cfg, _, _, wfile = quantized
    mlir, art_ep = tmp / "model.mlir", tmp_path / "model-ep2.k3bin"
    subprocess.run([f"{BIN}/k3-opt", str(mlir),
                    f"--k3-compile=output={art_ep} max-tokens=64 max-seqs=2 logits=all ep=2",
                    "-o", os.devnull], check=True)
    inp = inputs(cfg, [9, 4], seed=5)
    one, out_one = run(tmp_path, art, wfile, inp, "one")
    two, out_two = run(tmp_path, art_ep, wfile, inp, "ep2")
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    a = model.load_safetensors(out_one)["logits"]
    b = model.load_safetensors(out_two)["logits"]
    assert rel_err(b, a) <= 1e-5
    # Seeded random weights: each rank's experts are the slices of one
    # rank's (codes and scales of its experts), so the logits agree too.
    infile = tmp_path / "in_ep2.safetensors"
    got = {}
    for key, path in (("one", art), ("ep2", art_ep)):
        out = tmp_path / f"random_{key}.safetensors"
        subprocess.run([f"{BIN}/k3-run", str(path), "--random-weights", "3", "--inputs",
                        str(infile), "--dump", str(out)], check=True, capture_output=True)
        got[key] = model.load_safetensors(out)["logits"]
    assert rel_err(got["ep2"], got["one"]) <= 1e-5


def test_tensor_parallel_mxfp4(tmp_path):
    """MXFP4 routed experts split by TP (each expert's intermediate width:
    w1 and w3 by their output rows, w2 by its inputs in whole 32-element
    scale blocks), as the full K3 at TP > 1 needs: at TP = 2 the same
    logits as one rank within 1e-5, from a checkpoint of packed codes and
    scales (each rank reads its rows and its columns of both) and from
    random weights (each rank's the slices of one rank's). A width that
    leaves a rank part of a scale block is refused by the compiler."""
    d = tiny_config(True)
    d["text_config"]["moe_intermediate_size"] = 64  # 32 a rank at TP 2
    cfg_file, mlir = tmp_path / "config.json", tmp_path / "model.mlir"
    cfg_file.write_text(json.dumps(d))
    subprocess.run([f"{BIN}/k3-import", str(cfg_file), "-o", str(mlir)], check=True)
    arts = {}
    for key, extra in (("one", ""), ("tp2", " tp=2")):
        arts[key] = tmp_path / f"{key}.k3bin"
        subprocess.run([f"{BIN}/k3-opt", str(mlir), f"--k3-compile=output={arts[key]} max-tokens=64 "
                        f"max-seqs=2 logits=all{extra}", "-o", os.devnull], check=True)
    cfg = model.Config.from_hf(d["text_config"])
    ckpt, _ = mxfp4.quantize_experts(rounded_random_weights(cfg, seed=17))
    wfile = tmp_path / "weights.safetensors"
    model.save_safetensors(wfile, {k: (v if v.dtype == np.uint8 else v.astype(np.float32))
                                   for k, v in ckpt.items()})
    inp = inputs(cfg, [9, 4], seed=5)
    got = {}
    for key, art in arts.items():
        r, out = run(tmp_path, art, wfile, inp, key)
        assert r.returncode == 0, r.stderr
        got[key] = model.load_safetensors(out)["logits"]
    assert rel_err(got["tp2"], got["one"]) <= 1e-5
    infile = tmp_path / "in_one.safetensors"
    for key, art in arts.items():
        out = tmp_path / f"random_{key}.safetensors"
        r = subprocess.run([f"{BIN}/k3-run", str(art), "--random-weights", "3", "--inputs",
                            str(infile), "--dump", str(out)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        got[key] = model.load_safetensors(out)["logits"]
    assert np.isfinite(got["one"]).all() and rel_err(got["tp2"], got["one"]) <= 1e-5
    cfg_file.write_text(json.dumps(tiny_config(True)))  # 32 wide: 16 a rank
    subprocess.run([f"{BIN}/k3-import", str(cfg_file), "-o", str(mlir)], check=True)
    bad = subprocess.run([f"{BIN}/k3-opt", str(mlir), f"--k3-compile=output={tmp_path / 'bad.k3bin'} "
                          "max-tokens=64 max-seqs=2 tp=2", "-o", os.devnull], capture_output=True, text=True)
    assert bad.returncode != 0
    assert "mxfp4 inputs (32) split over tp = 2 leave 16 a rank, not whole blocks of 32" in bad.stderr
