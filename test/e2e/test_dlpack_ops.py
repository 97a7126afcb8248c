"""DLPack in and out of a CPU session (python/k3/dlpack.py) and
k3.ops.chunk_kda (fla's signature) against the float64 recurrence of the
oracle. The CUDA side (torch tensors, no copies) is bench/gpu_interop.py.

    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_dlpack_ops.py
"""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import k3  # noqa: E402
import k3.ops  # noqa: E402
from k3.dlpack import DeviceTensor  # noqa: E402
from k3ref import ops as ref  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")


@pytest.fixture(scope="module")
def sess(tmp_path_factory):
    d = tmp_path_factory.mktemp("dlpack")
    art = k3.compile(ROOT / "examples/tiny_k3.mlir", d / "tiny.k3bin", max_tokens=32, max_seqs=2)
    s = k3.Session(art)
    s.random_weights(3)
    return s


@pytest.fixture(autouse=True, scope="module")
def cache(tmp_path_factory):
    os.environ["K3_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))


def feed():
    return dict(token_ids=np.array([5, 6, 7], np.int32), cu_seqlens=np.array([0, 3], np.int32),
                context_lens=np.array([0], np.int32))


def test_dlpack_inputs_and_outputs_without_copies(sess):
    sess.reset_state()
    ref_out = sess.run(**feed())
    sess.reset_state()
    # Inputs as DLPack capsules (what torch.utils.dlpack.to_dlpack returns).
    caps = {n: a.__dlpack__() for n, a in feed().items()}
    out = sess.run(outputs="dlpack", **caps)
    t = out["logits"]
    assert isinstance(t, DeviceTensor) and t.device == "cpu" and t.shape == (1, 256)
    view = np.from_dlpack(t)  # the consumer's array aliases the output buffer
    assert view.ctypes.data == t.data_ptr
    np.testing.assert_array_equal(view, ref_out["logits"])
    assert t.numpy().ctypes.data == t.data_ptr
    # The buffer is the session's: the next run overwrites it in place.
    sess.run(token_ids=np.array([9, 9, 9], np.int32), cu_seqlens=np.array([0, 3], np.int32),
             context_lens=np.array([0], np.int32))
    assert not np.array_equal(view, ref_out["logits"])


def test_dlpack_errors(sess):
    ids = np.array([1, 2, 3], np.int32)
    fake_cuda = DeviceTensor(None, "token_ids", "i32", (3,), ids.ctypes.data, 2, 0, 12)
    with pytest.raises(k3.K3Error, match="tensor on cuda:0 but the session runs on cpu"):
        sess.run(token_ids=fake_cuda, cu_seqlens=np.array([0, 3], np.int32),
                 context_lens=np.array([0], np.int32))
    with pytest.raises(k3.K3Error, match="input 'token_ids': dtype float32, expected i32"):
        sess.run(token_ids=np.array([1.0, 2.0, 3.0], np.float32).__dlpack__(),
                 cu_seqlens=np.array([0, 3], np.int32), context_lens=np.array([0], np.int32))
    strided = np.arange(6, dtype=np.int32)[::2]
    with pytest.raises(k3.K3Error, match="not contiguous"):
        sess.run(token_ids=strided.__dlpack__(), cu_seqlens=np.array([0, 3], np.int32),
                 context_lens=np.array([0], np.int32))


def kda_inputs(rng, B, T, H, K, V, N=None):
    f = np.float32
    q = rng.standard_normal((B, T, H, K)).astype(f)
    k = rng.standard_normal((B, T, H, K)).astype(f)
    v = rng.standard_normal((B, T, H, V)).astype(f)
    g = (-np.abs(rng.standard_normal((B, T, H, K))) * 0.3).astype(f)
    beta = (1 / (1 + np.exp(-rng.standard_normal((B, T, H))))).astype(f)
    h0 = (0.3 * rng.standard_normal((N or B, H, K, V))).astype(f)
    return q, k, v, g, beta, h0


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("l2", [False, True])
def test_chunk_kda_matches_the_oracle(l2):
    rng = np.random.default_rng(1)
    q, k, v, g, beta, h0 = kda_inputs(rng, 2, 37, 2, 16, 32)
    if not l2:
        q, k = q * 0.25, k * 0.25
    o, ht = k3.ops.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                             use_qk_l2norm_in_kernel=l2)
    ro, rht = ref.kda_recurrent(q, k, v, g, beta, 16 ** -0.5, initial_state=h0, use_qk_l2norm=l2)
    assert o.shape == (2, 37, 2, 32) and o.dtype == np.float32 and ht.shape == (2, 2, 16, 32)
    assert rel(o, ro) < 1e-4 and rel(ht, rht) < 1e-4
    o2, none = k3.ops.chunk_kda(q, k, v, g, beta, initial_state=h0, use_qk_l2norm_in_kernel=l2)
    assert none is None and np.array_equal(o, o2)  # cached artifact and session


def test_chunk_kda_varlen_and_dtypes():
    rng = np.random.default_rng(2)
    lens = [5, 20, 1]
    q, k, v, g, beta, h0 = kda_inputs(rng, 1, sum(lens), 2, 16, 16, N=3)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    o, ht = k3.ops.chunk_kda(q, k, v, g, beta, scale=0.2, initial_state=h0,
                             output_final_state=True, cu_seqlens=cu)
    ro, rht = ref.kda_recurrent(q, k, v, g, beta, 0.2, initial_state=h0, cu_seqlens=cu)
    assert rel(o, ro) < 1e-4 and rel(ht, rht) < 1e-4
    o64, _ = k3.ops.chunk_kda(*(x.astype(np.float64) for x in (q, k, v, g, beta)), scale=0.2,
                              initial_state=h0, cu_seqlens=cu)
    assert o64.dtype == np.float64 and rel(o64, ro) < 1e-4
    with pytest.raises(k3.K3Error, match="q has dtype int32, expected a floating array"):
        k3.ops.chunk_kda(q.astype(np.int32), k, v, g, beta)
    with pytest.raises(k3.K3Error, match=r"v has shape \[1, 26, 2\], expected rank 4"):
        k3.ops.chunk_kda(q, k, v[..., 0], g, beta)
    with pytest.raises(k3.K3Error, match="with cu_seqlens the batch must be 1"):
        k3.ops.chunk_kda(*(np.concatenate([x, x]) for x in (q, k, v, g, beta)), cu_seqlens=cu)
    with pytest.raises(k3.K3Error, match="unsupported arguments A_log"):
        k3.ops.chunk_kda(q, k, v, g, beta, A_log=np.zeros(2))
