"""Worked examples of the seed article (§3: o3 = 124; §7.4: S2 = 4.3)."""
import numpy as np
import pytest

from k3ref import ops


def test_seed_s3_standard_and_linear_attention():
    # (k1, v1) = (2, 5), (k2, v2) = (3, 7), q3 = 4, phi = identity
    k = np.array([2.0, 3.0])
    v = np.array([5.0, 7.0])
    q3 = 4.0
    standard = sum(q3 * k[i] * v[i] for i in range(2))
    S2 = 0.0
    for i in range(2):           # S_t = S_{t-1} + k_t v_t
        S2 = S2 + k[i] * v[i]
    assert S2 == 31.0
    linear = q3 * S2
    assert standard == 124.0
    assert linear == 124.0


def test_seed_s74_recurrence_and_triangular_solve():
    k = np.array([1.0, 1.0])
    v = np.array([5.0, 7.0])
    beta = np.array([0.5, 0.4])
    # recurrence through the oracle: K = V = 1, no decay (g = 0), no l2 norm
    q4 = np.ones((1, 2, 1, 1))
    o, S = ops.kda_recurrent(q4, k.reshape(1, 2, 1, 1), v.reshape(1, 2, 1, 1),
                             np.zeros((1, 2, 1, 1)), beta.reshape(1, 2, 1), 1.0)
    assert S[0, 0, 0, 0] == pytest.approx(4.3, abs=1e-14)
    assert o[0, 0, 0, 0] == pytest.approx(2.5, abs=1e-14)   # S1 = 2.5 (q = 1)
    # triangular solve: (I + B L) U = B V
    L = np.array([[0.0, 0.0], [1.0, 0.0]])
    A = np.eye(2) + np.diag(beta) @ L
    assert np.allclose(A, [[1.0, 0.0], [0.4, 1.0]])
    rhs = (beta * v)[:, None]
    assert np.allclose(rhs[:, 0], [2.5, 2.8])
    for U in (ops.tri_solve_forward(A, rhs), ops.tri_solve_blocked(A, rhs, 1),
              ops.tri_solve_block_inverse(A, rhs, 1), np.linalg.solve(A, rhs)):
        assert U[:, 0] == pytest.approx([2.5, 1.8], abs=1e-14)
        assert float(k @ U[:, 0]) == pytest.approx(4.3, abs=1e-14)
    # and the chunk form of the oracle, chunk = 2
    o2, S2 = ops.kda_chunkwise(q4, k.reshape(1, 2, 1, 1), v.reshape(1, 2, 1, 1),
                               np.zeros((1, 2, 1, 1)), beta.reshape(1, 2, 1), 1.0,
                               chunk_size=2, tile_size=1)
    assert S2[0, 0, 0, 0] == pytest.approx(4.3, abs=1e-14)
    assert np.allclose(o2, o, atol=1e-14)
