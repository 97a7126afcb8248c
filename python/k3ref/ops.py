"""Per-op float64 reference implementations (K3-SPEC §2–§7).

Conventions
-----------
* Tokens are packed: activations are ``[T, D]``.  Variable-length batches are
  described by ``cu_seqlens`` (int array ``[N+1]``, ``cu_seqlens[0] == 0``,
  ``cu_seqlens[-1] == T``); ``None`` means a single sequence of length T.
* Linear weights are ``[out, in]`` (``nn.Linear``), no bias.
* KDA kernels take FLA-style ``[B, T, H, K]`` tensors; with ``cu_seqlens``,
  ``B`` must be 1 and states are per sequence ``[N, H, K, V]`` (key-major:
  ``S[k, v]``).
* Everything is float64.  Inputs of other dtypes are converted.

Every function is written for clarity, not speed: Python loops over
sequences, tokens, heads and experts are intentional.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

f64 = np.float64


# ----------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------

def _a(x):
    return np.asarray(x, dtype=f64)


# The precision policy (docs/precision.md): with bf16 activations the
# compiled model stores every activation passed between kernels in bf16.
# model.forward turns this on for Config.activation_dtype == "bf16"; the
# layer functions round their kernels' outputs with act() at the same places.
_ACT_BF16 = False
# Whether a sequence that starts empty runs MLA in the expanded form (the
# compiler's k3-mla-expand, on by default), whose kv_b product is an
# activation; False models `mla-expand=0` (the latent form throughout).
_MLA_EXPANDED_PREFILL = True


class mla_latent_form:
    """Context manager: MLA in the latent form throughout (no rounding of
    the expanded keys and values), as with the compile option
    ``mla-expand=0``."""

    def __enter__(self):
        global _MLA_EXPANDED_PREFILL
        self.saved, _MLA_EXPANDED_PREFILL = _MLA_EXPANDED_PREFILL, False
        return self

    def __exit__(self, *exc):
        global _MLA_EXPANDED_PREFILL
        _MLA_EXPANDED_PREFILL = self.saved
        return False


def act(x):
    """An activation as stored between kernels: rounded to bf16 (round to
    nearest even, as the kernels' f32 -> bf16 store) under the bf16 policy,
    else unchanged."""
    if not _ACT_BF16:
        return x
    import ml_dtypes
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(f64)


def sigmoid(x):
    """Numerically stable logistic σ(x) = 1/(1+e^{-x}) in float64."""
    x = _a(x)
    return np.exp(-np.logaddexp(0.0, -x))


def softplus(x):
    """softplus(x) = log(1+e^x), stable."""
    return np.logaddexp(0.0, _a(x))


def silu(x):
    """SiLU / Swish: x·σ(x)."""
    x = _a(x)
    return x * sigmoid(x)


def seq_bounds(cu_seqlens, T: int):
    """List of (bos, eos) pairs for packed sequences; None -> [(0, T)]."""
    if cu_seqlens is None:
        return [(0, T)]
    cu = np.asarray(cu_seqlens, dtype=np.int64)
    if cu.ndim != 1 or cu[0] != 0 or cu[-1] != T or np.any(np.diff(cu) < 0):
        raise ValueError(f"bad cu_seqlens {cu} for T={T}")
    return [(int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]


def l2_normalize(x, eps: float = 1e-6):
    """x / sqrt(‖x‖² + eps) over the last axis (FLA ``l2norm``, eps 1e-6; K3-SPEC §2 step 4)."""
    x = _a(x)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


# ----------------------------------------------------------------------------
# basic ops
# ----------------------------------------------------------------------------

def embedding(ids, table):
    """Token embedding lookup, ``table[ids]`` with no scaling (K3-SPEC §7)."""
    return _a(table)[np.asarray(ids, dtype=np.int64)]


def last_tokens(x, cu_seqlens):
    """The row of each sequence's last token: ``x[cu[n+1] - 1]`` for
    ``x [T, D]`` and ``cu_seqlens [N+1]`` (k3.last_tokens); an empty
    sequence gives zeros."""
    x = np.asarray(x)
    cu = np.asarray(cu_seqlens, dtype=np.int64)
    out = np.zeros((len(cu) - 1,) + x.shape[1:], dtype=x.dtype)
    for n in range(len(cu) - 1):
        if cu[n + 1] > cu[n]:
            out[n] = x[cu[n + 1] - 1]
    return out


def rms_norm(x, w, eps):
    """RMSNorm over the last axis: w ⊙ x/√(mean(x²)+eps) (K3-SPEC header)."""
    x = _a(x)
    return _a(w) * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def partial_rms_norm(x, w, eps):
    """RMSNorm of the leading ``len(w)`` columns of the last axis, the others
    as they are (k3.partial_rms_norm: MLA's ``[c_kv | k_pe]``, of which only
    c_kv is normalised)."""
    x = _a(x)
    r = len(w)
    return np.concatenate([rms_norm(x[..., :r], w, eps), x[..., r:]], axis=-1)


def gated_rms_norm(o, gate, w, eps):
    """Per-head RMSNorm times σ(gate) (K3-SPEC §2 step 6; FLA FusedRMSNormGated, sigmoid).

    o, gate: ``[T, H, D]``; w: ``[D]`` shared by all heads.
    """
    return rms_norm(o, w, eps) * sigmoid(gate)


def linear(x, w):
    """y = x Wᵀ with W ``[out, in]`` (nn.Linear, no bias)."""
    return _a(x) @ _a(w).T


def linear_group(x, weights):
    """``[x W_iᵀ for W_i in weights]``: the linears of one input (k3.linear_group)."""
    return [linear(x, w) for w in weights]


def argmax_sample(logits):
    """Greedy sampling: argmax over the last axis (first index wins ties)."""
    return np.argmax(_a(logits), axis=-1)


# ----------------------------------------------------------------------------
# short convolution (K3-SPEC §2 step 1, §8)
# ----------------------------------------------------------------------------

def short_conv(x, w, conv_state=None, cu_seqlens=None, activation: str = "silu"):
    """Causal depthwise conv + SiLU (K3-SPEC §2 step 1).

    y_t[c] = SiLU(Σ_{j=0}^{K-1} w[c,0,j] · x_{t-(K-1)+j}[c]); positions before
    the start of a sequence read ``conv_state`` (zeros when None).

    x: ``[T, C]``; w: ``[C, 1, K]``; conv_state: ``[N, C, K-1]``, the last K-1
    *pre-conv* inputs of each sequence, oldest first.
    Returns ``(y [T, C], new_state [N, C, K-1])``.
    """
    x = _a(x)
    T, C = x.shape
    w = _a(w).reshape(C, 1, -1)  # accepts [C, K] or [C, 1, K]
    Kw = w.shape[-1]
    bounds = seq_bounds(cu_seqlens, T)
    N = len(bounds)
    if conv_state is None:
        conv_state = np.zeros((N, C, Kw - 1))
    conv_state = _a(conv_state)
    assert conv_state.shape == (N, C, Kw - 1), conv_state.shape
    y = np.zeros_like(x)
    new_state = np.zeros((N, C, Kw - 1))
    for n, (bos, eos) in enumerate(bounds):
        hist = np.concatenate([conv_state[n].T, x[bos:eos]], axis=0)  # [K-1+L, C]
        for t in range(eos - bos):
            acc = np.zeros(C)
            for j in range(Kw):
                acc += w[:, 0, j] * hist[t + j]
            y[bos + t] = acc
        new_state[n] = hist[hist.shape[0] - (Kw - 1):].T
    if activation == "silu":
        y = silu(y)
    elif activation is not None:
        raise ValueError(activation)
    return y, new_state


# ----------------------------------------------------------------------------
# KDA gates (K3-SPEC §2 step 2)
# ----------------------------------------------------------------------------

def kda_gate_lower_bounded(z, A_log, dt_bias, lower_bound):
    """K3 gate: g = lb·σ(exp(A_log[h])·(z + dt_bias)) (K3-SPEC §2 step 2; seed §5.4).

    z: ``[..., H, K]``; A_log: ``[>=H]`` (only the first H entries are used);
    dt_bias: ``[H*K]``.  Returns log-decay g ∈ (lb, 0).
    """
    z = _a(z)
    H, K = z.shape[-2:]
    a = np.exp(_a(A_log).reshape(-1)[:H])[:, None]
    return lower_bound * sigmoid(a * (z + _a(dt_bias).reshape(H, K)))


def kda_gate_softplus(z, A_log, dt_bias):
    """Kimi Linear gate: g = −exp(A_log[h])·softplus(z + dt_bias) (K3-SPEC §2 step 2, null lower bound)."""
    z = _a(z)
    H, K = z.shape[-2:]
    a = np.exp(_a(A_log).reshape(-1)[:H])[:, None]
    return -a * softplus(z + _a(dt_bias).reshape(H, K))


# ----------------------------------------------------------------------------
# KDA core: recurrence (K3-SPEC §2 step 5)
# ----------------------------------------------------------------------------

def _kda_prepare(q, k, v, g, beta, initial_state, cu_seqlens, use_qk_l2norm):
    q, k, v, g, beta = map(_a, (q, k, v, g, beta))
    B, T, H, K = q.shape
    V = v.shape[-1]
    assert k.shape == q.shape and g.shape == q.shape, (q.shape, k.shape, g.shape)
    assert v.shape == (B, T, H, V) and beta.shape == (B, T, H)
    if cu_seqlens is not None:
        assert B == 1, "cu_seqlens requires B == 1"
        bounds = [(0, b, e) for (b, e) in seq_bounds(cu_seqlens, T)]
    else:
        bounds = [(b, 0, T) for b in range(B)]
    N = len(bounds)
    if use_qk_l2norm:
        q = l2_normalize(q)
        k = l2_normalize(k)
    if initial_state is None:
        S0 = np.zeros((N, H, K, V))
    else:
        S0 = _a(initial_state)
        assert S0.shape == (N, H, K, V), (S0.shape, (N, H, K, V))
    return q, k, v, g, beta, S0, bounds


def kda_recurrent(q, k, v, g, beta, scale, initial_state=None, cu_seqlens=None,
                  use_qk_l2norm=False):
    """Naive token-by-token KDA recurrence (K3-SPEC §2 step 5; FLA ``naive_recurrent_kda``).

    Per head, S ∈ ℝ^{K×V}:
        S' = Diag(exp g_t) S;  u = β_t (v_t − S'ᵀ k_t);  S = S' + k_t uᵀ;  o_t = Sᵀ (q_t·scale).

    q, k, g: ``[B, T, H, K]`` (g is the log-decay); v: ``[B, T, H, V]``;
    beta: ``[B, T, H]``; initial_state: ``[N, H, K, V]``.
    With ``use_qk_l2norm`` q and k are first L2-normalised (eps 1e-6).
    Returns ``(o [B, T, H, V], final_state [N, H, K, V])``.
    """
    q, k, v, g, beta, S0, bounds = _kda_prepare(q, k, v, g, beta, initial_state,
                                                cu_seqlens, use_qk_l2norm)
    o = np.zeros(v.shape)
    ST = np.zeros_like(S0)
    for n, (b, bos, eos) in enumerate(bounds):
        S = S0[n].copy()  # [H, K, V]
        for t in range(bos, eos):
            S = np.exp(g[b, t])[:, :, None] * S
            pred = np.einsum("hkv,hk->hv", S, k[b, t])
            u = beta[b, t][:, None] * (v[b, t] - pred)
            S = S + k[b, t][:, :, None] * u[:, None, :]
            o[b, t] = np.einsum("hkv,hk->hv", S, q[b, t] * scale)
        ST[n] = S
    return o, ST


# ----------------------------------------------------------------------------
# triangular solves (seed §7.3, §8)
# ----------------------------------------------------------------------------

def tri_solve_forward(A_lower_unit, rhs):
    """Plain token-by-token forward substitution for unit-lower-triangular A."""
    A = _a(A_lower_unit)
    X = _a(rhs).copy()
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            X[i] = X[i] - A[i, j] * X[j]
    return X


def tri_solve_blocked(A_lower_unit, rhs, tile: int = 16):
    """Blocked forward substitution (seed §8).

    For each tile a: rhs_a ← rhs_a − Σ_{b<a} A[a,b] X_b (dense block products),
    then token-by-token forward substitution inside the diagonal tile.
    """
    A = _a(A_lower_unit)
    R = _a(rhs)
    n = A.shape[0]
    X = np.zeros_like(R)
    for s in range(0, n, tile):
        e = min(s + tile, n)
        r = R[s:e].copy()
        for bs in range(0, s, tile):
            be = min(bs + tile, n)
            r -= A[s:e, bs:be] @ X[bs:be]
        X[s:e] = tri_solve_forward(A[s:e, s:e], r)
    return X


def tri_inverse_block(A_lower_unit, tile: int = 16):
    """Inverse of a unit-lower-triangular matrix by inverting diagonal tiles and combining.

    Ai[a,a] = inv(A[a,a]) (forward substitution on the identity);
    Ai[a,b] = −Ai[a,a] · Σ_{b≤m<a} A[a,m] Ai[m,b]   (FLA's ``Ai10 = −Ai11·A10·Ai00``).
    """
    A = _a(A_lower_unit)
    n = A.shape[0]
    tiles = [(s, min(s + tile, n)) for s in range(0, n, tile)]
    Ai = np.zeros_like(A)
    for (s, e) in tiles:
        Ai[s:e, s:e] = tri_solve_forward(A[s:e, s:e], np.eye(e - s))
    for ia, (s, e) in enumerate(tiles):
        for ib in range(ia - 1, -1, -1):
            bs, be = tiles[ib]
            acc = np.zeros((e - s, be - bs))
            for im in range(ib, ia):
                ms, me = tiles[im]
                acc += A[s:e, ms:me] @ Ai[ms:me, bs:be]
            Ai[s:e, bs:be] = -Ai[s:e, s:e] @ acc
    return Ai


def tri_solve_block_inverse(A_lower_unit, rhs, tile: int = 16):
    """Solve A X = rhs through the blockwise inverse (``tri_inverse_block``)."""
    return tri_inverse_block(A_lower_unit, tile) @ _a(rhs)


# ----------------------------------------------------------------------------
# KDA chunkwise (seed §7, K3-SPEC §2 step 5)
# ----------------------------------------------------------------------------

def decayed_gram(X, Y, G, tile: int = 16, strict: bool = False):
    """A_ij = Σ_c X_ic Y_jc exp(G_ic − G_jc) for j ≤ i (j < i if ``strict``), 0 above.

    G is the in-chunk cumulative log-decay (non-increasing along i).  The
    exponent is never formed as γ_i·(1/γ_j) over the whole chunk:
    * diagonal tiles use the pairwise differences G_i − G_j (≤ 0 for j ≤ i);
    * an off-diagonal block (rows in tile a, cols in tile b < a) is factored
      through the last token r of tile b:
          exp(G_i − G_j) = exp(G_i − G_r) · exp(G_r − G_j),
      with G_i − G_r ≤ 0 and 0 ≤ G_r − G_j ≤ |lb|·(tile−1) (e^75 at lb = −5),
      so the block is one product (X_a ⊙ e^{G_a−G_r}) (Y_b ⊙ e^{G_r−G_b})ᵀ.
    """
    X, Y, G = _a(X), _a(Y), _a(G)
    n = X.shape[0]
    A = np.zeros((n, n))
    tiles = [(s, min(s + tile, n)) for s in range(0, n, tile)]
    for ia, (s, e) in enumerate(tiles):
        # diagonal tile, pairwise differences
        for i in range(s, e):
            jmax = i if strict else i + 1
            for j in range(s, jmax):
                A[i, j] = np.sum(X[i] * Y[j] * np.exp(G[i] - G[j]))
        for ib in range(ia):
            bs, be = tiles[ib]
            r = be - 1
            Xa = X[s:e] * np.exp(G[s:e] - G[r])
            Yb = Y[bs:be] * np.exp(G[r] - G[bs:be])
            A[s:e, bs:be] = Xa @ Yb.T
    return A


def kda_chunk_step(q, k, v, g, beta, S0, tile: int = 16, solver: str = "blocked"):
    """One chunk of the chunkwise KDA form for one head (seed §7.2–7.3).

    q, k, g: ``[C, K]`` (q already scaled); v: ``[C, V]``; beta: ``[C]``; S0: ``[K, V]``.
    G = cumsum(g);  L = StrictTril decayed KKᵀ;  (I+BL)U = BV;  (I+BL)W = B(K⊙e^G);
    Ṽ = U − W S0;  O = (Q⊙e^G) S0 + M Ṽ  (M = Tril decayed QKᵀ);
    S_C = Diag(e^{G_C}) S0 + (K⊙e^{G_C−G})ᵀ Ṽ.
    Returns ``(O [C, V], S_C [K, V], U, W)``.
    """
    G = np.cumsum(g, axis=0)
    C = q.shape[0]
    L = decayed_gram(k, k, G, tile, strict=True)
    A = np.eye(C) + beta[:, None] * L
    rhs_u = beta[:, None] * v
    rhs_w = beta[:, None] * (k * np.exp(G))
    solve = {"blocked": tri_solve_blocked, "inverse": tri_solve_block_inverse}[solver]
    U = solve(A, rhs_u, tile)
    W = solve(A, rhs_w, tile)
    Vt = U - W @ S0
    M = decayed_gram(q, k, G, tile, strict=False)
    O = (q * np.exp(G)) @ S0 + M @ Vt
    GC = G[-1]
    S = np.exp(GC)[:, None] * S0 + (k * np.exp(GC[None, :] - G)).T @ Vt
    return O, S, U, W


def kda_chunkwise(q, k, v, g, beta, scale, initial_state=None, cu_seqlens=None,
                  use_qk_l2norm=False, chunk_size: int = 64, tile_size: int = 16,
                  solver: str = "blocked"):
    """Chunkwise-parallel KDA (seed §7, §8); same contract as ``kda_recurrent``.

    Each sequence is cut into chunks of ``chunk_size`` tokens (the last may be
    shorter); inside a chunk the UT-transform triangular system is solved over
    ``tile_size`` tiles (``solver='blocked'``: blocked forward substitution;
    ``'inverse'``: blockwise inverse).  Chunks are chained through the state.
    """
    q, k, v, g, beta, S0, bounds = _kda_prepare(q, k, v, g, beta, initial_state,
                                                cu_seqlens, use_qk_l2norm)
    H = q.shape[2]
    o = np.zeros(v.shape)
    ST = np.zeros_like(S0)
    for n, (b, bos, eos) in enumerate(bounds):
        for h in range(H):
            S = S0[n, h].copy()
            for cs in range(bos, eos, chunk_size):
                ce = min(cs + chunk_size, eos)
                O, S, _, _ = kda_chunk_step(q[b, cs:ce, h] * scale, k[b, cs:ce, h],
                                            v[b, cs:ce, h], g[b, cs:ce, h],
                                            beta[b, cs:ce, h], S, tile_size, solver)
                o[b, cs:ce, h] = O
            ST[n, h] = S
    return o, ST


def kda_segment_transition(k, g, beta):
    """Transition of one segment for one head: S_end = A S_start + b needs A.

    A = Π_t (I − β_t k_t k_tᵀ) Diag(exp g_t) (later tokens on the left); K×K.
    """
    Kd = k.shape[1]
    A = np.eye(Kd)
    for t in range(k.shape[0]):
        A = (np.eye(Kd) - beta[t] * np.outer(k[t], k[t])) @ (np.exp(g[t])[:, None] * A)
    return A


def kda_segment_scan(q, k, v, g, beta, scale, initial_state=None, cu_seqlens=None,
                     use_qk_l2norm=False, num_segments: int = 4):
    """Sequence-parallel (state-passing) KDA: the algebra of KDA context parallelism.

    Each sequence is split into ``num_segments`` contiguous segments.  Phase 1
    (independent per segment): the transition A_s (K×K, ``kda_segment_transition``)
    and the zero-start end state b_s (K×V), so that S_end = A_s S_start + b_s.
    Phase 2: a short serial scan S_{s+1} = A_s S_s + b_s over segment starts.
    Phase 3 (independent per segment): outputs by the recurrence from the
    scanned start state.  Same contract as ``kda_recurrent``.
    """
    q, k, v, g, beta, S0, bounds = _kda_prepare(q, k, v, g, beta, initial_state,
                                                cu_seqlens, use_qk_l2norm)
    H, K = q.shape[2], q.shape[3]
    V = v.shape[-1]
    o = np.zeros(v.shape)
    ST = np.zeros_like(S0)
    for n, (b, bos, eos) in enumerate(bounds):
        L = eos - bos
        edges = [bos + (L * s) // num_segments for s in range(num_segments + 1)]
        segs = [(edges[s], edges[s + 1]) for s in range(num_segments)]
        for h in range(H):
            # phase 1: per-segment transitions, independent
            trans = []
            for (s, e) in segs:
                A = kda_segment_transition(k[b, s:e, h], g[b, s:e, h], beta[b, s:e, h])
                _, bS = kda_recurrent(q[b:b + 1, s:e, h:h + 1], k[b:b + 1, s:e, h:h + 1],
                                      v[b:b + 1, s:e, h:h + 1], g[b:b + 1, s:e, h:h + 1],
                                      beta[b:b + 1, s:e, h:h + 1], scale)
                trans.append((A, bS[0, 0]))
            # phase 2: scan
            starts = [S0[n, h]]
            for (A, bS) in trans:
                starts.append(A @ starts[-1] + bS)
            ST[n, h] = starts[-1]
            # phase 3: outputs, independent per segment
            for si, (s, e) in enumerate(segs):
                if e == s:
                    continue
                oo, _ = kda_recurrent(q[b:b + 1, s:e, h:h + 1], k[b:b + 1, s:e, h:h + 1],
                                      v[b:b + 1, s:e, h:h + 1], g[b:b + 1, s:e, h:h + 1],
                                      beta[b:b + 1, s:e, h:h + 1], scale,
                                      initial_state=starts[si].reshape(1, 1, K, V))
                o[b, s:e, h] = oo[0, :, 0]
    return o, ST


# ----------------------------------------------------------------------------
# softmax attention and MLA (K3-SPEC §3, §8)
# ----------------------------------------------------------------------------

def _softmax(x, axis=-1):
    x = _a(x)
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def causal_attention(q, k, v, scale, cu_seqlens=None):
    """Plain causal softmax attention per packed sequence.

    q, k: ``[T, H, Dqk]``; v: ``[T, H, Dv]``.  Returns ``[T, H, Dv]``.
    """
    q, k, v = _a(q), _a(k), _a(v)
    T, H, _ = q.shape
    o = np.zeros((T, H, v.shape[-1]))
    for (bos, eos) in seq_bounds(cu_seqlens, T):
        for h in range(H):
            for t in range(bos, eos):
                s = (k[bos:t + 1, h] @ q[t, h]) * scale
                p = _softmax(s)
                o[t, h] = p @ v[bos:t + 1, h]
    return o


def mla_decompress(latent, kv_b, num_heads, qk_nope, qk_rope, v_head, kv_lora_rank):
    """Expand cached latents [L, r+rope] into per-head K [L,H,nope+rope] and V [L,H,v]."""
    latent = _a(latent)
    c = latent[:, :kv_lora_rank]
    k_pe = latent[:, kv_lora_rank:kv_lora_rank + qk_rope]
    kv = (c @ _a(kv_b).T).reshape(latent.shape[0], num_heads, qk_nope + v_head)
    k_nope, v = kv[..., :qk_nope], kv[..., qk_nope:]
    k = np.concatenate([k_nope, np.broadcast_to(k_pe[:, None, :],
                                                (latent.shape[0], num_heads, qk_rope))], axis=-1)
    return k, v


def mla_prefill_attention(q, kv, latent, qk_nope, qk_rope, v_head, scale, gate=None,
                          cu_seqlens=None):
    """``k3.mla_prefill_attention`` (dialects/K3/K3MLAOps.td): MLA attention on
    keys and values already expanded through kv_b, for sequences that start
    empty.

    q: ``[T, H, qk_nope+qk_rope]`` ([q_nope | q_pe] per head); kv: ``[T, H,
    qk_nope+v_head]`` ([k_nope | v] per head); latent: ``[T, W]`` whose last
    ``qk_rope`` columns are the un-rotated k_pe shared by all heads; gate:
    None or ``[T, H*v_head]``.  Key s of head h is ``[kv[s, h, :qk_nope] |
    latent[s, W-qk_rope:]]``, its value ``kv[s, h, qk_nope:]``; token t
    attends causally within its sequence; with a gate the output is
    multiplied by sigmoid(gate).  Returns ``o [T, H, v_head]``.
    """
    q, kv, latent = _a(q), _a(kv), _a(latent)
    T, H, _ = q.shape
    W = latent.shape[1]
    o = np.zeros((T, H, v_head))
    for (bos, eos) in seq_bounds(cu_seqlens, T):
        for h in range(H):
            for t in range(bos, eos):
                k = np.concatenate([kv[bos:t + 1, h, :qk_nope], latent[bos:t + 1, W - qk_rope:]],
                                   axis=1)
                v = kv[bos:t + 1, h, qk_nope:]
                p = _softmax((k @ q[t, h]) * scale)
                o[t, h] = p @ v
    if gate is not None:
        o = o * sigmoid(_a(gate)).reshape(T, H, v_head)
    return o


def _cache_list(latent_cache, cache_lens, N, width):
    if latent_cache is None:
        return [np.zeros((0, width)) for _ in range(N)]
    if isinstance(latent_cache, np.ndarray) and latent_cache.ndim == 3:
        lens = cache_lens if cache_lens is not None else [latent_cache.shape[1]] * N
        return [_a(latent_cache[n, :int(lens[n])]) for n in range(N)]
    cl = [_a(c).reshape(-1, width) for c in latent_cache]
    assert len(cl) == N
    return cl


def latent_attention(q, latent, kv_b, num_heads, qk_nope, qk_rope, v_head, kv_lora_rank,
                     scale, latent_cache=None, cache_lens=None, cu_seqlens=None):
    """MLA core on the latent form (K3-SPEC §3, §8), NoPE.

    q: ``[T, H, qk_nope+qk_rope]``; latent: ``[T, kv_lora_rank+qk_rope]`` =
    [kv_a_layernorm(c_kv) | raw k_pe]; kv_b: ``[H*(qk_nope+v_head), kv_lora_rank]``.
    Head h uses k_h = [k_nope_h | k_pe] (k_pe shared) and v_h.  Token t of
    sequence n attends causally to the cached prefix of n plus its own prefix.
    latent_cache: None, a list of N arrays ``[L_n, r+rope]``, or a padded array
    ``[N, Lmax, r+rope]`` with ``cache_lens``.
    Returns ``(o [T, H, v_head], new_cache)`` where new_cache is a list of N
    arrays ``[L_n + T_n, r+rope]``.
    """
    q, latent = _a(q), _a(latent)
    T = q.shape[0]
    width = kv_lora_rank + qk_rope
    bounds = seq_bounds(cu_seqlens, T)
    caches = _cache_list(latent_cache, cache_lens, len(bounds), width)
    o = np.zeros((T, num_heads, v_head))
    new_cache = []
    for n, (bos, eos) in enumerate(bounds):
        full = np.concatenate([caches[n], latent[bos:eos]], axis=0)
        P = caches[n].shape[0]
        k, v = mla_decompress(full, kv_b, num_heads, qk_nope, qk_rope, v_head, kv_lora_rank)
        if P == 0 and _MLA_EXPANDED_PREFILL:
            # A sequence that starts here runs in the expanded form
            # (k3-mla-expand), whose kv_b product is an activation: stored
            # in bf16 under the bf16 policy.
            k = np.concatenate([act(k[..., :qk_nope]), k[..., qk_nope:]], axis=-1)
            v = act(v)
        for h in range(num_heads):
            for t in range(bos, eos):
                last = P + (t - bos)
                s = (k[:last + 1, h] @ q[t, h]) * scale
                o[t, h] = _softmax(s) @ v[:last + 1, h]
        new_cache.append(full)
    return o, new_cache


def latent_attention_absorbed(q, latent, kv_b, num_heads, qk_nope, qk_rope, v_head, kv_lora_rank,
                              scale, latent_cache=None, cache_lens=None, cu_seqlens=None):
    """MLA core in the absorbed (decode) form (K3-SPEC §8); same contract as ``latent_attention``.

    With W_uk_h, W_uv_h the k_nope / v rows of head h in ``kv_b``:
    score = (W_uk_hᵀ q_nope_h)·c + q_pe_h·k_pe;  o_h = W_uv_h (Σ_j p_j c_j).
    Attention runs over the 512+64 latent directly, never expanding K/V.
    """
    q, latent = _a(q), _a(latent)
    T = q.shape[0]
    width = kv_lora_rank + qk_rope
    bounds = seq_bounds(cu_seqlens, T)
    caches = _cache_list(latent_cache, cache_lens, len(bounds), width)
    kvb = _a(kv_b).reshape(num_heads, qk_nope + v_head, kv_lora_rank)
    o = np.zeros((T, num_heads, v_head))
    new_cache = []
    for n, (bos, eos) in enumerate(bounds):
        full = np.concatenate([caches[n], latent[bos:eos]], axis=0)
        P = caches[n].shape[0]
        c, kpe = full[:, :kv_lora_rank], full[:, kv_lora_rank:]
        for h in range(num_heads):
            w_uk, w_uv = kvb[h, :qk_nope], kvb[h, qk_nope:]
            for t in range(bos, eos):
                last = P + (t - bos)
                q_lat = w_uk.T @ q[t, h, :qk_nope]
                s = (c[:last + 1] @ q_lat + kpe[:last + 1] @ q[t, h, qk_nope:]) * scale
                o[t, h] = w_uv @ (_softmax(s) @ c[:last + 1])
        new_cache.append(full)
    return o, new_cache


def gated_mla(x, w, cfg, cu_seqlens=None, latent_cache=None, cache_lens=None):
    """Gated MLA layer (K3-SPEC §3).

    ``w`` holds the layer's tensors by their short names (``q_a_proj``,
    ``q_a_layernorm``, ``q_b_proj`` or ``q_proj``, ``kv_a_proj_with_mqa``,
    ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``, optional ``g_proj``); each
    maps to the weight array.  ``cfg`` provides num_attention_heads,
    q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim,
    mla_use_output_gate.  The q_a/kv_a norms use eps 1e-6 (KimiRMSNorm default).
    Returns ``(y [T, D], new_cache)``.
    """
    x = _a(x)
    T = x.shape[0]
    H = cfg.num_attention_heads
    nope, rope, vd, r = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    if cfg.q_lora_rank is not None:
        cq = act(rms_norm(act(linear(x, w["q_a_proj"])), w["q_a_layernorm"], 1e-6))
        qf = act(linear(cq, w["q_b_proj"]))
    else:
        qf = act(linear(x, w["q_proj"]))
    q = qf.reshape(T, H, nope + rope)
    ckv = act(linear(x, w["kv_a_proj_with_mqa"]))
    latent = np.concatenate([act(rms_norm(ckv[:, :r], w["kv_a_layernorm"], 1e-6)),
                             ckv[:, r:r + rope]], axis=-1)
    o, cache = latent_attention(q, latent, w["kv_b_proj"], H, nope, rope, vd, r,
                                (nope + rope) ** -0.5, latent_cache, cache_lens, cu_seqlens)
    o = o.reshape(T, H * vd)
    # The expanded prefill (k3-mla-expand) applies the gate in the
    # attention's write: o is stored once, gated.
    fresh = cache_lens is None or not np.any(np.asarray(cache_lens))
    if latent_cache is not None and cache_lens is None and isinstance(latent_cache, list):
        fresh = all(len(c) == 0 for c in latent_cache)
    if not (cfg.mla_use_output_gate and _MLA_EXPANDED_PREFILL and fresh):
        o = act(o)
    if cfg.mla_use_output_gate:
        o = act(o * sigmoid(act(linear(x, w["g_proj"]))))
    return act(linear(o, w["o_proj"])), cache


# ----------------------------------------------------------------------------
# KDA layer (K3-SPEC §2)
# ----------------------------------------------------------------------------

def kda_layer(x, w, cfg, cu_seqlens=None, state=None, core: str = "recurrent", dumps=None):
    """Full KDA layer (K3-SPEC §2 steps 1–7).

    ``w``: short names (``q_proj, k_proj, v_proj, q_conv1d, k_conv1d, v_conv1d,
    f_a_proj, f_b_proj, A_log, dt_bias, b_proj, g_proj`` or ``g_a_proj/g_b_proj``,
    ``o_norm, o_proj``).  ``cfg`` provides kda_num_heads, kda_head_dim,
    gate_lower_bound, use_full_rank_gate, rms_norm_eps.
    ``state``: None or dict(conv_q, conv_k, conv_v [N, C, K-1], recurrent [N, H, K, V]).
    ``core``: 'recurrent' | 'chunk' | 'segment'.
    Returns ``(y [T, D], new_state)``.
    """
    x = _a(x)
    T = x.shape[0]
    H, d = cfg.kda_num_heads, cfg.kda_head_dim
    st = state or {}
    qc, sq = short_conv(act(linear(x, w["q_proj"])), w["q_conv1d"], st.get("conv_q"), cu_seqlens)
    kc, sk = short_conv(act(linear(x, w["k_proj"])), w["k_conv1d"], st.get("conv_k"), cu_seqlens)
    vc, sv = short_conv(act(linear(x, w["v_proj"])), w["v_conv1d"], st.get("conv_v"), cu_seqlens)
    qc, kc, vc = act(qc), act(kc), act(vc)
    if getattr(cfg, "kda_operand_dtype", None) == "bf16":
        import ml_dtypes
        qc, kc, vc = (a.astype(ml_dtypes.bfloat16).astype(np.float64) for a in (qc, kc, vc))
    f = act(linear(act(linear(x, w["f_a_proj"])), w["f_b_proj"])).reshape(T, H, d)
    if cfg.gate_lower_bound is not None:
        g = kda_gate_lower_bounded(f, w["A_log"], w["dt_bias"], cfg.gate_lower_bound)
    else:
        g = kda_gate_softplus(f, w["A_log"], w["dt_bias"])
    beta = sigmoid(act(linear(x, w["b_proj"])))
    fn = {"recurrent": kda_recurrent, "chunk": kda_chunkwise, "segment": kda_segment_scan}[core]
    o, S = fn(qc.reshape(1, T, H, d), kc.reshape(1, T, H, d), vc.reshape(1, T, H, d),
              g[None], beta[None], d ** -0.5, initial_state=st.get("recurrent"),
              cu_seqlens=cu_seqlens if cu_seqlens is not None else np.array([0, T]),
              use_qk_l2norm=True)
    o = act(o[0])
    if cfg.use_full_rank_gate:
        z = act(linear(x, w["g_proj"]))
    else:
        z = act(linear(act(linear(x, w["g_a_proj"])), w["g_b_proj"]))
    on = act(gated_rms_norm(o, z.reshape(T, H, d), w["o_norm"], cfg.rms_norm_eps))
    if dumps is not None:
        dumps.update(q=qc, k=kc, v=vc, g=g, beta=beta, core_out=o, gated=on)
    y = act(linear(on.reshape(T, H * d), w["o_proj"]))
    if getattr(cfg, "kda_state_dtype", None) == "bf16":
        # The recurrent state stored in bf16 between calls (k3-compile
        # kda-state-dtype=bf16): rounded once, where the call ends.
        import ml_dtypes
        S = S.astype(ml_dtypes.bfloat16).astype(np.float64)
    return y, dict(conv_q=sq, conv_k=sk, conv_v=sv, recurrent=S)


# ----------------------------------------------------------------------------
# MLP / activations (K3-SPEC §4)
# ----------------------------------------------------------------------------

def silu_glu(gate, up):
    """SwiGLU: SiLU(gate) · up (Kimi Linear ``hidden_act = 'silu'``)."""
    return silu(gate) * _a(up)


def situ_glu(gate, up, beta=4.0, linear_beta=25.0):
    """SiTU-GLU (K3-SPEC §4): β·tanh(gate/β)·σ(gate) · β_lin·tanh(up/β_lin).

    ``linear_beta=None`` skips the soft cap on ``up``.
    """
    gate, up = _a(gate), _a(up)
    a = beta * np.tanh(gate / beta) * sigmoid(gate)
    if linear_beta is not None:
        up = linear_beta * np.tanh(up / linear_beta)
    return a * up


def _act(gate, up, activation, beta, linear_beta):
    if activation == "situ":
        return situ_glu(gate, up, beta if beta is not None else 1.0, linear_beta)
    if activation == "silu":
        return silu_glu(gate, up)
    raise ValueError(activation)


def glu_mlp(x, w_gate, w_up, w_down, activation="silu", beta=None, linear_beta=None):
    """MLP(x) = W_down · act(W_gate x, W_up x) (K3-SPEC §4). The activated h
    is stored between the two GEMMs: an activation (rounded under bf16)."""
    h = act(_act(linear(x, w_gate), linear(x, w_up), activation, beta, linear_beta))
    return linear(h, w_down)


# ----------------------------------------------------------------------------
# MoE (K3-SPEC §5)
# ----------------------------------------------------------------------------

def moe_router(x, w_router, bias, top_k, score_func="sigmoid", renormalize=True,
               routed_scaling_factor=1.0, forced_indices=None, n_group=1, topk_group=1):
    """Router (K3-SPEC §5; HF ``KimiMoEGate``).

    logits = x W_rᵀ, then :func:`moe_topk`.  Returns ``(indices [T, k]
    int64, weights [T, k])``.
    """
    return moe_topk(linear(x, w_router), bias, top_k, score_func, renormalize,
                    routed_scaling_factor, forced_indices, n_group, topk_group)


def group_limit(choice, n_group, topk_group, with_bias):
    """Group-limited routing's mask (DeepSeek-V3 ``noaux_tc``; Kimi's
    ``KimiMoEGate``, transformers' ``KimiLinearTopkRouter``, vLLM's
    ``grouped_topk``): the E experts form ``n_group`` contiguous groups of
    E / n_group; a group scores the sum of its two best choice scores with a
    correction bias, its best one without (vLLM's rule; Kimi's gates always
    have a bias); the ``topk_group`` best groups are kept, ties to the lower
    group id. Returns ``choice`` with the other groups' experts at -inf (as
    vLLM and both Kimi gates mask: never chosen while a kept expert is left).
    ``topk_group >= n_group`` keeps every group: ``choice`` unchanged.
    """
    choice = _a(choice)
    if n_group <= 1 or topk_group >= n_group:
        return choice
    T, E = choice.shape
    assert E % n_group == 0, (E, n_group)
    groups = choice.reshape(T, n_group, E // n_group)
    ranked = np.sort(groups, axis=-1)[..., ::-1]
    group_score = ranked[..., 0] + ranked[..., 1] if with_bias else ranked[..., 0]
    kept = np.argsort(-group_score, axis=-1, kind="stable")[:, :topk_group]
    keep = np.zeros((T, n_group), dtype=bool)
    np.put_along_axis(keep, kept, True, axis=-1)
    return np.where(np.repeat(keep, E // n_group, axis=-1), choice, -np.inf)


def moe_topk(logits, bias, top_k, score_func="sigmoid", renormalize=True,
             routed_scaling_factor=1.0, forced_indices=None, n_group=1, topk_group=1):
    """The router's selection from its logits (``k3.moe_topk``).

    s = σ(logits) or softmax(logits); choose the top-k of s + bias (bias may
    be None; it affects only the choice) among the experts that
    :func:`group_limit` keeps (all of them when ``n_group`` is 1);
    weights = s[idx], renormalised w/(Σw + 1e-20) when ``renormalize`` and
    top_k > 1, then × routed_scaling_factor.  Ties break towards the lower
    expert index; indices come out in descending order of the choice score.
    ``forced_indices`` ``[T, k]`` skips the choice (so tests can use the
    runtime's selection).  Returns ``(indices [T, k] int64, weights [T, k])``.
    """
    logits = _a(logits)
    if score_func == "sigmoid":
        s = sigmoid(logits)
    elif score_func == "softmax":
        s = _softmax(logits, axis=-1)
    else:
        raise ValueError(score_func)
    choice = s + (_a(bias)[None, :] if bias is not None else 0.0)
    choice = group_limit(choice, n_group, topk_group, bias is not None)
    if forced_indices is None:
        idx = np.argsort(-choice, axis=-1, kind="stable")[:, :top_k]
    else:
        idx = np.asarray(forced_indices, dtype=np.int64)
    wts = np.take_along_axis(s, idx, axis=-1)
    if renormalize and top_k > 1:
        wts = wts / (np.sum(wts, axis=-1, keepdims=True) + 1e-20)
    return idx.astype(np.int64), wts * routed_scaling_factor


def moe_experts(x, indices, weights, w1, w3, w2, activation="silu", beta=None, linear_beta=None):
    """Routed experts, per-token loop: Σ_k act(w_k · W2[e_k] act(W1[e_k] x, W3[e_k] x)).

    w1, w3: ``[E, I, D]`` (or list of [I, D]); w2: ``[E, D, I]``.
    """
    x = _a(x)
    out = np.zeros((x.shape[0], np.shape(w2[0])[0]))
    for t in range(x.shape[0]):
        for e, wt in zip(indices[t], weights[t]):
            e = int(e)
            if not 0 <= e < len(w1):
                continue  # another rank's expert (moe_local_ids): adds nothing
            # Each weighted expert row is stored as an activation (the
            # grouped down GEMM's rows), then summed in slot order.
            out[t] += act(wt * glu_mlp(x[t:t + 1], w1[e], w3[e], w2[e],
                                       activation, beta, linear_beta)[0])
    return out


def moe_local_ids(indices, rank, experts_per_rank):
    """Expert parallelism: rank ``rank`` holds experts ``[rank n, (rank + 1)
    n)``, n = experts_per_rank. Ids relative to them, -1 for the others."""
    local = np.asarray(indices, dtype=np.int64) - int(rank) * experts_per_rank
    return np.where((local >= 0) & (local < experts_per_rank), local, -1).astype(np.int32)


def moe_bucket(x, indices, weights, ranks, experts_per_rank, capacity):
    """Expert parallelism over ranks that own different tokens
    (``k3.moe_bucket``): pairs in token-then-choice order fill the bucket
    of the rank holding their expert. Returns ``rows [G, C, D]``, ``ids [G,
    C, 1]`` (the expert on that rank, -1 past the bucket's pairs),
    ``row_weights [G, C, 1]`` and ``slots [T, K]`` (``g C + s``)."""
    x = np.asarray(x, dtype=np.float64)
    T, K = np.asarray(indices).shape
    rows = np.zeros((ranks, capacity, x.shape[1]))
    ids = np.full((ranks, capacity, 1), -1, dtype=np.int32)
    rw = np.zeros((ranks, capacity, 1))
    slots = np.zeros((T, K), dtype=np.int32)
    used = [0] * ranks
    for t in range(T):
        for j in range(K):
            e = int(indices[t, j])
            g, s = e // experts_per_rank, used[e // experts_per_rank]
            assert s < capacity, "bucket overflow"
            rows[g, s], ids[g, s, 0], rw[g, s, 0] = x[t], e % experts_per_rank, weights[t, j]
            slots[t, j] = g * capacity + s
            used[g] += 1
    return rows, ids, rw, slots


def moe_unbucket(returned, slots):
    """``k3.moe_unbucket``: each token's rows back from the buckets, summed in
    choice order."""
    flat = np.asarray(returned, dtype=np.float64).reshape(-1, returned.shape[-1])
    out = np.zeros((slots.shape[0], flat.shape[1]))
    for j in range(slots.shape[1]):
        out += flat[slots[:, j]]
    return out


def latent_moe(x, w, cfg, forced_indices=None):
    """Latent routed MoE without the shared experts (K3-SPEC §5).

    Routing uses the full-width x; ℓ = W_down x; r = Σ_k w_k E_k(ℓ);
    r = RMSNorm_eps(r; routed_expert_norm) if latent_moe_use_norm; out = W_up r.
    Returns ``(out, indices, weights)``.
    """
    idx, wts = moe_router(x, w["gate.weight"], w.get("gate.e_score_correction_bias"),
                          cfg.num_experts_per_token, cfg.moe_router_activation_func,
                          cfg.moe_renormalize, cfg.routed_scaling_factor, forced_indices,
                          getattr(cfg, "num_expert_group", 1), getattr(cfg, "topk_group", 1))
    ell = act(linear(x, w["routed_expert_down_proj.weight"]))
    r = act(moe_experts(ell, idx, wts, w["w1"], w["w3"], w["w2"], cfg.hidden_act,
                        cfg.activation_situ_beta, cfg.activation_situ_linear_beta))
    if cfg.latent_moe_use_norm:
        r = act(rms_norm(r, w["routed_expert_norm.weight"], cfg.rms_norm_eps))
    return act(linear(r, w["routed_expert_up_proj.weight"])), idx, wts


def moe_block(x, w, cfg, forced_indices=None):
    """MoE block (K3-SPEC §5; HF ``KimiSparseMoeBlock``).

    ``w``: dict with ``gate.weight``, optional ``gate.e_score_correction_bias``,
    ``w1``/``w3`` ``[E, I, Dm]``, ``w2`` ``[E, Dm, I]`` (stacked experts),
    and for the latent form ``routed_expert_down_proj.weight``,
    ``routed_expert_up_proj.weight``, ``routed_expert_norm.weight``; shared
    experts ``shared_experts.{gate,up,down}_proj.weight`` (acting on full-width x).
    Full-width experts (Kimi Linear) when cfg.routed_expert_hidden_size is None.
    Returns ``(y, indices, weights)``.
    """
    x = _a(x)
    if cfg.routed_expert_hidden_size is not None:
        y, idx, wts = latent_moe(x, w, cfg, forced_indices)
    else:
        idx, wts = moe_router(x, w["gate.weight"], w.get("gate.e_score_correction_bias"),
                              cfg.num_experts_per_token, cfg.moe_router_activation_func,
                              cfg.moe_renormalize, cfg.routed_scaling_factor, forced_indices,
                              getattr(cfg, "num_expert_group", 1), getattr(cfg, "topk_group", 1))
        y = act(moe_experts(x, idx, wts, w["w1"], w["w3"], w["w2"], cfg.hidden_act,
                            cfg.activation_situ_beta, cfg.activation_situ_linear_beta))
    if cfg.num_shared_experts:
        y = act(y + act(glu_mlp(x, w["shared_experts.gate_proj.weight"],
                                w["shared_experts.up_proj.weight"],
                                w["shared_experts.down_proj.weight"], cfg.hidden_act,
                                cfg.activation_situ_beta, cfg.activation_situ_linear_beta)))
    return y, idx, wts


# ----------------------------------------------------------------------------
# Block AttnRes (K3-SPEC §6, §7)
# ----------------------------------------------------------------------------

def attn_res_mix(blocks, partial, norm_w, proj_w, eps=1e-5):
    """AttnRes mix over sources [b_0 … b_{n-1}, partial] (K3-SPEC §6; HF ``_apply_attn_res``).

    ℓ_i = ⟨v_i/√(mean(v_i²)+eps), norm_w ⊙ proj_w⟩ per token; p = softmax_i(ℓ);
    out = Σ_i p_i v_i.  blocks: list or array ``[n, T, D]`` (n may be 0);
    partial: ``[T, D]``; proj_w: ``[1, D]`` or ``[D]``.
    """
    srcs = [_a(b) for b in blocks] + [_a(partial)]
    Vs = np.stack(srcs, axis=0)  # [n+1, T, D]
    kn = Vs / np.sqrt(np.mean(Vs * Vs, axis=-1, keepdims=True) + eps)
    wv = _a(norm_w) * _a(proj_w).reshape(-1)
    logits = np.einsum("ntd,d->nt", kn, wv)
    p = _softmax(logits, axis=0)
    return np.einsum("nt,ntd->td", p, Vs)


class AttnResState:
    """Block AttnRes bookkeeping (K3-SPEC §6–§7): B = completed blocks, P = running partial sum.

    Layer i:  x = mix(B∪{P}) if B else P;  if i % block_size == 0: B.append(P), P = 0;
              P += attn;  y = mix(B∪{P});  P += ffn.   Final: mix(B∪{P}).
    """

    def __init__(self, embed, block_size):
        self.blocks = []
        self.partial = _a(embed)
        self.block_size = block_size

    def pre_attn(self, i, norm_w, proj_w, eps):
        x = self.partial if not self.blocks else act(attn_res_mix(self.blocks, self.partial,
                                                                  norm_w, proj_w, eps))
        if i % self.block_size == 0:
            self.blocks.append(self.partial)
            self.partial = None
        return x

    def add(self, out):
        self.partial = out if self.partial is None else act(self.partial + out)

    def mix(self, norm_w, proj_w, eps):
        return act(attn_res_mix(self.blocks, self.partial, norm_w, proj_w, eps))
