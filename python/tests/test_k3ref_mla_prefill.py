"""k3ref.ops.mla_prefill_attention (the expanded MLA prefill, K3MLAOps.td)
against the latent form (ops.latent_attention) for sequences that start
empty: keys and values expanded through kv_b must give the same output."""
import numpy as np
import pytest

from k3ref import ops
from k3ref_testutil import rel_err


def inputs(rng, T, H, nope, rope, vd, r):
    q = rng.standard_normal((T, H, nope + rope))
    latent = rng.standard_normal((T, r + rope))
    kv_b = rng.standard_normal((H * (nope + vd), r)) / np.sqrt(r)
    # kv_b(c_kv) per token and head: [k_nope | v], computed here directly.
    kv = (latent[:, :r] @ kv_b.T).reshape(T, H, nope + vd)
    return q, latent, kv_b, kv


@pytest.mark.parametrize("dims", [(3, 8, 4, 6, 10), (2, 16, 0, 16, 12), (4, 8, 8, 8, 8)],
                         ids=["nope8-rope4", "no-rope", "equal-dims"])
@pytest.mark.parametrize("lengths", [[11], [1, 4, 6], [3, 0, 5, 1]],
                         ids=["one", "packed", "with-empty"])
def test_mla_prefill_equals_latent_attention(dims, lengths):
    H, nope, rope, vd, r = dims
    rng = np.random.default_rng(sum(dims) + len(lengths))
    T = sum(lengths)
    q, latent, kv_b, kv = inputs(rng, T, H, nope, rope, vd, r)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32) if len(lengths) > 1 else None
    scale = (nope + rope) ** -0.5
    want, _ = ops.latent_attention(q, latent, kv_b, H, nope, rope, vd, r, scale, cu_seqlens=cu)
    got = ops.mla_prefill_attention(q, kv, latent, nope, rope, vd, scale, cu_seqlens=cu)
    assert got.shape == (T, H, vd)
    assert rel_err(got, want) < 1e-12
    # The absorbed form agrees too (three forms, one result).
    absorbed, _ = ops.latent_attention_absorbed(q, latent, kv_b, H, nope, rope, vd, r, scale,
                                                cu_seqlens=cu)
    assert rel_err(got, absorbed) < 1e-12


def test_mla_prefill_gate_multiplies_by_sigmoid():
    H, nope, rope, vd, r = 3, 8, 4, 6, 10
    rng = np.random.default_rng(7)
    T = 9
    q, latent, kv_b, kv = inputs(rng, T, H, nope, rope, vd, r)
    gate = rng.standard_normal((T, H * vd)) * 3
    cu = np.array([0, 2, 9])
    want, _ = ops.latent_attention(q, latent, kv_b, H, nope, rope, vd, r, 0.3, cu_seqlens=cu)
    want = want * (1 / (1 + np.exp(-gate))).reshape(T, H, vd)
    got = ops.mla_prefill_attention(q, kv, latent, nope, rope, vd, 0.3, gate=gate, cu_seqlens=cu)
    assert rel_err(got, want) < 1e-12


def test_mla_prefill_k_pe_is_the_latents_last_columns():
    # Only the last qk_rope latent columns enter (the c_kv part is already in
    # kv); changing the others changes nothing, changing k_pe changes every head.
    H, nope, rope, vd, r = 2, 4, 4, 4, 6
    rng = np.random.default_rng(3)
    q, latent, _, kv = inputs(rng, 5, H, nope, rope, vd, r)
    o = ops.mla_prefill_attention(q, kv, latent, nope, rope, vd, 0.5)
    lat2 = latent.copy()
    lat2[:, :r] += 1.0
    assert np.array_equal(ops.mla_prefill_attention(q, kv, lat2, nope, rope, vd, 0.5), o)
    lat2[0, r:] += 1.0
    o2 = ops.mla_prefill_attention(q, kv, lat2, nope, rope, vd, 0.5)
    assert all(not np.allclose(o2[1, h], o[1, h]) for h in range(H))
    assert np.allclose(o2[0], o[0])  # token 0 has a single key: softmax = 1


def test_mla_prefill_first_token_is_its_value():
    rng = np.random.default_rng(5)
    q, latent, _, kv = inputs(rng, 4, 2, 4, 2, 3, 5)
    o = ops.mla_prefill_attention(q, kv, latent, 4, 2, 3, 1.0, cu_seqlens=[0, 1, 4])
    assert np.allclose(o[0], kv[0, :, 4:]) and np.allclose(o[1], kv[1, :, 4:])
