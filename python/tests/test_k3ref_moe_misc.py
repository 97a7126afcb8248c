"""Router, experts, latent MoE, SiTU, AttnRes, norms (K3-SPEC §4–§6)."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from k3ref import ops
from k3ref_testutil import rel_err


def test_router_renormalisation_and_scaling():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 12))
    w = rng.standard_normal((10, 12))
    idx, wts = ops.moe_router(x, w, None, 3, "sigmoid", True, 2.446)
    assert idx.shape == (9, 3)
    assert np.allclose(wts.sum(-1), 2.446, rtol=1e-14)
    s = 1 / (1 + np.exp(-(x @ w.T)))
    for t in range(9):
        assert set(idx[t]) == set(np.argsort(-s[t])[:3])
        raw = s[t, idx[t]]
        assert np.allclose(wts[t], 2.446 * raw / raw.sum(), rtol=1e-13)
    _, wts_raw = ops.moe_router(x, w, None, 3, "sigmoid", False, 1.0)
    assert np.allclose(wts_raw, np.take_along_axis(s, idx, -1), rtol=1e-13)
    _, wts1 = ops.moe_router(x, w, None, 1, "sigmoid", True, 1.0)   # top-1: no renorm
    assert np.allclose(wts1[:, 0], s.max(-1), rtol=1e-13)


def test_router_bias_affects_choice_only():
    x = np.array([[1.0, 0.0]])
    w = np.array([[2.0, 0.0], [1.0, 0.0], [0.0, 0.0]])   # scores σ(2) > σ(1) > σ(0)
    bias = np.array([0.0, 0.0, 1.0])
    idx, wts = ops.moe_router(x, w, bias, 2, "sigmoid", False, 1.0)
    assert idx[0].tolist() == [2, 0]
    s = ops.sigmoid(np.array([2.0, 1.0, 0.0]))
    assert np.allclose(wts[0], [s[2], s[0]], rtol=1e-14)        # unbiased scores
    fidx, fw = ops.moe_router(x, w, bias, 2, "sigmoid", False, 1.0, forced_indices=[[1, 0]])
    assert fidx[0].tolist() == [1, 0] and np.allclose(fw[0], [s[1], s[0]])


def test_router_softmax():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 6)), rng.standard_normal((5, 6))
    idx, wts = ops.moe_router(x, w, None, 2, "softmax", False, 1.0)
    l = x @ w.T
    p = np.exp(l) / np.exp(l).sum(-1, keepdims=True)
    assert np.allclose(wts, np.take_along_axis(p, idx, -1), rtol=1e-13)


def test_situ_spot_values():
    g, u = 1.0, 2.0
    expect = 4 * math.tanh(0.25) / (1 + math.exp(-1.0)) * 25 * math.tanh(2.0 / 25)
    assert ops.situ_glu(g, u, 4.0, 25.0) == pytest.approx(expect, rel=1e-14)
    assert ops.situ_glu(0.0, 7.0, 4.0, 25.0) == 0.0
    assert ops.situ_glu(100.0, 1000.0, 4.0, 25.0) == pytest.approx(4.0 * 25.0, rel=1e-9)
    assert ops.situ_glu(-3.0, 2.0, 4.0, None) == pytest.approx(
        4 * math.tanh(-0.75) / (1 + math.exp(3.0)) * 2.0, rel=1e-14)
    # small gate: β tanh(x/β) σ(x) ≈ SiLU(x)
    assert ops.situ_glu(1e-3, 1.0, 4.0, None) == pytest.approx(float(ops.silu(1e-3)), rel=1e-6)
    assert ops.silu_glu(2.0, 3.0) == pytest.approx(2.0 / (1 + math.exp(-2.0)) * 3.0, rel=1e-14)


def test_moe_experts_against_dense_sum():
    rng = np.random.default_rng(2)
    E, I, D, T = 4, 5, 6, 3
    w1, w3, w2 = rng.standard_normal((E, I, D)), rng.standard_normal((E, I, D)), rng.standard_normal((E, D, I))
    x = rng.standard_normal((T, D))
    idx = np.array([[0, 3], [2, 1], [3, 3]])
    wts = rng.uniform(size=(T, 2))
    y = ops.moe_experts(x, idx, wts, w1, w3, w2, "situ", 4.0, 25.0)
    dense = np.zeros((T, E))
    for t in range(T):
        for e, c in zip(idx[t], wts[t]):
            dense[t, e] += c
    ref = sum(dense[:, e:e + 1] * ops.glu_mlp(x, w1[e], w3[e], w2[e], "situ", 4.0, 25.0) for e in range(E))
    assert rel_err(y, ref) < 1e-13


def _moe_cfg(**kw):
    base = dict(num_experts_per_token=2, moe_router_activation_func="sigmoid", moe_renormalize=True,
                routed_scaling_factor=1.5, hidden_act="silu", activation_situ_beta=None,
                activation_situ_linear_beta=None, latent_moe_use_norm=False, rms_norm_eps=1e-5,
                routed_expert_hidden_size=None, num_shared_experts=0)
    base.update(kw)
    return SimpleNamespace(**base)


def test_latent_moe_with_identity_projections_equals_full_width():
    rng = np.random.default_rng(3)
    E, I, D, T = 5, 4, 6, 7
    w = {"gate.weight": rng.standard_normal((E, D)), "gate.e_score_correction_bias": 0.1 * rng.standard_normal(E),
         "w1": rng.standard_normal((E, I, D)), "w3": rng.standard_normal((E, I, D)),
         "w2": rng.standard_normal((E, D, I)),
         "routed_expert_down_proj.weight": np.eye(D), "routed_expert_up_proj.weight": np.eye(D)}
    x = rng.standard_normal((T, D))
    y_full, i1, _ = ops.moe_block(x, w, _moe_cfg())
    y_lat, i2, _ = ops.moe_block(x, w, _moe_cfg(routed_expert_hidden_size=D))
    assert np.array_equal(i1, i2) and rel_err(y_lat, y_full) < 1e-13
    # with the latent norm, the routed sum is RMS-normalised before the up projection
    w["routed_expert_norm.weight"] = np.full(D, 2.0)
    y_n, _, _ = ops.moe_block(x, w, _moe_cfg(routed_expert_hidden_size=D, latent_moe_use_norm=True))
    assert rel_err(y_n, ops.rms_norm(y_full, w["routed_expert_norm.weight"], 1e-5)) < 1e-13
    # shared experts act on the full-width x and add
    w.update({"shared_experts.gate_proj.weight": rng.standard_normal((3, D)),
              "shared_experts.up_proj.weight": rng.standard_normal((3, D)),
              "shared_experts.down_proj.weight": rng.standard_normal((D, 3))})
    y_s, _, _ = ops.moe_block(x, w, _moe_cfg(num_shared_experts=1))
    sh = ops.glu_mlp(x, w["shared_experts.gate_proj.weight"], w["shared_experts.up_proj.weight"],
                     w["shared_experts.down_proj.weight"], "silu")
    assert rel_err(y_s, y_full + sh) < 1e-13


def test_attn_res_single_source_is_identity():
    rng = np.random.default_rng(4)
    P = rng.standard_normal((5, 8))
    out = ops.attn_res_mix([], P, rng.standard_normal(8), rng.standard_normal((1, 8)))
    assert rel_err(out, P) < 1e-15
    # several identical sources also give the identity (softmax weights sum to 1)
    assert rel_err(ops.attn_res_mix([P, P], P, np.ones(8), rng.standard_normal(8)), P) < 1e-14


def test_attn_res_mix_values():
    rng = np.random.default_rng(5)
    D = 8
    b = [rng.standard_normal((3, D)) for _ in range(2)]
    P = rng.standard_normal((3, D))
    nw, pw = rng.standard_normal(D), rng.standard_normal((1, D))
    out = ops.attn_res_mix(b, P, nw, pw, 1e-5)
    src = b + [P]
    for t in range(3):
        l = [np.dot(s[t] / math.sqrt(np.mean(s[t] ** 2) + 1e-5), nw * pw[0]) for s in src]
        p = np.exp(l) / np.sum(np.exp(l))
        assert rel_err(out[t], sum(pi * s[t] for pi, s in zip(p, src))) < 1e-13
    # zero pseudo-query: uniform average
    assert rel_err(ops.attn_res_mix(b, P, nw, np.zeros(D)), (b[0] + b[1] + P) / 3) < 1e-14


def test_norms():
    x = np.array([[3.0, 4.0]])
    assert ops.rms_norm(x, np.array([1.0, 2.0]), 0.0)[0].tolist() == pytest.approx(
        [3 / math.sqrt(12.5), 8 / math.sqrt(12.5)], rel=1e-14)
    o = np.ones((1, 2, 2)) * np.array([[[1.0], [2.0]]])
    gate = np.zeros((1, 2, 2))
    r = ops.gated_rms_norm(o, gate, np.array([1.0, 3.0]), 0.0)
    assert np.allclose(r, 0.5 * np.array([[[1.0, 3.0], [1.0, 3.0]]]))
    assert ops.argmax_sample(np.array([[0.1, 5.0, 5.0], [3.0, 1.0, 2.0]])).tolist() == [1, 0]


def test_attn_res_bookkeeping_block_contents():
    """K3-SPEC §6: B0 = embedding; block n ≥ 1 = sum of attn+MLP outputs of layers
    bs(n−1)…bs·n−1; the running partial holds the remaining layers."""
    rng = np.random.default_rng(7)
    D, bs, L = 4, 4, 10
    emb = rng.standard_normal((2, D))
    st = ops.AttnResState(emb, bs)
    outs = []
    for i in range(L):
        st.pre_attn(i, np.ones(D), rng.standard_normal(D), 1e-5)
        a = rng.standard_normal((2, D))
        st.add(a)
        st.mix(np.ones(D), rng.standard_normal(D), 1e-5)
        m = rng.standard_normal((2, D))
        st.add(m)
        outs.append(a + m)
    assert len(st.blocks) == 3                      # boundaries at layers 0, 4, 8
    assert rel_err(st.blocks[0], emb) == 0
    assert rel_err(st.blocks[1], sum(outs[0:4])) < 1e-14
    assert rel_err(st.blocks[2], sum(outs[4:8])) < 1e-14
    assert rel_err(st.partial, sum(outs[8:10])) < 1e-14
