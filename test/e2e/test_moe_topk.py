"""k3-split-router on the CPU target against the float64 oracle: the MoE
router as a k3.linear and a k3.moe_topk (the default), and as the fused
k3.moe_router (split-router=0), on the same inputs: sigmoid and softmax
scores, with and without the correction bias, renormalised and scaled.
Both must choose the oracle's experts (inputs without near-ties) and give
its weights within 1e-5 (f32 logits).

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_moe_topk.py
"""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model, ops  # noqa: E402
from k3ref.storage import rel_err, rounded_random_weights  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")

T, D = 37, 48
# (experts, top-k): a small router, and K3's 896 experts top-16.
SIZES = [(40, 6), (896, 16)]
ROUTER = """func.func @forward(
    %x: tensor<?x{D}xf32> {{k3.name = "x", k3.dims = array<i64: -1, {D}>}})
    -> (tensor<?x{K}xi32> {{k3.name = "idx"}}, tensor<?x{K}xf32> {{k3.name = "wts"}}) {{
  %w = k3.weight "w" : tensor<{E}x{D}xf32>
  {BIASDEF}
  %idx, %wts = k3.moe_router {SCORE} %x, %w {BIAS} {{top_k = {K} : i64, renormalize, routed_scaling_factor = 2.5 : f64{GROUPS}}}
      : ({TYPES}) -> (tensor<?x{K}xi32>, tensor<?x{K}xf32>)
  return %idx, %wts : tensor<?x{K}xi32>, tensor<?x{K}xf32>
}}
"""


def group_attrs(n_group, topk_group):
    if n_group == 1:
        return ""
    return f", n_group = {n_group} : i64, topk_group = {topk_group} : i64"


def router_text(score, with_bias, E, K, n_group=1, topk_group=1):
    types = f"tensor<?x{D}xf32>, tensor<{E}x{D}xf32>" + (f", tensor<{E}xf32>" if with_bias else "")
    return ROUTER.format(D=D, E=E, K=K, SCORE=score, TYPES=types,
                         GROUPS=group_attrs(n_group, topk_group),
                         BIASDEF=f'%b = k3.weight "b" : tensor<{E}xf32>' if with_bias else "",
                         BIAS="bias(%b)" if with_bias else "")


def draw_router(rng, E):
    """One random draw: x [T, D], W [E, D] (logits of unit variance), a
    bias [E], and the logits."""
    x = rng.standard_normal((T, D))
    w = rng.standard_normal((E, D)) / np.sqrt(D)
    b = rng.standard_normal(E) * 0.1
    return x, w, b, x @ w.T


def inputs(seed, E, K):
    """x, W, bias with every token's K-th and (K+1)-th choices apart (no
    near-ties, relative to the row's scale), for both score functions."""
    rng = np.random.default_rng(seed)
    while True:
        x, w, b, logits = draw_router(rng, E)
        ok = True
        for s in (1 / (1 + np.exp(-logits)), np.exp(logits) / np.exp(logits).sum(1, keepdims=True)):
            for bias in (b, 0.0):
                c = np.sort(s + bias, axis=1)[:, ::-1]
                # Apart by 1e-4 of the row's largest choice score (softmax
                # scores of 896 experts are ~1e-3 each).
                ok &= bool(np.min((c[:, K - 1] - c[:, K]) / np.abs(c[:, 0])) > 1e-4)
        if ok:
            return x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)


def run_router(tmp_path, text, split, x, w, b):
    """Compiles the router model `text` for the CPU (split-router=`split`;
    the split form launches a moe_topk kernel, the fused one none), runs it
    on x with weights w (and bias b unless None) and returns its outputs."""
    src, art = tmp_path / "router.mlir", tmp_path / "router.k3bin"
    src.write_text(text)
    r = subprocess.run([f"{BIN}/k3-opt", str(src),
                        f"--k3-compile=output={art} max-tokens=64 max-seqs=1 split-router={split}",
                        "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    plan = subprocess.run([f"{BIN}/k3-run", str(art), "--plan"], capture_output=True, text=True)
    assert ("moe_topk" in plan.stdout) == bool(split), plan.stdout
    weights = {"w": w, **({"b": b} if b is not None else {})}
    wfile, infile, outfile = (tmp_path / n for n in ("w.safetensors", "in.safetensors", "out.safetensors"))
    model.save_safetensors(wfile, weights, dtype="f32")
    model.save_safetensors(infile, {"x": x}, dtype="f32")
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--inputs", str(infile),
                        "--symbol", "num_seqs=1", "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return model.load_safetensors(outfile)


@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("split", [1, 0])
@pytest.mark.parametrize("E,K", SIZES, ids=[f"E{e}k{k}" for e, k in SIZES])
def test_router_forms_match_oracle(tmp_path, score, with_bias, split, E, K):
    x, w, b = inputs(11, E, K)
    out = run_router(tmp_path, router_text(score, with_bias, E, K), split, x, w,
                     b if with_bias else None)
    want_idx, want_wts = ops.moe_router(x.astype(np.float64), w.astype(np.float64),
                                        b.astype(np.float64) if with_bias else None, K, score,
                                        True, 2.5)
    np.testing.assert_array_equal(out["idx"], want_idx)
    np.testing.assert_allclose(out["wts"], want_wts, rtol=1e-5, atol=1e-6)


def test_moe_topk_is_moe_router_of_the_logits():
    """The oracle's split: moe_router(x, W) = moe_topk(x W^T)."""
    E, K = SIZES[0]
    x, w, b = inputs(12, E, K)
    a = ops.moe_router(x, w, b, K, "sigmoid", True, 2.5)
    t = ops.moe_topk(x.astype(np.float64) @ w.astype(np.float64).T, b, K, "sigmoid", True, 2.5)
    np.testing.assert_array_equal(a[0], t[0])
    np.testing.assert_allclose(a[1], t[1])


TOPK = """func.func @forward(
    %l: tensor<?x{E}xf32> {{k3.name = "logits", k3.dims = array<i64: -1, {E}>}})
    -> (tensor<?x{K}xi32> {{k3.name = "idx"}}, tensor<?x{K}xf32> {{k3.name = "wts"}}) {{
  %idx, %wts = k3.moe_topk {SCORE} %l {{renormalize, routed_scaling_factor = 1.0 : f64, top_k = {K} : i64{GROUPS}}}
      : (tensor<?x{E}xf32>) -> (tensor<?x{K}xi32>, tensor<?x{K}xf32>)
  return %idx, %wts : tensor<?x{K}xi32>, tensor<?x{K}xf32>
}}
"""


def tied_logits(E, K, seed):
    """Rows whose scores tie exactly, across the K-th choice too: every
    logit equal; a row of two levels (the upper level has fewer than K
    experts, so the rest of the choice comes from a tie of many); a row
    where each value repeats four times at scattered experts."""
    rng = np.random.default_rng(seed)
    rows = [np.zeros(E), np.full(E, -3.0)]
    two = np.full(E, 0.5)
    two[rng.choice(E, K // 2, replace=False)] = 1.5
    rows.append(two)
    levels = rng.standard_normal(E // 4).repeat(4)
    rows.append(levels[rng.permutation(E)])
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
@pytest.mark.parametrize("E,K", SIZES, ids=[f"E{e}k{k}" for e, k in SIZES])
def test_exact_ties_choose_the_lower_expert(tmp_path, score, E, K):
    """Exact ties break towards the lower expert id, the oracle's rule
    (a stable sort of the choice scores), whatever the count of tied
    experts and wherever they sit: the CPU target picks the oracle's
    experts in the oracle's order."""
    logits = tied_logits(E, K, 5)
    src, art = tmp_path / "topk.mlir", tmp_path / "topk.k3bin"
    src.write_text(TOPK.format(E=E, K=K, SCORE=score, GROUPS=""))
    r = subprocess.run([f"{BIN}/k3-opt", str(src), f"--k3-compile=output={art} max-tokens=8 max-seqs=1",
                        "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    infile, outfile = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    model.save_safetensors(infile, {"logits": logits}, dtype="f32")
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--inputs", str(infile), "--symbol", "num_seqs=1",
                        "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = model.load_safetensors(outfile)
    want_idx, want_wts = ops.moe_topk(logits.astype(np.float64), None, K, score, True, 1.0)
    # The rule itself: all-equal rows choose experts 0 .. K-1 in order.
    np.testing.assert_array_equal(want_idx[0], np.arange(K))
    np.testing.assert_array_equal(out["idx"], want_idx)
    np.testing.assert_allclose(out["wts"], want_wts, rtol=1e-5, atol=1e-6)


# Group-limited routing (n_group 4, topk_group 2: 40 experts in groups of
# 10, top-6 from the 20 experts of the two kept groups; docs/moe.md,
# "Grouped top-k").
GROUPED = dict(E=40, K=6, n_group=4, topk_group=2)


def grouped_inputs(seed):
    """x, W, bias whose grouped choice has no near-ties in f32: for both
    score functions, with and without the bias, every token's kept groups
    are apart from the next group (2nd against 3rd group score) and its
    6th choice from its 7th among the kept groups' experts. In each of
    the four forms the group limit must change some token's choice (else
    a lowering that ignored the groups would pass)."""
    E, K, G, TG = (GROUPED[k] for k in ("E", "K", "n_group", "topk_group"))
    rng = np.random.default_rng(seed)
    while True:
        x, w, b, logits = draw_router(rng, E)
        ok, changed = True, True
        scores = {"sigmoid": 1 / (1 + np.exp(-logits)),
                  "softmax": np.exp(logits) / np.exp(logits).sum(1, keepdims=True)}
        for score, s in scores.items():
            for bias in (b, None):
                c = s + (bias if bias is not None else 0.0)
                top = np.sort(c.reshape(T, G, E // G), axis=-1)[..., ::-1]
                gs = np.sort(top[..., 0] + top[..., 1] if bias is not None else top[..., 0], axis=1)[:, ::-1]
                masked = np.sort(ops.group_limit(c, G, TG, bias is not None), axis=1)[:, ::-1]
                scale = np.abs(c).max(1)
                ok &= bool(np.min((gs[:, TG - 1] - gs[:, TG]) / scale) > 1e-4)
                ok &= bool(np.min((masked[:, K - 1] - masked[:, K]) / scale) > 1e-4)
                plain = np.sort(np.argsort(-c, axis=1, kind="stable")[:, :K], 1)
                grouped = np.sort(ops.moe_topk(logits, bias, K, score, n_group=G, topk_group=TG)[0], 1)
                changed &= bool(np.any(plain != grouped))
        if ok and changed:
            return x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("split", [1, 0])
def test_grouped_router_forms_match_oracle(tmp_path, score, with_bias, split):
    """Both router forms on the CPU choose the oracle's group-limited
    experts (in its order) with its weights; every token's experts lie in
    topk_group groups."""
    E, K, G, TG = (GROUPED[k] for k in ("E", "K", "n_group", "topk_group"))
    x, w, b = grouped_inputs(21)
    out = run_router(tmp_path, router_text(score, with_bias, E, K, G, TG), split, x, w,
                     b if with_bias else None)
    want_idx, want_wts = ops.moe_router(x.astype(np.float64), w.astype(np.float64),
                                        b.astype(np.float64) if with_bias else None, K, score,
                                        True, 2.5, n_group=G, topk_group=TG)
    np.testing.assert_array_equal(out["idx"], want_idx)
    np.testing.assert_allclose(out["wts"], want_wts, rtol=1e-5, atol=1e-6)
    assert max(len(set((row // (E // G)).tolist())) for row in out["idx"]) <= TG


def grouped_tied_logits(E, G, seed):
    """Exact ties in the group choice and the expert choice: all-equal
    rows (every group ties: groups 0 .. topk_group - 1 are kept); every
    group the same values in another order; two groups whose two best sum
    the same with different maxima; values repeated at scattered experts."""
    rng = np.random.default_rng(seed)
    per = E // G
    rows = [np.zeros(E), np.full(E, -3.0)]
    base = rng.standard_normal(per)
    rows.append(np.concatenate([rng.permutation(base) for _ in range(G)]))
    r = rng.standard_normal(E) - 4.0
    r[0], r[1], r[per], r[per + 1] = 1.0, 0.0, 0.5, 0.5
    rows.append(r)
    rows.append(rng.standard_normal(E // 4).repeat(4)[rng.permutation(E)])
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_grouped_exact_ties(tmp_path, score, with_bias):
    """Tied group scores keep the lower group id, tied experts the lower
    expert id (the oracle's stable sorts): the CPU target gives the
    oracle's experts in its order. The bias of few values makes biased
    scores tie too; the all-zero rows keep groups 0 and 1."""
    E, K, G, TG = (GROUPED[k] for k in ("E", "K", "n_group", "topk_group"))
    logits = grouped_tied_logits(E, G, 6)
    bias = (np.arange(E) % 2 * 0.25).astype(np.float32) if with_bias else None
    src, art = tmp_path / "topk.mlir", tmp_path / "topk.k3bin"
    text = TOPK.format(E=E, K=K, SCORE=score, GROUPS=group_attrs(G, TG))
    if with_bias:
        text = (text.replace("%idx, %wts = k3.moe_topk " + score + " %l",
                             '%b = k3.weight "b" : tensor<' + str(E) + 'xf32>\n  %idx, %wts = k3.moe_topk '
                             + score + " %l bias(%b)")
                .replace(f": (tensor<?x{E}xf32>) ->", f": (tensor<?x{E}xf32>, tensor<{E}xf32>) ->"))
    src.write_text(text)
    r = subprocess.run([f"{BIN}/k3-opt", str(src), f"--k3-compile=output={art} max-tokens=8 max-seqs=1",
                        "-o", os.devnull], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    infile, outfile = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    model.save_safetensors(infile, {"logits": logits}, dtype="f32")
    args = [f"{BIN}/k3-run", str(art), "--inputs", str(infile), "--symbol", "num_seqs=1",
            "--dump", str(outfile)]
    if with_bias:
        wfile = tmp_path / "w.safetensors"
        model.save_safetensors(wfile, {"b": bias}, dtype="f32")
        args += ["--weights", str(wfile)]
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = model.load_safetensors(outfile)
    want_idx, want_wts = ops.moe_topk(logits.astype(np.float64),
                                      bias.astype(np.float64) if with_bias else None, K, score,
                                      True, 1.0, n_group=G, topk_group=TG)
    if not with_bias:
        # The rule itself: all-equal rows keep groups 0, 1 and choose 0 .. K-1.
        np.testing.assert_array_equal(want_idx[0], np.arange(K))
    np.testing.assert_array_equal(out["idx"], want_idx)
    np.testing.assert_allclose(out["wts"], want_wts, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("score", ["sigmoid", "softmax"])
def test_imported_grouped_model_matches_oracle(tmp_path, score):
    """From config.json: Kimi Linear's tiny config with 16 experts in 4
    groups, topk_group 2, top-3 (the checkpoint's correction bias: group
    scores sum the two best). k3-import, k3-opt (expose-routing) and k3-run
    against the float64 oracle: the logits within 1e-4 and every MoE
    layer's expert ids equal to the oracle's (fixed seeds without near-ties
    between f32 and f64). The group limit changes the oracle's routing of
    some tokens, so the comparison would catch a lowering that ignored it."""
    cdict = json.loads((ROOT / "examples/configs/tiny-kimi-linear.json").read_text())
    cdict.update(num_experts=16, num_experts_per_token=3, num_expert_group=4, topk_group=2,
                 moe_router_activation_func=score)
    cpath, mlir, art = tmp_path / "config.json", tmp_path / "m.mlir", tmp_path / "m.k3bin"
    cpath.write_text(json.dumps(cdict))
    subprocess.run([f"{BIN}/k3-import", str(cpath), "-o", str(mlir)], check=True)
    assert "n_group = 4 : i64" in mlir.read_text()
    subprocess.run([f"{BIN}/k3-opt", str(mlir),
                    f"--k3-compile=output={art} max-tokens=64 max-seqs=2 logits=all expose-routing=1",
                    "-o", os.devnull], check=True)
    cfg = model.Config.from_hf(cdict)
    assert (cfg.num_expert_group, cfg.topk_group) == (4, 2)
    weights = rounded_random_weights(cfg, 17)
    wfile, infile, outfile = (tmp_path / n for n in ("w.safetensors", "in.safetensors", "out.safetensors"))
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    lens = [9, 23]
    ids = np.random.default_rng(4).integers(0, cfg.vocab_size, sum(lens)).astype(np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    model.save_safetensors(infile, {"token_ids": ids, "cu_seqlens": cu,
                                    "context_lens": np.zeros(len(lens), np.int32)})
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--inputs", str(infile),
                        "--dump", str(outfile)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = model.load_safetensors(outfile)
    dumps, plain_dumps = {}, {}
    ref = model.forward(cfg, weights, ids, cu_seqlens=cu, dumps=dumps)
    model.forward(dataclasses.replace(cfg, num_expert_group=1, topk_group=1), weights, ids,
                  cu_seqlens=cu, dumps=plain_dumps)
    assert rel_err(out["logits"], ref) <= 1e-4
    moe_layers = [i for i in range(cfg.num_hidden_layers) if cfg.is_moe(i)]
    changed = False
    for i in moe_layers:
        got = out[f"model.layers.{i}.block_sparse_moe.router_indices"]
        np.testing.assert_array_equal(got, dumps[f"layers.{i}.router_indices"], err_msg=f"layer {i}")
        assert max(len(set((row // 4).tolist())) for row in got) <= 2
        changed |= bool(np.any(np.sort(got, 1) != np.sort(plain_dumps[f"layers.{i}.router_indices"], 1)))
    assert changed, "the group limit changed no token's routing: pick another seed"
