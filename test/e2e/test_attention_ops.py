"""The attention loop nests on the CPU target against the float64 oracle:
k3.mla_prefill_attention (the expanded MLA prefill, docs/mla.md) with the
output gate and packed sequences of awkward lengths, and k3.causal_attention,
each with an f32 and a bf16 result (their weighted sums stay f32 either way:
lowering/kernels/Attention.cpp, emitSoftmaxRow). Bounds: 1e-5 normwise with
an f32 result; 2^-8 with bf16 (its own rounding).

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_attention_ops.py
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model, ops  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

H, DN, DR, DV, R = 2, 16, 8, 12, 20
MLA = """func.func @forward(
    %q: tensor<?x{H}x{DQ}xf32> {{k3.name = "q", k3.dims = array<i64: -1, {H}, {DQ}>}},
    %kv: tensor<?x{H}x{DKV}xf32> {{k3.name = "kv", k3.dims = array<i64: -1, {H}, {DKV}>}},
    %lat: tensor<?x{W}xf32> {{k3.name = "latent", k3.dims = array<i64: -1, {W}>}},
    %g: tensor<?x{G}xf32> {{k3.name = "gate", k3.dims = array<i64: -1, {G}>}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<?x{H}x{DV}x{OUT}> {{k3.name = "y"}}) {{
  %o = k3.mla_prefill_attention %q, %kv, %lat gate(%g) cu_seqlens(%cu)
      {{qk_nope_head_dim = {DN} : i64, qk_rope_head_dim = {DR} : i64, v_head_dim = {DV} : i64, scale = 0.2 : f64}}
      : (tensor<?x{H}x{DQ}xf32>, tensor<?x{H}x{DKV}xf32>, tensor<?x{W}xf32>, tensor<?x{G}xf32>, tensor<?xi32>)
      -> tensor<?x{H}x{DV}x{OUT}>
  return %o : tensor<?x{H}x{DV}x{OUT}>
}}
"""
CAUSAL = """func.func @forward(
    %q: tensor<?x{H}x{DQ}xf32> {{k3.name = "q", k3.dims = array<i64: -1, {H}, {DQ}>}},
    %k: tensor<?x{H}x{DQ}xf32> {{k3.name = "k", k3.dims = array<i64: -1, {H}, {DQ}>}},
    %v: tensor<?x{H}x{DV}xf32> {{k3.name = "v", k3.dims = array<i64: -1, {H}, {DV}>}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<?x{H}x{DV}x{OUT}> {{k3.name = "y"}}) {{
  %o = k3.causal_attention %q, %k, %v cu_seqlens(%cu) {{scale = 0.2 : f64}}
      : (tensor<?x{H}x{DQ}xf32>, tensor<?x{H}x{DQ}xf32>, tensor<?x{H}x{DV}xf32>, tensor<?xi32>)
      -> tensor<?x{H}x{DV}x{OUT}>
  return %o : tensor<?x{H}x{DV}x{OUT}>
}}
"""
LENGTHS = ([1, 63, 64, 65, 7], [40])


def compile_run(d, name, text, inputs, seqs):
    src, art = d / f"{name}.mlir", d / f"{name}.k3bin"
    src.write_text(text)
    subprocess.run([f"{BIN}/k3-opt", str(src),
                    f"--k3-compile=output={art} max-tokens=256 max-seqs=8", "-o", os.devnull],
                   check=True, capture_output=True)
    infile, outfile = d / f"in_{name}.safetensors", d / f"out_{name}.safetensors"
    model.save_safetensors(infile, inputs, dtype="f32")
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--inputs", str(infile), "--symbol",
                        f"num_seqs={seqs}", "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return model.load_safetensors(outfile)["y"]


def rel_err(got, want):
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


@pytest.mark.parametrize("out", ["f32", "bf16"])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_mla_prefill_attention(tmp_path, out, lengths):
    rng = np.random.default_rng(len(lengths))
    T = sum(lengths)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    x = {"q": rng.standard_normal((T, H, DN + DR)), "kv": rng.standard_normal((T, H, DN + DV)),
         "latent": rng.standard_normal((T, R + DR)), "gate": rng.standard_normal((T, H * DV))}
    x = {k: v.astype(np.float32) for k, v in x.items()}
    text = MLA.format(H=H, DQ=DN + DR, DKV=DN + DV, W=R + DR, G=H * DV, DV=DV, DN=DN, DR=DR, OUT=out)
    got = compile_run(tmp_path, f"mla_{out}", text, {**x, "cu_seqlens": cu}, len(lengths))
    want = ops.mla_prefill_attention(*(x[k].astype(np.float64) for k in ("q", "kv", "latent")),
                                     DN, DR, DV, 0.2, gate=x["gate"].astype(np.float64),
                                     cu_seqlens=cu)
    assert rel_err(got, want) < (1e-5 if out == "f32" else 2.0 ** -8)


@pytest.mark.parametrize("out", ["f32", "bf16"])
@pytest.mark.parametrize("lengths", LENGTHS)
def test_causal_attention(tmp_path, out, lengths):
    rng = np.random.default_rng(10 + len(lengths))
    T = sum(lengths)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    x = {"q": rng.standard_normal((T, H, DN)), "k": rng.standard_normal((T, H, DN)),
         "v": rng.standard_normal((T, H, DV))}
    x = {k: v.astype(np.float32) for k, v in x.items()}
    got = compile_run(tmp_path, f"causal_{out}", CAUSAL.format(H=H, DQ=DN, DV=DV, OUT=out),
                      {**x, "cu_seqlens": cu}, len(lengths))
    want = ops.causal_attention(*(x[k].astype(np.float64) for k in ("q", "k", "v")), 0.2,
                                cu_seqlens=cu)
    assert rel_err(got, want) < (1e-5 if out == "f32" else 2.0 ** -8)
