"""Seeded random weights made by the artifact's weight-init kernels
(lowering/WeightInitKernels.cpp) against the runtime's host generator: on
the CPU target the kernels run the same f64 arithmetic through the same
libm, so the weights, and hence the logits, are bit-identical. A GPU run
of the same comparison is in bench/e2e.py."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import k3  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    d = tmp_path_factory.mktemp("random_weights")
    return k3.compile(ROOT / "examples/tiny_k3.mlir", d / "tiny.k3bin", max_tokens=64, max_seqs=2)


def logits(art, place, seed, monkeypatch):
    monkeypatch.setenv("K3_RANDOM_WEIGHTS", place)
    s = k3.Session(art)
    made = s.random_weights(seed)
    ids = np.arange(1, 12, dtype=np.int32)
    out = s.run(token_ids=ids, cu_seqlens=np.array([0, len(ids)], np.int32),
                context_lens=np.array([0], np.int32))["logits"]
    return made, out


def test_kernels_match_host_bit_for_bit(art, monkeypatch):
    made_h, host = logits(art, "host", 7, monkeypatch)
    made_d, dev = logits(art, "device", 7, monkeypatch)
    assert (made_h, made_d) == ("host threads", "device kernels")
    np.testing.assert_array_equal(dev, host)
    _, other = logits(art, "device", 8, monkeypatch)
    assert not np.array_equal(other, host)  # the seed reaches the kernels


def test_cpu_default_is_host_threads(art, monkeypatch):
    monkeypatch.delenv("K3_RANDOM_WEIGHTS", raising=False)
    assert k3.Session(art).random_weights(1) == "host threads"


def test_bad_place_is_an_error(art, monkeypatch):
    monkeypatch.setenv("K3_RANDOM_WEIGHTS", "gpu")
    with pytest.raises(k3.K3Error, match="K3_RANDOM_WEIGHTS must be 'host' or 'device', got 'gpu'"):
        k3.Session(art).random_weights(1)
