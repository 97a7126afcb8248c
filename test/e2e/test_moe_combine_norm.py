"""k3-fuse-combine-rms-norm on the CPU target: an MoE layer (routed experts
and a shared expert) whose output joins the residual stream before the next
RMSNorm. The pipeline's fusions make the combine, the residual add and the
norm one k3.moe_combine_add_rms_norm: in the prefill form the shared expert
is the combine's addend, in the decode form (k3.decode) its rows are in the
grouped ops. Checked against the float64 oracle, and against the same model
compiled with the fusion off (the same loop-nest order: the same bits).

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_moe_combine_norm.py
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from k3ref import model, ops  # noqa: E402
from test_moe_grouped import D, E, I, K, SHARED_MODEL  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

EPS = 1e-5
# test_moe_grouped's MoE layer with its shared expert, then the next layer's
# pre-norm residual add: the sum h and its RMSNorm n.
MODEL = f"""func.func @forward(
    %x: tensor<?x{D}xf32> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}},
    %idx: tensor<?x{K}xi32> {{k3.name = "idx", k3.dims = array<i64: -1, {K}>}},
    %wts: tensor<?x{K}xf32> {{k3.name = "wts", k3.dims = array<i64: -1, {K}>}},
    %res: tensor<?x{D}xf32> {{k3.name = "res", k3.dims = array<i64: -1, {D}>}})
    -> (tensor<?x{D}xf32> {{k3.name = "h"}}, tensor<?x{D}xf32> {{k3.name = "n"}}) {{ATTRS}} {{
""" + SHARED_MODEL.split("{\n", 1)[1].split("  %y = k3.add", 1)[0] + f"""\
  %m = k3.add %r, %s : tensor<?x{D}xf32>
  %h = k3.add %res, %m : tensor<?x{D}xf32>
  %nw = k3.weight "nw" : tensor<{D}xf32>
  %n = k3.rms_norm %h, %nw {{epsilon = 1.0e-5 : f64}} : (tensor<?x{D}xf32>, tensor<{D}xf32>) -> tensor<?x{D}xf32>
  return %h, %n : tensor<?x{D}xf32>, tensor<?x{D}xf32>
}}
"""
FORMS = {"prefill": "", "decode": "attributes {k3.decode}"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe_combine_norm")
    arts, irs = {}, {}
    for form, attrs in FORMS.items():
        src = d / f"{form}.mlir"
        src.write_text(MODEL.replace("{ATTRS}", attrs))
        for name, opt in (("fused", ""), ("separate", "fuse-combine-rms-norm=0")):
            arts[form, name] = d / f"{form}-{name}.k3bin"
            subprocess.run([f"{BIN}/k3-opt", str(src),
                            f"--k3-compile=output={arts[form, name]} max-tokens=64 max-seqs=64 "
                            f"decode-entry=0 {opt}", "-o", os.devnull], check=True, capture_output=True)
        irs[form] = subprocess.run(
            [f"{BIN}/k3-opt", str(src), "--k3-fuse-add-rms-norm", "--k3-moe-grouped",
             "--k3-split-glu-mlp", "--k3-fuse-shared-expert", "--k3-fuse-combine-add",
             "--k3-fuse-combine-rms-norm"], check=True, capture_output=True, text=True).stdout
    rng = np.random.default_rng(61)
    w = {"w1": rng.standard_normal((E, I, D)) / 5, "w3": rng.standard_normal((E, I, D)) / 5,
         "w2": rng.standard_normal((E, D, I)) / 5, "sg": rng.standard_normal((I, D)) / 5,
         "su": rng.standard_normal((I, D)) / 5, "sd": rng.standard_normal((D, I)) / 5,
         "nw": rng.uniform(0.5, 1.5, D)}
    wfile = d / "w.safetensors"
    model.save_safetensors(wfile, w, dtype="f32")
    return d, arts, irs, {k: v.astype(np.float32).astype(np.float64) for k, v in w.items()}, wfile


def run(d, art, wfile, inputs, tag):
    infile, outfile = d / f"in_{tag}.safetensors", d / f"out_{tag}.safetensors"
    model.save_safetensors(infile, inputs)
    t = inputs["x"].shape[0]
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--inputs", str(infile),
                        "--symbol", f"num_seqs={t}", "--dump", str(outfile)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = model.load_safetensors(outfile)
    return out["h"], out["n"]


@pytest.mark.parametrize("form", FORMS)
def test_one_fused_op_per_layer(setup, form):
    ir = setup[2][form]
    assert "k3.moe_combine_add_rms_norm" in ir and "k3.add_rms_norm" not in ir, ir
    assert ("addend(" in ir) == (form == "prefill"), ir


def launches(art) -> list[str]:
    plan = subprocess.run([f"{BIN}/k3-run", str(art), "--plan"], check=True, capture_output=True,
                          text=True).stdout
    return [line.split()[1] for line in plan.splitlines()
            if len(line.split()) > 1 and line.split()[0].isdigit()]


@pytest.mark.parametrize("form", FORMS)
def test_the_compiled_fusion_saves_a_launch(setup, form):
    fused, separate = (launches(setup[1][form, n]) for n in ("fused", "separate"))
    assert any(k.startswith("moe_combine_add_rms_norm") for k in fused), fused
    assert not any(k.startswith("moe_combine_add_rms_norm") for k in separate), separate
    assert len(fused) == len(separate) - 1, (fused, separate)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("t", [1, 5, 37])
def test_fused_matches_oracle_and_separate(setup, form, t):
    d, arts, _, w, wfile = setup
    rng = np.random.default_rng(200 + t)
    idx = np.stack([rng.permutation(E)[:K] for _ in range(t)]).astype(np.int32)
    wts = rng.random((t, K)).astype(np.float32)
    x = rng.standard_normal((t, D)).astype(np.float32)
    res = rng.standard_normal((t, D)).astype(np.float32)
    inputs = {"x": x, "idx": idx, "wts": wts, "res": res}
    tag = f"{form}_{t}"
    h, n = run(d, arts[form, "fused"], wfile, inputs, tag + "_f")
    hs, ns = run(d, arts[form, "separate"], wfile, inputs, tag + "_s")
    assert np.array_equal(h, hs) and np.array_equal(n, ns), "fused and separate differ"
    x64 = x.astype(np.float64)
    want_h = res.astype(np.float64) + ops.moe_experts(
        x64, idx, wts.astype(np.float64), w["w1"], w["w3"], w["w2"]) + \
        ops.glu_mlp(x64, w["sg"], w["su"], w["sd"])
    want_n = ops.rms_norm(want_h, w["nw"], EPS)
    eh = float(np.linalg.norm(h - want_h) / np.linalg.norm(want_h))
    en = float(np.linalg.norm(n - want_n) / np.linalg.norm(want_n))
    assert eh < 1e-5 and en < 1e-5, f"vs f64 oracle: h {eh:.2e}, n {en:.2e}"
