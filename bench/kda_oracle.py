"""The f64 KDA oracle at benchmark shapes, on the GPU or the CPU.

The same recurrence as python/k3ref/ops.py ``kda_recurrent`` (and the
lower-bounded gate ``kda_gate_lower_bounded``), written against a tiny
array namespace so one function runs with numpy (checked against k3ref
here: test/e2e/test_bench_protocol.py) and with torch float64 tensors on
the device (bench/kda_forward.py: T = 32768 at H96 in seconds, where the
numpy oracle would take minutes). Sequences of equal length are batched;
states are [N, H, K, V] (K3's and fla's layout; FlashKDA's is [N, H, V, K]).
"""
from __future__ import annotations


def _xp(x):
    try:
        import torch
        if isinstance(x, torch.Tensor):
            return torch
    except ImportError:
        pass
    import numpy
    return numpy


def l2_normalize(x, eps=1e-6):
    """x / sqrt(sum x^2 + eps) over the last axis (k3ref.ops.l2_normalize)."""
    xp = _xp(x)
    return x / xp.sqrt(xp.einsum("...k,...k->...", x, x) + eps)[..., None]


def sigmoid(x):
    xp = _xp(x)
    return 1.0 / (1.0 + xp.exp(-x))


def gate_lower_bounded(z, A_log, dt_bias, lower_bound):
    """lb * sigmoid(exp(A_log[h]) * (z + dt_bias[h])); z [..., H, K]."""
    xp = _xp(z)
    H, K = z.shape[-2], z.shape[-1]
    a = xp.exp(A_log.reshape(-1)[:H])[:, None]
    return lower_bound * sigmoid(a * (z + dt_bias.reshape(H, K)))


def _recurrence(q, k, v, g, beta, S, scale):
    """One batch of equal-length sequences: q, k, g [N, L, H, K]; v [N, L,
    H, V]; beta [N, L, H]; S [N, H, K, V] (updated copy returned)."""
    xp = _xp(q)
    o = xp.zeros_like(v)
    for t in range(q.shape[1]):
        S = xp.exp(g[:, t])[..., None] * S
        pred = xp.einsum("nhkv,nhk->nhv", S, k[:, t])
        u = beta[:, t][..., None] * (v[:, t] - pred)
        S = S + k[:, t][..., None] * u[:, :, None, :]
        o[:, t] = xp.einsum("nhkv,nhk->nhv", S, q[:, t] * scale)
    return o, S


def kda_f64(q, k, v, g, beta, scale, initial_state, lens, use_qk_l2norm=True):
    """Packed sequences: q, k, g [1, T, H, K] (g the log-decay); v [1, T, H,
    V]; beta [1, T, H] (after any sigmoid); initial_state [N, H, K, V];
    ``lens`` the N sequence lengths (sum T). All float64. Returns (o [1, T,
    H, V], final_state [N, H, K, V])."""
    xp = _xp(q)
    if use_qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    o = xp.zeros_like(v)
    final = initial_state * 1.0
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + n)
    by_len: dict[int, list[int]] = {}
    for i, n in enumerate(lens):
        by_len.setdefault(n, []).append(i)
    for L, seqs in by_len.items():
        if L == 0:
            continue
        # Sequences of one length as a batch (contiguous runs are the common case).
        def take(x):
            return xp.stack([x[0, starts[i]:starts[i] + L] for i in seqs])
        idx = list(seqs)
        S0 = xp.stack([initial_state[i] for i in idx])
        ob, Sb = _recurrence(take(q), take(k), take(v), take(g), take(beta), S0, scale)
        for j, i in enumerate(idx):
            o[0, starts[i]:starts[i] + L] = ob[j]
            final[i] = Sb[j]
    return o, final
