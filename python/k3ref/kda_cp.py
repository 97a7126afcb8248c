"""KDA context parallelism, the float64 reference (issue 19; seed §7.5).

A sequence too long for one rank is cut into consecutive segments, one per
rank. The KDA recurrence is affine in its state: per head, with the token's
transition ``T_t = (I − β_t k_t k_tᵀ) Diag(exp g_t)`` (K × K),

    S_t = T_t S_{t−1} + β_t k_t v_tᵀ,

so a segment that starts from a state ``S_in`` ends at ``M S_in + h`` and
emits ``o_t = o⁰_t + scale · S_inᵀ (P_tᵀ q_t)``, where, from a zero state:

* ``h`` (h_ext) is the segment's final state,
* ``M = T_n ⋯ T_1`` its transition,
* ``o⁰_t`` its outputs, and ``P_t = T_t ⋯ T_1`` the transition up to t.

Each rank computes its (h, M) and zero-state outputs alone; one all-gather
of the (h, M) pairs (``collectives.all_gather``) gives every rank the fold
``S_in^{(r)} = M_{r−1} S_in^{(r−1)} + h_{r−1}`` (from the sequence's initial
state), and each rank corrects its outputs by its ``S_in``. Naive and
obviously right, like the rest of k3ref: kernels and passes that implement
context parallelism are checked against it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import collectives
from . import ops
from .ops import _kda_prepare


def token_transition(k_t: np.ndarray, g_t: np.ndarray, beta_t: np.ndarray) -> np.ndarray:
    """``T_t = (I − β k kᵀ) Diag(exp g)`` per head: k_t, g_t ``[H, K]``,
    beta_t ``[H]`` → ``[H, K, K]``."""
    H, K = k_t.shape
    eye = np.broadcast_to(np.eye(K), (H, K, K))
    delta = eye - beta_t[:, None, None] * k_t[:, :, None] * k_t[:, None, :]
    return delta * np.exp(g_t)[:, None, :]


def segment_from_zero(q, k, v, g, beta, scale):
    """One segment of one sequence from a zero state. q, k, g ``[L, H, K]``
    (q and k already normalised where the model asks), v ``[L, H, V]``,
    beta ``[L, H]``. Returns ``(o0 [L, H, V], h [H, K, V], M [H, K, K],
    qt [L, H, K])``, qt_t = P_tᵀ q_t · scale (the correction's left factor)."""
    L, H, K = q.shape
    V = v.shape[-1]
    S = np.zeros((H, K, V))
    P = np.broadcast_to(np.eye(K), (H, K, K)).copy()
    o0 = np.zeros((L, H, V))
    qt = np.zeros((L, H, K))
    for t in range(L):
        T = token_transition(k[t], g[t], beta[t])
        S = np.einsum("hij,hjv->hiv", T, S) + beta[t][:, None, None] * k[t][:, :, None] * v[t][:, None, :]
        P = np.einsum("hij,hjk->hik", T, P)
        o0[t] = np.einsum("hkv,hk->hv", S, q[t] * scale)
        qt[t] = np.einsum("hkj,hk->hj", P, q[t] * scale)
    return o0, S, P, qt


def fold(pairs: Sequence[tuple[np.ndarray, np.ndarray]], s0: np.ndarray) -> list[np.ndarray]:
    """Each segment's incoming state from the gathered (h, M) pairs, in
    segment order: ``S_in^{(0)} = s0``, ``S_in^{(r)} = M_{r−1} S_in^{(r−1)}
    + h_{r−1}``; the last entry is the sequence's final state."""
    states = [s0]
    for h, M in pairs:
        states.append(np.einsum("hij,hjv->hiv", M, states[-1]) + h)
    return states


def kda_context_parallel(q, k, v, g, beta, scale, segments: Sequence[int], initial_state=None,
                         use_qk_l2norm=False):
    """KDA over one sequence (``[1, T, H, *]`` inputs) cut into consecutive
    segments of the given lengths (one per rank; they sum to T), the way
    context parallelism computes it: each segment from a zero state, one
    all-gather of the (h, M) pairs, the fold, the output correction.
    Returns ``(o [1, T, H, V], final_state [1, H, K, V])``, which equal
    ``ops.kda_recurrent`` on the whole sequence."""
    q, k, v, g, beta, S0, bounds = _kda_prepare(q, k, v, g, beta, initial_state, None,
                                                use_qk_l2norm)
    assert len(bounds) == 1, "one sequence"
    T = q.shape[1]
    assert sum(segments) == T and all(n >= 0 for n in segments), (segments, T)
    starts = np.concatenate([[0], np.cumsum(segments)]).astype(int)
    local = [segment_from_zero(q[0, a:b], k[0, a:b], v[0, a:b], g[0, a:b], beta[0, a:b], scale)
             for a, b in zip(starts[:-1], starts[1:])]
    # The all-gather: every rank receives every rank's (h, M), stacked.
    hs = collectives.all_gather([h[None] for _, h, _, _ in local], dim=0)[0]
    Ms = collectives.all_gather([M[None] for _, _, M, _ in local], dim=0)[0]
    states = fold(list(zip(hs, Ms)), S0[0])
    o = np.zeros(v.shape)
    for r, (a, b) in enumerate(zip(starts[:-1], starts[1:])):
        o0, _, _, qt = local[r]
        o[0, a:b] = o0 + np.einsum("lhk,hkv->lhv", qt, states[r])
    return o, states[-1][None]


def kda_segment(q, k, v, g, beta, scale, cu_seqlens, use_qk_l2norm=False):
    """A rank's ``k3.kda`` over ``k3.kda_context_inputs``: KDA over each
    sequence of ``cu_seqlens`` from the state ``[0 | I]`` with values
    ``[v | 0]`` (``K`` extra columns).
    Returns ``(o [1, T, H, V + K], state [N, H, K, V + K])``: per segment
    ``[o⁰ | qt]`` and ``[h | M]`` of :func:`segment_from_zero`."""
    v = np.asarray(v, dtype=np.float64)
    K = np.asarray(q).shape[-1]
    N, H = len(cu_seqlens) - 1, v.shape[2]
    v_ext = np.concatenate([v, np.zeros(v.shape[:3] + (K,))], axis=-1)
    s0 = np.zeros((N, H, K, v.shape[-1] + K))
    s0[..., v.shape[-1]:] = np.eye(K)
    return ops.kda_recurrent(q, k, v_ext, g, beta, scale, initial_state=s0,
                             cu_seqlens=cu_seqlens, use_qk_l2norm=use_qk_l2norm)


def kda_context_fold(segment_output, segments, rank, initial_state, cu_seqlens):
    """``k3.kda_context_fold``: ``segments [G, N, H, K, V + K]`` (every
    rank's :func:`kda_segment` state), this rank's segment output ``[1, T,
    H, V + K]``. Returns the corrected output ``[1, T, H, V]`` and the
    final state after the last rank ``[N, H, K, V]``."""
    G, N, H, K, W = segments.shape
    V = W - K
    o = np.zeros(segment_output.shape[:3] + (V,))
    final = np.zeros((N, H, K, V))
    for n, (a, b) in enumerate(zip(cu_seqlens[:-1], cu_seqlens[1:])):
        pairs = [(segments[r, n, :, :, :V], segments[r, n, :, :, V:]) for r in range(G)]
        s0 = initial_state[n] if initial_state is not None else np.zeros((H, K, V))
        states = fold(pairs, s0)
        seg = segment_output[0, a:b]
        o[0, a:b] = seg[..., :V] + np.einsum("lhk,hkv->lhv", seg[..., V:], states[rank])
        final[n] = states[-1]
    return o, final


def short_conv_context_fold(tails, cu_seqlens, rank, conv_state=None):
    """``k3.short_conv_context_fold``: ``tails [G, N, C, W − 1]`` (every
    rank's zero-state final convolution state) and ``cu_seqlens [G, N +
    1]`` (every rank's). Returns the state entering rank ``rank``'s segment
    and the state after the last, ``[N, C, W − 1]`` each: a segment of L
    tokens keeps the last W − 1 rows of [state; its inputs]."""
    G, N, C, R = tails.shape
    state = np.zeros((N, C, R)) if conv_state is None else np.array(conv_state, dtype=np.float64)
    incoming = None
    for r in range(G):
        if r == rank:
            incoming = state.copy()
        new = state.copy()
        for n in range(N):
            L = int(cu_seqlens[r, n + 1] - cu_seqlens[r, n])
            for i in range(R):
                new[n, :, i] = state[n, :, i + L] if i + L < R else tails[r, n, :, i]
        state = new
    return incoming, state


def short_conv_tail(x, cu_seqlens, kernel_size):
    """``k3.short_conv_tail``: per sequence the last ``W − 1`` inputs (zeros
    before its first), the final state of a short convolution run from a
    zero state: ``[N, C, W − 1]``."""
    x = np.asarray(x, dtype=np.float64)
    R = kernel_size - 1
    out = np.zeros((len(cu_seqlens) - 1, x.shape[1], R))
    for n, (a, b) in enumerate(zip(cu_seqlens[:-1], cu_seqlens[1:])):
        for i in range(R):
            t = b - R + i
            if t >= a:
                out[n, :, i] = x[t]
    return out
