"""Softmax attention and the MLA latent form (K3-SPEC §3, §8)."""
import numpy as np
import pytest

from k3ref import ops
from k3ref_testutil import rel_err

H, NOPE, ROPE, VD, R = 3, 8, 4, 6, 10


def mla_inputs(rng, T):
    q = rng.standard_normal((T, H, NOPE + ROPE))
    latent = rng.standard_normal((T, R + ROPE))
    kv_b = rng.standard_normal((H * (NOPE + VD), R)) / np.sqrt(R)
    return q, latent, kv_b


def test_causal_attention_hand_values():
    # one head, two tokens; token 1 attends to both with softmax weights
    q = np.array([[[1.0]], [[2.0]]])
    k = np.array([[[0.5]], [[1.0]]])
    v = np.array([[[3.0]], [[5.0]]])
    o = ops.causal_attention(q, k, v, 1.0)
    assert o[0, 0, 0] == pytest.approx(3.0)
    p1 = np.exp(2.0 * 0.5) / (np.exp(1.0) + np.exp(2.0))
    assert o[1, 0, 0] == pytest.approx(p1 * 3.0 + (1 - p1) * 5.0, rel=1e-14)


def test_latent_equals_decompressed_causal_attention():
    rng = np.random.default_rng(0)
    T = 11
    q, latent, kv_b = mla_inputs(rng, T)
    cu = np.array([0, 4, 11])
    scale = (NOPE + ROPE) ** -0.5
    o, cache = ops.latent_attention(q, latent, kv_b, H, NOPE, ROPE, VD, R, scale, cu_seqlens=cu)
    # explicit decompression, written independently of mla_decompress
    kv = (latent[:, :R] @ kv_b.T).reshape(T, H, NOPE + VD)
    k = np.concatenate([kv[..., :NOPE], np.repeat(latent[:, None, R:], H, axis=1)], axis=-1)
    v = kv[..., NOPE:]
    ref = ops.causal_attention(q, k, v, scale, cu)
    assert rel_err(o, ref) < 1e-12
    assert [c.shape for c in cache] == [(4, R + ROPE), (7, R + ROPE)]
    # the k_pe part is shared across heads: perturbing it changes every head
    lat2 = latent.copy()
    lat2[0, R:] += 1.0
    o2, _ = ops.latent_attention(q, lat2, kv_b, H, NOPE, ROPE, VD, R, scale, cu_seqlens=cu)
    assert all(not np.allclose(o2[1, h], o[1, h]) for h in range(H))


@pytest.mark.parametrize("padded", [False, True])
def test_latent_attention_cache_equals_concatenation(padded):
    rng = np.random.default_rng(1)
    scale = 0.37
    lens_pre, lens_new = [5, 2], [3, 1]
    seqs = [mla_inputs(rng, a + b)[:2] for a, b in zip(lens_pre, lens_new)]
    kv_b = rng.standard_normal((H * (NOPE + VD), R))
    full = [ops.latent_attention(q, lat, kv_b, H, NOPE, ROPE, VD, R, scale)[0] for q, lat in seqs]
    cache = [lat[:a] for (q, lat), a in zip(seqs, lens_pre)]
    if padded:
        arr = np.zeros((2, 8, R + ROPE))
        for n, c in enumerate(cache):
            arr[n, :len(c)] = c
        arr[1, len(cache[1]):] = 99.0          # garbage past cache_lens must be ignored
        cache_arg, lens_arg = arr, lens_pre
    else:
        cache_arg, lens_arg = cache, None
    q_new = np.concatenate([q[a:] for (q, _), a in zip(seqs, lens_pre)])
    lat_new = np.concatenate([lat[a:] for (_, lat), a in zip(seqs, lens_pre)])
    cu = np.array([0, 3, 4])
    o, nc = ops.latent_attention(q_new, lat_new, kv_b, H, NOPE, ROPE, VD, R, scale,
                                 latent_cache=cache_arg, cache_lens=lens_arg, cu_seqlens=cu)
    assert rel_err(o[:3], full[0][5:]) < 1e-12
    assert rel_err(o[3:], full[1][2:]) < 1e-12
    assert rel_err(nc[0], seqs[0][1]) == 0 and rel_err(nc[1], seqs[1][1]) == 0


def test_absorbed_form_equals_latent_form_with_cache():
    rng = np.random.default_rng(2)
    q, latent, kv_b = mla_inputs(rng, 5)
    cache = [rng.standard_normal((4, R + ROPE)), rng.standard_normal((0, R + ROPE))]
    cu = np.array([0, 2, 5])
    a, ca = ops.latent_attention(q, latent, kv_b, H, NOPE, ROPE, VD, R, 0.3, cache, cu_seqlens=cu)
    b, cb = ops.latent_attention_absorbed(q, latent, kv_b, H, NOPE, ROPE, VD, R, 0.3, cache, cu_seqlens=cu)
    assert rel_err(b, a) < 1e-12
    assert all(np.array_equal(x, y) for x, y in zip(ca, cb))
