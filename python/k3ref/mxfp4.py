"""MXFP4 routed-expert weights, float64 (docs/mxfp4.md).

The Kimi K3 checkpoint stores each routed expert matrix
``model.layers.L.mlp.experts.E.{w1,w2,w3}`` in the compressed-tensors format
``mxfp4-pack-quantized`` (group 32) as two U8 tensors instead of ``X.weight``:

* ``X.weight_packed`` U8 ``[out, in/2]``: two E2M1 codes a byte, element
  ``2i`` in the low nibble, ``2i+1`` in the high nibble;
* ``X.weight_scale``  U8 ``[out, in/32]``: the E8M0 byte ``s`` of each group
  of 32 consecutive input elements, scale ``2**(s - 127)``; ``0xFF`` is NaN.

Value of element ``j`` of row ``r``:
``E2M1_VALUES[code[r, j]] * 2**(scale[r, j // 32] - 127)``.

The encoder (``quantize``) is written independently of the decoder: it has
its own magnitude grid and picks the shared exponent the way
compressed-tensors does (``generate_mx_scales``): ``floor(log2(amax)) - 2``,
one higher when the group's max magnitude has a significand >= 1.75; each
element then rounds to the nearest E2M1 value, ties to the even code,
saturating at 6.  ``rule="ocp"`` gives the plain OCP MX v1.0 exponent
``floor(log2(amax)) - 2`` instead.  Naive and float64 throughout.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import numpy as np

GROUP = 32
SCALE_BIAS = 127          # E8M0: scale = 2 ** (byte - 127)
SCALE_NAN = 0xFF          # E8M0 NaN encoding
E2M1_MAX = 6.0
E2M1_EMAX = 2             # floor(log2(6)): the largest E2M1 exponent

# code -> value.  Bit 3 is the sign, bits 2..1 the exponent (bias 1), bit 0
# the mantissa; exponent field 0 is subnormal (0 and 0.5).
E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)

# Routed expert matrices under the checkpoint's ("mlp") or the oracle's
# canonical ("block_sparse_moe") prefix, with or without "language_model.".
ROUTED_EXPERT_RE = re.compile(r"^(?:language_model\.)?model\.layers\.\d+\."
                              r"(?:mlp|block_sparse_moe)\.experts\.\d+\.w[123]\.weight$")


# ----------------------------------------------------------------------------
# decoding
# ----------------------------------------------------------------------------

def decode_e2m1(codes) -> np.ndarray:
    """E2M1 codes (integers 0..15) -> float64 values of the same shape."""
    c = np.asarray(codes)
    if not np.issubdtype(c.dtype, np.integer):
        raise ValueError(f"E2M1 codes must be integers, got dtype {c.dtype}")
    if c.size and (c.min() < 0 or c.max() > 15):
        raise ValueError("E2M1 codes must lie in 0..15")
    return E2M1_VALUES[c.astype(np.int64)]


def unpack_codes(packed) -> np.ndarray:
    """U8 ``[..., n]`` -> codes ``[..., 2n]``: low nibble first (element 2i),
    high nibble second (element 2i+1)."""
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise ValueError(f"packed MXFP4 data must be uint8, got {p.dtype}")
    codes = np.empty(p.shape[:-1] + (2 * p.shape[-1],), dtype=np.uint8)
    codes[..., 0::2] = p & 0x0F
    codes[..., 1::2] = p >> 4
    return codes


def decode_scale(scale) -> np.ndarray:
    """E8M0 bytes -> float64 ``2 ** (s - 127)``; raises on the NaN byte 0xFF."""
    s = np.asarray(scale)
    if s.dtype != np.uint8:
        raise ValueError(f"MXFP4 scales must be uint8 (E8M0 bytes), got {s.dtype}")
    if np.any(s == SCALE_NAN):
        n = int(np.count_nonzero(s == SCALE_NAN))
        raise ValueError(f"MXFP4 scale byte 0xFF is the E8M0 NaN encoding ({n} such bytes)")
    return np.ldexp(1.0, s.astype(np.int64) - SCALE_BIAS)


def dequantize(packed, scale, group: int = GROUP) -> np.ndarray:
    """``weight_packed`` U8 ``[..., in/2]`` and ``weight_scale`` U8
    ``[..., in/group]`` -> float64 ``[..., in]`` (exact: every E2M1 value times
    a power of two is a float64)."""
    p = np.asarray(packed)
    s = np.asarray(scale)
    if p.dtype != np.uint8 or s.dtype != np.uint8:
        raise ValueError(f"MXFP4 weight_packed and weight_scale must be uint8, "
                         f"got {p.dtype} and {s.dtype}")
    if p.ndim < 1 or s.ndim != p.ndim or p.shape[:-1] != s.shape[:-1] \
            or 2 * p.shape[-1] != group * s.shape[-1]:
        raise ValueError(f"MXFP4 shape mismatch: weight_packed {list(p.shape)} holds "
                         f"{2 * p.shape[-1] if p.ndim else 0} elements a row, weight_scale "
                         f"{list(s.shape)} must then be {list(p.shape[:-1])} + "
                         f"[{2 * p.shape[-1] if p.ndim else 0}/{group}]")
    vals = decode_e2m1(unpack_codes(p))
    sc = decode_scale(s)
    n_in = vals.shape[-1]
    out = vals.reshape(vals.shape[:-1] + (n_in // group, group)) * sc[..., None]
    return out.reshape(vals.shape)


# ----------------------------------------------------------------------------
# encoding (independent of the decoder above)
# ----------------------------------------------------------------------------

# E2M1 magnitudes by magnitude code (0..7); code | 8 is the negative.
_ENC_MAGNITUDES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def shared_exponent(amax, rule: str = "compressed-tensors") -> np.ndarray:
    """Unbiased shared exponent E (scale 2**E) of groups with max magnitude ``amax``.

    ``"compressed-tensors"`` (default; ``generate_mx_scales`` after
    ``round_to_power_2``): E = floor(log2(amax)) - 2, plus one when
    ``amax / 2**floor(log2(amax)) >= 1.75``.  ``"ocp"`` (OCP MX v1.0,
    microxcaling ``_quantize_mx``): E = floor(log2(amax)) - 2.  Both are
    clamped to the E8M0 range [-127, 127]; amax = 0 gives -127 (byte 0).
    """
    a = np.asarray(amax, dtype=np.float64)
    if rule not in ("compressed-tensors", "ocp"):
        raise ValueError(f"unknown shared-exponent rule {rule!r}")
    if np.any(~np.isfinite(a)) or np.any(a < 0):
        raise ValueError("group max magnitudes must be finite and >= 0")
    m, e = np.frexp(a)                 # a = m * 2**e, m in [0.5, 1) (0 for a = 0)
    floor_log2 = e.astype(np.int64) - 1
    E = floor_log2 - E2M1_EMAX
    if rule == "compressed-tensors":
        E = E + (2.0 * m >= 1.75)
    E = np.where(a == 0.0, -SCALE_BIAS, E)
    return np.clip(E, -SCALE_BIAS, SCALE_BIAS).astype(np.int64)


def encode_e2m1(x) -> np.ndarray:
    """Round reals to E2M1 codes (uint8 0..15): nearest value, ties to the even
    code, magnitudes above 6 saturate to 6; the sign bit copies the sign of
    ``x`` (negatives that round to 0 give code 8, as compressed-tensors'
    ``pack_fp4_to_uint8`` does)."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(np.isnan(x)):
        raise ValueError("cannot encode NaN as E2M1")
    mag = np.minimum(np.abs(x), E2M1_MAX)
    # |mag - g| is exact in float64 for g adjacent to mag (Sterbenz), so ties
    # between neighbours are detected exactly.
    d = np.abs(mag[..., None] - _ENC_MAGNITUDES)
    lo = np.argmin(d, axis=-1)                          # first (smaller) minimum
    nxt = np.minimum(lo + 1, len(_ENC_MAGNITUDES) - 1)
    d_lo = np.take_along_axis(d, lo[..., None], -1)[..., 0]
    d_nx = np.take_along_axis(d, nxt[..., None], -1)[..., 0]
    tie = (nxt != lo) & (d_nx == d_lo)
    code = np.where(tie & (lo % 2 == 1), nxt, lo)
    return (code | (np.signbit(x).astype(np.int64) << 3)).astype(np.uint8)


def pack_codes(codes) -> np.ndarray:
    """codes ``[..., 2n]`` -> U8 ``[..., n]``: element 2i low nibble, 2i+1 high."""
    c = np.asarray(codes).astype(np.uint8)
    if c.shape[-1] % 2:
        raise ValueError("need an even number of codes a row to pack two a byte")
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def quantize(w, group: int = GROUP, rule: str = "compressed-tensors"):
    """float ``[..., in]`` -> (``weight_packed`` U8 ``[..., in/2]``,
    ``weight_scale`` U8 ``[..., in/group]``).

    Per group of ``group`` consecutive input elements: E = shared_exponent(max
    |w|, rule); each element w / 2**E rounds to E2M1 (``encode_e2m1``); the
    scale byte is E + 127 (never 0xFF)."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim < 1 or w.shape[-1] % group or group % 2:
        raise ValueError(f"MXFP4 needs the last dimension ({w.shape[-1] if w.ndim else None}) "
                         f"to be a multiple of the (even) group size {group}")
    if not np.all(np.isfinite(w)):
        raise ValueError("cannot quantize non-finite weights to MXFP4")
    g = w.reshape(w.shape[:-1] + (w.shape[-1] // group, group))
    E = shared_exponent(np.max(np.abs(g), axis=-1), rule)
    codes = encode_e2m1(np.ldexp(g, -E[..., None]))
    packed = pack_codes(codes.reshape(w.shape))
    scale = (E + SCALE_BIAS).astype(np.uint8)
    return packed, scale


# ----------------------------------------------------------------------------
# checkpoints
# ----------------------------------------------------------------------------

def is_routed_expert_weight(name: str) -> bool:
    """True for ``model.layers.L.{mlp,block_sparse_moe}.experts.E.w{1,2,3}.weight``."""
    return ROUTED_EXPERT_RE.match(name) is not None


def quantize_experts(weights: dict, predicate: Optional[Callable[[str], bool]] = None,
                     group: int = GROUP, rule: str = "compressed-tensors"):
    """Quantize the routed experts of a weights dict (name -> array, as in
    ``k3ref.model``) to MXFP4.

    Returns ``(checkpoint, dequantized)``: ``checkpoint`` is the dict to write
    (each selected ``X.weight`` replaced by ``X.weight_packed`` and
    ``X.weight_scale``, U8; every other tensor unchanged); ``dequantized`` is
    the whole weights dict with each selected ``X.weight`` replaced by its
    float64 dequantized value -- the weights the oracle must run to match a
    consumer of ``checkpoint``.  ``predicate`` (default
    ``is_routed_expert_weight``) selects the names to quantize."""
    pred = predicate or is_routed_expert_weight
    checkpoint, dequantized = {}, {}
    for name, arr in weights.items():
        if pred(name):
            if not name.endswith(".weight"):
                raise ValueError(f"{name}: only '.weight' tensors can be stored as MXFP4")
            base = name[:-len(".weight")]
            packed, scale = quantize(arr, group, rule)
            checkpoint[base + ".weight_packed"] = packed
            checkpoint[base + ".weight_scale"] = scale
            dequantized[name] = dequantize(packed, scale, group)
        else:
            checkpoint[name] = arr
            dequantized[name] = arr
    return checkpoint, dequantized


def quantization_config(group: int = GROUP, targets=None, ignore=None) -> dict:
    """A minimal ``quantization_config`` (config.json) for MXFP4 routed experts:
    by default one group targeting the routed experts by regex (``re:`` names
    are matched with Python ``re.match`` against module names)."""
    if targets is None:
        targets = [r"re:.*\.experts\.\d+\.w[123]$"]
    return {
        "quant_method": "compressed-tensors",
        "format": "mxfp4-pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": list(targets),
                "weights": {"num_bits": 4, "type": "float", "strategy": "group",
                            "group_size": group, "symmetric": True, "dynamic": False,
                            "scale_dtype": "torch.uint8"},
                "input_activations": None,
                "output_activations": None,
                "format": "mxfp4-pack-quantized",
            }
        },
        "ignore": list(ignore) if ignore is not None else ["lm_head"],
    }
