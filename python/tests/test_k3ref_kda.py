"""KDA: gates, short conv, chunkwise / segment-scan forms against the recurrence."""
import math
import zlib

import numpy as np
import pytest

from k3ref import ops
from k3ref_testutil import rel_err

TOL = 1e-10


def make_inputs(rng, B, T, H, K, V, gate="lb", lb=-5.0, at_bound=False, big=False):
    q = rng.standard_normal((B, T, H, K))
    k = rng.standard_normal((B, T, H, K))
    v = rng.standard_normal((B, T, H, V))
    z = rng.standard_normal((B, T, H, K))
    if gate == "lb":
        A_log = np.concatenate([np.log(rng.uniform(0.5, 2.0, H)), np.zeros(3)])
        dt = rng.standard_normal(H * K)
        if at_bound:
            z = z + 50.0          # σ(·) -> 1: g sits at the -5 bound
        g = ops.kda_gate_lower_bounded(z, A_log, dt, lb)
    else:
        A_log = np.log(np.full(H, 16.0 if big else 1.0))
        dt = rng.standard_normal(H * K)
        g = ops.kda_gate_softplus(z, A_log, dt)
    beta = ops.sigmoid(rng.standard_normal((B, T, H)))
    return q, k, v, g, beta


def state(rng, N, H, K, V):
    return rng.standard_normal((N, H, K, V))


CASES = [
    # name, B, T, cu, init, gate kwargs, chunk, tile, solver
    ("T_not_multiple", 2, 100, None, True, dict(), 64, 16, "blocked"),
    ("T_lt_chunk", 1, 10, None, False, dict(), 64, 16, "blocked"),
    ("T_exact_two_chunks", 1, 128, None, True, dict(), 64, 16, "inverse"),
    ("varlen", 1, 150, [0, 3, 70, 70, 150], True, dict(), 64, 16, "blocked"),
    ("varlen_inverse", 1, 150, [0, 3, 70, 70, 150], True, dict(), 64, 16, "inverse"),
    ("at_minus5_bound", 1, 130, None, True, dict(at_bound=True), 64, 16, "blocked"),
    ("softplus_large_decay", 1, 140, [0, 77, 140], True, dict(gate="sp", big=True), 64, 16, "blocked"),
    ("softplus_mild", 2, 70, None, True, dict(gate="sp"), 64, 16, "inverse"),
    ("small_chunk_tile", 1, 45, [0, 20, 45], True, dict(), 16, 4, "blocked"),
    ("tile_not_dividing_chunk", 1, 50, None, True, dict(), 24, 7, "blocked"),
]


@pytest.mark.parametrize("name,B,T,cu,init,gk,chunk,tile,solver", CASES, ids=[c[0] for c in CASES])
def test_chunkwise_equals_recurrent(name, B, T, cu, init, gk, chunk, tile, solver):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    H, K, V = 2, 8, 6
    q, k, v, g, beta = make_inputs(rng, B, T, H, K, V, **gk)
    N = B if cu is None else len(cu) - 1
    S0 = state(rng, N, H, K, V) if init else None
    cu = None if cu is None else np.array(cu)
    o_r, S_r = ops.kda_recurrent(q, k, v, g, beta, K ** -0.5, S0, cu, use_qk_l2norm=True)
    o_c, S_c = ops.kda_chunkwise(q, k, v, g, beta, K ** -0.5, S0, cu, use_qk_l2norm=True,
                                 chunk_size=chunk, tile_size=tile, solver=solver)
    assert np.all(np.isfinite(o_c)) and np.all(np.isfinite(S_c))
    assert rel_err(o_c, o_r) < TOL
    assert rel_err(S_c, S_r) < TOL
    if gk.get("at_bound"):
        assert g.min() >= -5.0 and g.max() < -4.999
    if gk.get("big"):
        # the decay over one 64-token chunk is beyond float64's range for 1/γ
        G = np.cumsum(g[0, :64], axis=0)
        assert -G.min() > 709.8


def test_recurrent_matches_closed_form_update():
    """S_t = (I − β k kᵀ) Diag(α) S_{t−1} + β k vᵀ, o_t = S_tᵀ q̂ (K3-SPEC §2 step 5)."""
    rng = np.random.default_rng(1)
    T, H, K, V = 7, 1, 5, 3
    q, k, v, g, beta = make_inputs(rng, 1, T, H, K, V)
    S0 = state(rng, 1, H, K, V)
    o, S = ops.kda_recurrent(q, k, v, g, beta, 0.3, S0, use_qk_l2norm=True)
    qn = q / np.sqrt((q ** 2).sum(-1, keepdims=True) + 1e-6)
    kn = k / np.sqrt((k ** 2).sum(-1, keepdims=True) + 1e-6)
    St = S0[0, 0]
    for t in range(T):
        kk, b = kn[0, t, 0], beta[0, t, 0]
        St = (np.eye(K) - b * np.outer(kk, kk)) @ np.diag(np.exp(g[0, t, 0])) @ St + b * np.outer(kk, v[0, t, 0])
        assert rel_err(o[0, t, 0], St.T @ (qn[0, t, 0] * 0.3)) < 1e-12
    assert rel_err(S[0, 0], St) < 1e-12


def test_recurrent_varlen_equals_separate():
    rng = np.random.default_rng(2)
    H, K, V = 2, 4, 3
    q, k, v, g, beta = make_inputs(rng, 1, 23, H, K, V)
    cu = np.array([0, 9, 23])
    S0 = state(rng, 2, H, K, V)
    o, S = ops.kda_recurrent(q, k, v, g, beta, 0.5, S0, cu)
    for n in range(2):
        s, e = cu[n], cu[n + 1]
        o1, S1 = ops.kda_recurrent(q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e], beta[:, s:e], 0.5,
                                   S0[n:n + 1])
        assert rel_err(o[:, s:e], o1) < 1e-14 and rel_err(S[n], S1[0]) < 1e-14


@pytest.mark.parametrize("n,tile", [(64, 16), (50, 16), (37, 7), (16, 16), (5, 16)])
def test_triangular_solves_match_numpy(n, tile):
    rng = np.random.default_rng(n * 100 + tile)
    A = np.eye(n) + np.tril(0.3 * rng.standard_normal((n, n)), -1)
    rhs = rng.standard_normal((n, 5))
    ref = np.linalg.solve(A, rhs)
    assert rel_err(ops.tri_solve_blocked(A, rhs, tile), ref) < 1e-10
    assert rel_err(ops.tri_solve_block_inverse(A, rhs, tile), ref) < 1e-10
    assert rel_err(ops.tri_inverse_block(A, tile), np.linalg.inv(A)) < 1e-10


def test_decayed_gram_matches_direct_pairwise():
    rng = np.random.default_rng(3)
    C, K = 40, 5
    X, Y = rng.standard_normal((C, K)), rng.standard_normal((C, K))
    G = np.cumsum(-5.0 * rng.uniform(0, 1, (C, K)), axis=0)
    ref = np.zeros((C, C))
    for i in range(C):
        for j in range(i + 1):
            ref[i, j] = np.sum(X[i] * Y[j] * np.exp(G[i] - G[j]))
    assert rel_err(ops.decayed_gram(X, Y, G, 16), ref) < 1e-12
    strict = ops.decayed_gram(X, Y, G, 16, strict=True)
    assert np.all(np.diag(strict) == 0) and rel_err(strict, np.tril(ref, -1)) < 1e-12


@pytest.mark.parametrize("segs,T,cu", [(3, 37, None), (4, 50, [0, 2, 30, 50]), (1, 20, None), (7, 64, [0, 64])])
def test_segment_scan_equals_recurrence(segs, T, cu):
    rng = np.random.default_rng(segs * 7 + T)
    H, K, V = 2, 6, 4
    q, k, v, g, beta = make_inputs(rng, 1, T, H, K, V)
    N = 1 if cu is None else len(cu) - 1
    S0 = state(rng, N, H, K, V)
    cu = None if cu is None else np.array(cu)
    o_r, S_r = ops.kda_recurrent(q, k, v, g, beta, 0.4, S0, cu, use_qk_l2norm=True)
    o_s, S_s = ops.kda_segment_scan(q, k, v, g, beta, 0.4, S0, cu, use_qk_l2norm=True,
                                    num_segments=segs)
    assert rel_err(o_s, o_r) < TOL and rel_err(S_s, S_r) < TOL


def test_segment_transition_is_affine_map():
    rng = np.random.default_rng(4)
    T, K, V = 9, 4, 3
    q, k, v, g, beta = make_inputs(rng, 1, T, 1, K, V)
    A = ops.kda_segment_transition(k[0, :, 0], g[0, :, 0], beta[0, :, 0])
    _, b = ops.kda_recurrent(q, k, v, g, beta, 1.0)
    S0 = state(rng, 1, 1, K, V)
    _, S = ops.kda_recurrent(q, k, v, g, beta, 1.0, S0)
    assert rel_err(S[0, 0], A @ S0[0, 0] + b[0, 0]) < 1e-12


def test_gate_lower_bounded_formula_and_padding():
    rng = np.random.default_rng(5)
    H, K = 3, 4
    z = rng.standard_normal((7, H, K))
    A_log = rng.standard_normal(H)
    dt = rng.standard_normal(H * K)
    g = ops.kda_gate_lower_bounded(z, A_log, dt, -5.0)
    t, h, c = 4, 2, 1
    x = math.exp(A_log[h]) * (z[t, h, c] + dt[h * K + c])
    assert g[t, h, c] == pytest.approx(-5.0 / (1.0 + math.exp(-x)), rel=1e-14)
    assert np.all(g < 0) and np.all(g > -5.0)
    padded = np.concatenate([A_log, 123.0 * np.ones(5)])   # only [:H] is used
    assert np.array_equal(ops.kda_gate_lower_bounded(z, padded, dt, -5.0), g)


def test_gate_softplus_formula():
    z = np.array([[[0.3, -2.0]]])
    A_log = np.array([math.log(3.0)])
    dt = np.array([0.1, 0.5])
    g = ops.kda_gate_softplus(z, A_log, dt)
    assert g[0, 0, 0] == pytest.approx(-3.0 * math.log1p(math.exp(0.4)), rel=1e-14)
    assert g[0, 0, 1] == pytest.approx(-3.0 * math.log1p(math.exp(-1.5)), rel=1e-14)


def test_short_conv_hand_example():
    w = np.array([[[1.0, 2.0, 3.0, 4.0]]])        # C = 1, K = 4
    x = np.array([[1.0], [10.0], [100.0]])
    y, st = ops.short_conv(x, w, activation=None)
    # y_t = Σ_j w_j x_{t-3+j}: y0 = 4·1, y1 = 3·1 + 4·10, y2 = 2·1 + 3·10 + 4·100
    assert y[:, 0].tolist() == [4.0, 43.0, 432.0]
    assert st.tolist() == [[[1.0, 10.0, 100.0]]]
    ys, _ = ops.short_conv(x, w)
    assert rel_err(ys, y * ops.sigmoid(y)) < 1e-15
    y2, st2 = ops.short_conv(np.array([[1000.0]]), w, st, activation=None)
    assert y2[0, 0] == 1.0 * 1 + 2 * 10 + 3 * 100 + 4 * 1000
    assert st2.tolist() == [[[10.0, 100.0, 1000.0]]]


def test_short_conv_state_carry_and_varlen():
    rng = np.random.default_rng(6)
    C, Kc = 5, 4
    w = rng.standard_normal((C, 1, Kc))
    x = rng.standard_normal((13, C))
    y, st = ops.short_conv(x, w)
    ya, sa = ops.short_conv(x[:2], w)                   # shorter than K-1
    yb, sb = ops.short_conv(x[2:], w, sa)
    assert rel_err(np.concatenate([ya, yb]), y) < 1e-14 and rel_err(sb, st) < 1e-14
    cu = np.array([0, 6, 13])
    yv, sv = ops.short_conv(x, w, cu_seqlens=cu)
    y1, s1 = ops.short_conv(x[6:], w)
    assert rel_err(yv[6:], y1) < 1e-14 and rel_err(sv[1], s1[0]) < 1e-14
    assert not np.allclose(yv[6:], y[6:])             # the boundary really resets history
