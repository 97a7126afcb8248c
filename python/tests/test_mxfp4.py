"""MXFP4 routed experts (docs/mxfp4.md): E2M1 codes, nibble order, E8M0 scales,
the encoder, quantize_experts and the safetensors pair."""
import json
import re
import struct

import numpy as np
import pytest

from k3ref import model, mxfp4


def _row(packed_bytes, scale_bytes):
    packed = np.array([packed_bytes], np.uint8)
    return mxfp4.dequantize(packed, np.array([scale_bytes], np.uint8))[0]


def test_e2m1_table():
    assert mxfp4.E2M1_VALUES.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                                          -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    for c in range(8):                      # bit 3 is the sign
        assert mxfp4.E2M1_VALUES[c | 8] == -mxfp4.E2M1_VALUES[c]
        assert np.signbit(mxfp4.E2M1_VALUES[c | 8]) and not np.signbit(mxfp4.E2M1_VALUES[c])
    # exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0 is subnormal
    for c in range(8):
        e, m = c >> 1, c & 1
        v = (m / 2.0) if e == 0 else 2.0 ** (e - 1) * (1 + m / 2.0)
        assert mxfp4.E2M1_VALUES[c] == v
    got = mxfp4.decode_e2m1(np.array([[7, 15], [1, 9]], np.uint8))
    assert got.tolist() == [[6.0, -6.0], [0.5, -0.5]]
    with pytest.raises(ValueError):
        mxfp4.decode_e2m1(np.array([16]))
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if hasattr(ml_dtypes, "float4_e2m1fn"):  # an independent table
        ref = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64)
        assert np.array_equal(ref, mxfp4.E2M1_VALUES)
        assert np.array_equal(np.signbit(ref), np.signbit(mxfp4.E2M1_VALUES))


def test_nibble_order_low_nibble_is_the_even_element():
    # 0x2F: low nibble 0xF (-6.0) is element 0, high nibble 0x2 (1.0) is element 1
    row = _row([0x2F] + [0x00] * 15, [127])
    assert row.shape == (32,)
    assert row[:2].tolist() == [-6.0, 1.0] and not row[2:].any()
    row = _row([0x00] * 15 + [0x71], [127])
    assert row[30:].tolist() == [0.5, 6.0]
    assert mxfp4.pack_codes(np.array([15, 2, 1, 7], np.uint8)).tolist() == [0x2F, 0x71]
    assert mxfp4.unpack_codes(np.array([0x2F, 0x71], np.uint8)).tolist() == [15, 2, 1, 7]


def test_scale_bias():
    for s, mult in [(127, 1.0), (128, 2.0), (126, 0.5), (130, 8.0), (0, 2.0 ** -127),
                    (254, 2.0 ** 127)]:
        row = _row([0x77] * 16, [s])       # every element 6.0
        assert np.all(row == 6.0 * mult), s
    # one scale per 32 consecutive elements of a row
    row = _row([0x22] * 32, [127, 129])    # every element 1.0
    assert np.all(row[:32] == 1.0) and np.all(row[32:] == 4.0)
    assert mxfp4.decode_scale(np.array([126, 127, 128], np.uint8)).tolist() == [0.5, 1.0, 2.0]


def test_nan_scale_rejected():
    with pytest.raises(ValueError, match="0xFF"):
        _row([0x11] * 16, [255])
    with pytest.raises(ValueError, match="NaN"):
        mxfp4.decode_scale(np.array([127, 255], np.uint8))


def test_shape_and_dtype_mismatch_rejected():
    p = np.zeros((2, 16), np.uint8)
    with pytest.raises(ValueError, match="shape mismatch"):
        mxfp4.dequantize(p, np.zeros((2, 2), np.uint8))          # 32 elements need 1 scale
    with pytest.raises(ValueError, match="shape mismatch"):
        mxfp4.dequantize(p, np.zeros((3, 1), np.uint8))          # rows differ
    with pytest.raises(ValueError, match="shape mismatch"):
        mxfp4.dequantize(p, np.zeros((1, 2, 1), np.uint8))       # rank differs
    with pytest.raises(ValueError, match="uint8"):
        mxfp4.dequantize(p.astype(np.int32), np.zeros((2, 1), np.uint8))
    with pytest.raises(ValueError, match="multiple"):
        mxfp4.quantize(np.zeros((2, 48)))
    assert mxfp4.dequantize(np.zeros((3, 4, 32), np.uint8),
                            np.full((3, 4, 2), 127, np.uint8)).shape == (3, 4, 64)


def test_shared_exponent_rules():
    # compressed-tensors round_to_power_2 cases (tests/test_quantization/test_utils/
    # test_mxfp4_utils.py::test_round_power_2): amax -> power of two, E = log2(that) - 2
    for amax, p2 in [(5.687891, 4), (7.290238, 8), (6.94, 4), (8.571118, 8), (9.856593, 8),
                     (0.965272, 1), (0.073246, 0.0625), (1.75, 2), (1.7499, 1)]:
        assert mxfp4.shared_exponent(amax) == np.log2(p2) - 2, amax
    for amax, e in [(6.0, 0), (7.0, 0), (7.99, 0), (8.0, 1), (4.0, 0), (3.9, -1)]:
        assert mxfp4.shared_exponent(amax, "ocp") == e
    assert mxfp4.shared_exponent(0.0) == -127                  # all-zero group: byte 0
    assert mxfp4.shared_exponent(2.0 ** -140) == -127          # clamped to E8M0
    assert mxfp4.shared_exponent(2.0 ** 200) == 127
    packed, scale = mxfp4.quantize(np.zeros((1, 32)))
    assert scale.tolist() == [[0]] and not packed.any()


def test_ties_to_even_code_and_saturation():
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    assert mxfp4.encode_e2m1(np.array(mids)).tolist() == [0, 2, 2, 4, 4, 6, 6]
    assert mxfp4.encode_e2m1(-np.array(mids)).tolist() == [8, 10, 10, 12, 12, 14, 14]
    x = np.array([0.2500001, 5.0000001, 6.9, 100.0, -7.0, -0.1, 0.0])
    assert mxfp4.encode_e2m1(x).tolist() == [1, 7, 7, 7, 15, 8, 0]
    # through quantize: a group whose max is 6 has scale 1 (byte 127)
    g = np.array([6.0] + mids + [-m for m in mids] + [0.0] * 17)
    packed, scale = mxfp4.quantize(g[None])
    assert scale.tolist() == [[127]]
    got = mxfp4.dequantize(packed, scale)[0]
    assert got[1:8].tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]
    assert got[8:15].tolist() == [-0.0, -1.0, -1.0, -2.0, -2.0, -4.0, -4.0]


def test_quantize_is_exact_on_grid_values():
    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, (16, 64), dtype=np.uint8)
    scale = rng.integers(100, 150, (16, 4), dtype=np.uint8)
    packed[:, ::16] = (packed[:, ::16] & 0xF0) | 0x07      # element 0 of each group is +6
    w = mxfp4.dequantize(packed, scale)
    p2, s2 = mxfp4.quantize(w)
    assert np.array_equal(p2, packed) and np.array_equal(s2, scale)   # bytes, -0 included
    # any grid values times a common power of two come back exactly (not always same bytes)
    packed = rng.integers(0, 256, (16, 64), dtype=np.uint8)
    w = mxfp4.dequantize(packed, scale)
    for rule in ("compressed-tensors", "ocp"):
        assert np.array_equal(mxfp4.dequantize(*mxfp4.quantize(w, rule=rule)), w)


def _nearest_on_grid(w, scale):
    """Brute force: the nearest of the 16 E2M1 values times the group scale."""
    s = np.repeat(scale, 32, axis=-1)
    cand = mxfp4.E2M1_VALUES[None, None, :] * s[..., None]
    best = np.argmin(np.abs(cand - w[..., None]), -1)
    return np.take_along_axis(cand, best[..., None], -1)[..., 0]


@pytest.mark.parametrize("rule", ["compressed-tensors", "ocp"])
def test_quantization_error_bound(rule):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((24, 128)) * np.exp(rng.uniform(-6, 3, (24, 1)))
    packed, scale = mxfp4.quantize(w, rule=rule)
    assert packed.dtype == np.uint8 and packed.shape == (24, 64)
    assert scale.dtype == np.uint8 and scale.shape == (24, 4)
    deq = mxfp4.dequantize(packed, scale)
    sc = np.repeat(mxfp4.decode_scale(scale), 32, axis=-1)
    x = np.abs(w) / sc                                       # position on the E2M1 grid
    amax = np.abs(w).reshape(24, 4, 32).max(-1) / mxfp4.decode_scale(scale)
    if rule == "compressed-tensors":
        assert np.all((amax >= 3.5) & (amax < 7.0))
        step = np.where(x < 2, 0.5, np.where(x < 4, 1.0, 2.0))
        assert np.all(np.abs(deq - w) <= 0.5 * step * sc)    # within half an E2M1 step
    else:
        assert np.all((amax >= 4.0) & (amax < 8.0))
    # and it is the nearest representable value (random data: no ties)
    assert np.array_equal(deq, _nearest_on_grid(w, mxfp4.decode_scale(scale)))
    assert np.all(np.signbit(deq) == np.signbit(w))


def test_quantize_experts_names():
    cfg = model.tiny_k3_config(moe_intermediate_size=32)
    W = model.random_weights(cfg, seed=3)
    ckpt, deq = mxfp4.quantize_experts(W)
    experts = [n for n in W if re.search(r"\.experts\.\d+\.w[123]\.weight$", n)]
    assert len(experts) == 3 * cfg.num_experts * sum(cfg.is_moe(i) for i in range(8))
    assert set(deq) == set(W)
    for n in W:
        if n in experts:
            b = n[:-len(".weight")]
            assert n not in ckpt
            assert ckpt[b + ".weight_packed"].dtype == np.uint8
            assert ckpt[b + ".weight_packed"].shape == (W[n].shape[0], W[n].shape[1] // 2)
            assert ckpt[b + ".weight_scale"].shape == (W[n].shape[0], W[n].shape[1] // 32)
            assert deq[n].dtype == np.float64 and not np.array_equal(deq[n], W[n])
            assert np.max(np.abs(deq[n] - W[n])) <= 0.25 * np.max(np.abs(W[n]))
        else:
            assert ckpt[n] is W[n] and deq[n] is W[n]
    assert "model.layers.1.block_sparse_moe.shared_experts.gate_proj.weight" in ckpt
    for n in ["model.layers.1.mlp.experts.3.w1.weight",
              "language_model.model.layers.12.block_sparse_moe.experts.895.w2.weight"]:
        assert mxfp4.is_routed_expert_weight(n)
    for n in ["model.layers.1.mlp.shared_experts.gate_proj.weight",
              "model.layers.1.mlp.experts.3.w1.weight_packed", "model.layers.1.mlp.gate.weight"]:
        assert not mxfp4.is_routed_expert_weight(n)


def test_quantization_config_targets_routed_experts():
    qc = mxfp4.quantization_config()
    json.dumps(qc)
    assert qc["format"] == "mxfp4-pack-quantized" and qc["quant_method"] == "compressed-tensors"
    w = qc["config_groups"]["group_0"]["weights"]
    assert (w["num_bits"], w["type"], w["group_size"]) == (4, "float", 32)
    assert w["scale_dtype"] == "torch.uint8" and w["strategy"] == "group" and w["symmetric"]
    (target,) = qc["config_groups"]["group_0"]["targets"]
    assert target.startswith("re:")
    pat = target[3:]
    assert re.match(pat, "model.layers.1.mlp.experts.3.w1")
    assert not re.match(pat, "model.layers.1.mlp.shared_experts.gate_proj")
    assert not re.match(pat, "model.layers.1.mlp.experts.3.w1.weight")


def test_safetensors_roundtrip_of_a_packed_pair(tmp_path):
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 64))
    packed, scale = mxfp4.quantize(w)
    t = {"language_model.model.layers.1.mlp.experts.0.w1.weight_packed": packed,
         "language_model.model.layers.1.mlp.experts.0.w1.weight_scale": scale,
         "language_model.model.norm.weight": rng.standard_normal(64)}
    p = tmp_path / "x.safetensors"
    model.save_safetensors(p, t, dtype="bf16")         # bf16 touches floating tensors only
    with open(p, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    pk = "language_model.model.layers.1.mlp.experts.0.w1.weight_packed"
    sk = "language_model.model.layers.1.mlp.experts.0.w1.weight_scale"
    assert header[pk]["dtype"] == "U8" and header[pk]["shape"] == [8, 32]
    assert header[sk]["dtype"] == "U8" and header[sk]["shape"] == [8, 2]
    assert header["language_model.model.norm.weight"]["dtype"] == "BF16"
    raw = model.load_safetensors(p, to_float64=False)
    assert np.array_equal(raw["model.layers.1.mlp.experts.0.w1.weight_packed"], packed)
    assert np.array_equal(raw["model.layers.1.mlp.experts.0.w1.weight_scale"], scale)
    back = model.load_safetensors(p)
    assert sorted(back) == ["model.layers.1.mlp.experts.0.w1.weight", "model.norm.weight"]
    assert back["model.layers.1.mlp.experts.0.w1.weight"].dtype == np.float64
    assert np.array_equal(back["model.layers.1.mlp.experts.0.w1.weight"],
                          mxfp4.dequantize(packed, scale))
    # the safetensors library reads the same bytes
    stn = pytest.importorskip("safetensors.numpy")
    lib = stn.load_file(str(p))
    assert lib[pk].dtype == np.uint8 and np.array_equal(lib[pk], packed)
    assert np.array_equal(lib[sk], scale)


def test_whole_checkpoint_roundtrip_feeds_the_oracle(tmp_path):
    cfg = model.tiny_k3_config(moe_intermediate_size=32)
    W = model.random_weights(cfg, seed=4)
    ckpt, deq = mxfp4.quantize_experts(W)
    p = tmp_path / "m.safetensors"
    model.save_safetensors(p, ckpt)
    back = model.load_safetensors(p)
    assert set(back) == set(deq)
    assert all(np.array_equal(back[n], deq[n]) for n in deq)
    ids = np.array([3, 14, 15, 92, 65])
    assert np.array_equal(model.forward(cfg, back, ids), model.forward(cfg, deq, ids))
    # a loaded pair never coexists with its dense weight
    bad = dict(ckpt, **{"model.layers.1.block_sparse_moe.experts.0.w1.weight": np.zeros((32, 32))})
    model.save_safetensors(p, bad)
    with pytest.raises(ValueError, match="both"):
        model.load_safetensors(p)
