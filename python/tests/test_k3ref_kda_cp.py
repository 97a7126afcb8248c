"""KDA context parallelism (k3ref.kda_cp): segments from a zero state, one
all-gather of (h, M), the fold, the output correction, against the
token-by-token recurrence."""
import numpy as np
import pytest

from k3ref import kda_cp, ops
from k3ref_testutil import rel_err


def inputs(rng, T, H=2, K=8, V=5, at_bound=False, mild=False):
    q = rng.standard_normal((1, T, H, K))
    k = rng.standard_normal((1, T, H, K))
    v = rng.standard_normal((1, T, H, V))
    # at_bound: log-decays at -5; mild: near 0 (a state lasts many tokens).
    z = rng.standard_normal((1, T, H, K)) + (50.0 if at_bound else -6.0 if mild else 0.0)
    g = ops.kda_gate_lower_bounded(z, np.log(rng.uniform(0.5, 2.0, H)),
                                   rng.standard_normal(H * K), -5.0)
    beta = ops.sigmoid(rng.standard_normal((1, T, H)))
    s0 = rng.standard_normal((1, H, K, V))
    return q, k, v, g, beta, s0


@pytest.mark.parametrize("segments", [[37], [10, 27], [10, 0, 15, 12], [1] * 37, [36, 1]])
@pytest.mark.parametrize("at_bound", [False, True])
def test_segments_equal_the_recurrence(segments, at_bound):
    rng = np.random.default_rng(len(segments) + 7 * at_bound)
    q, k, v, g, beta, s0 = inputs(rng, 37, at_bound=at_bound)
    want_o, want_s = ops.kda_recurrent(q, k, v, g, beta, 0.35, initial_state=s0, use_qk_l2norm=True)
    o, s = kda_cp.kda_context_parallel(q, k, v, g, beta, 0.35, segments, initial_state=s0,
                                       use_qk_l2norm=True)
    assert rel_err(o, want_o) < 1e-12
    assert rel_err(s, want_s) < 1e-12


def test_the_correction_carries_the_earlier_segments():
    # Without the fold and the correction the later segment's outputs are
    # those of a zero start: far from the recurrence's (with mild decays,
    # which carry the incoming state through the segment).
    rng = np.random.default_rng(3)
    q, k, v, g, beta, s0 = inputs(rng, 20, mild=True)
    qn, kn = ops.l2_normalize(q), ops.l2_normalize(k)
    o0, _, _, _ = kda_cp.segment_from_zero(qn[0, 10:], kn[0, 10:], v[0, 10:], g[0, 10:],
                                           beta[0, 10:], 0.35)
    want_o, _ = ops.kda_recurrent(q, k, v, g, beta, 0.35, initial_state=s0, use_qk_l2norm=True)
    assert rel_err(o0, want_o[0, 10:]) > 0.1
    o, _ = kda_cp.kda_context_parallel(q, k, v, g, beta, 0.35, [10, 10], initial_state=s0,
                                       use_qk_l2norm=True)
    assert rel_err(o[0, 10:], want_o[0, 10:]) < 1e-12


def test_seed_hand_example_in_two_segments():
    # Seed §7.4: K = V = 1, no decay, S0 = 0; k = 1, v = 5, β = 0.5, then
    # k = 1, v = 7, β = 0.4: S = 2.5, then 0.6 · 2.5 + 2.8 = 4.3. As two
    # one-token segments: (h, M) = (2.5, 0.5) and (2.8, 0.6).
    k = np.ones((1, 2, 1, 1))
    v = np.array([5.0, 7.0]).reshape(1, 2, 1, 1)
    g = np.zeros((1, 2, 1, 1))
    beta = np.array([0.5, 0.4]).reshape(1, 2, 1)
    pairs = [kda_cp.segment_from_zero(k[0, t:t + 1], k[0, t:t + 1], v[0, t:t + 1], g[0, t:t + 1],
                                      beta[0, t:t + 1], 1.0)[1:3] for t in range(2)]
    assert [(float(h), float(M)) for h, M in pairs] == [(2.5, 0.5), pytest.approx((2.8, 0.6))]
    states = kda_cp.fold(pairs, np.zeros((1, 1, 1)))
    assert [float(s) for s in states] == [0.0, 2.5, pytest.approx(4.3)]
    o, s = kda_cp.kda_context_parallel(k, k, v, g, beta, 1.0, [1, 1])
    assert float(s) == pytest.approx(4.3) and float(o[0, 1, 0, 0]) == pytest.approx(4.3)


@pytest.mark.parametrize("segments", [[37], [10, 0, 15, 12], [1] * 5 + [32]])
def test_the_ops_fold_as_the_reference(segments):
    """k3.kda_segment's one extended pass gives segment_from_zero's four
    parts, and k3.kda_context_fold over the ranks' passes gives the
    recurrence's outputs and final state (the ops' reference forms)."""
    rng = np.random.default_rng(len(segments))
    q, k, v, g, beta, s0 = inputs(rng, 37)
    want_o, want_s = ops.kda_recurrent(q, k, v, g, beta, 0.35, initial_state=s0, use_qk_l2norm=True)
    starts = np.concatenate([[0], np.cumsum(segments)]).astype(int)
    parts = [kda_cp.kda_segment(q[:, a:b], k[:, a:b], v[:, a:b], g[:, a:b], beta[:, a:b], 0.35,
                                [0, b - a], use_qk_l2norm=True)
             for a, b in zip(starts[:-1], starts[1:])]
    a, b = starts[1], starts[2] if len(segments) > 1 else starts[1]
    o0, h, M, qt = kda_cp.segment_from_zero(*(ops.l2_normalize(x[0, :a]) for x in (q, k)), v[0, :a],
                                            g[0, :a], beta[0, :a], 0.35)
    V = v.shape[-1]
    assert rel_err(parts[0][1][0, ..., :V], h) < 1e-12 and rel_err(parts[0][1][0, ..., V:], M) < 1e-12
    assert rel_err(parts[0][0][0, ..., :V], o0) < 1e-12 and rel_err(parts[0][0][0, ..., V:], qt) < 1e-12
    stacked = np.stack([s for _, s in parts])
    for r, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
        o, s = kda_cp.kda_context_fold(parts[r][0], stacked, r, s0, [0, b - a])
        assert rel_err(o, want_o[:, a:b]) < 1e-10 if b > a else o.size == 0
        assert rel_err(s, want_s) < 1e-10


@pytest.mark.parametrize("segments", [[9], [4, 5], [1, 0, 2, 6], [0, 9], [2, 2, 2, 3]])
def test_short_conv_fold(segments):
    """The convolution's history folded over segments (some shorter than
    the window) equals the state before and after each segment of the
    whole sequence."""
    rng = np.random.default_rng(sum(segments) + len(segments))
    C, W = 3, 4
    x = rng.standard_normal((9, C))
    w = rng.standard_normal((C, 1, W))
    s0 = rng.standard_normal((1, C, W - 1))
    starts = np.concatenate([[0], np.cumsum(segments)]).astype(int)
    tails = np.stack([kda_cp.short_conv_tail(x[a:b], [0, b - a], W)
                      for a, b in zip(starts[:-1], starts[1:])])
    for tail, (a, b) in zip(tails, zip(starts[:-1], starts[1:])):  # a zero-state conv's final state
        assert np.array_equal(tail, ops.short_conv(x[a:b], w, None, [0, b - a])[1])
    cus = np.array([[0, b - a] for a, b in zip(starts[:-1], starts[1:])])
    for r, a in enumerate(starts[:-1]):
        incoming, final = kda_cp.short_conv_context_fold(tails, cus, r, s0)
        _, want_in = ops.short_conv(x[:a], w, s0, [0, a])
        _, want_final = ops.short_conv(x, w, s0, [0, 9])
        assert np.allclose(incoming, want_in, atol=1e-12) and np.allclose(final, want_final, atol=1e-12)
