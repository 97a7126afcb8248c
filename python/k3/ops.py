"""Single ops compiled by K3, callable on NumPy arrays and torch tensors
(docs/python.md, "k3.ops").

``chunk_kda`` has fla's signature (``fla.ops.kda.chunk_kda``) so it can
replace it in a PyTorch model: it writes a one-op model (``k3.kda``) for the
head count and head dims, compiles it once per shape bucket (max tokens and
sequences rounded up to powers of two; artifacts cached in $K3_CACHE_DIR,
sessions kept per process) and runs it. CPU arrays (NumPy, torch CPU) run on
the CPU backend; CUDA tensors run on a CUDA session of their device, passed
by address through DLPack (no host copies; outputs are cloned on the device
because the session's output buffers are reused by the next call).
"""
from __future__ import annotations

import hashlib
import math
import os
from typing import Any, Optional, Tuple

import numpy as np

from ._capi import K3Error

_sessions: dict = {}

_MODEL = """// One-op model written by k3.ops.chunk_kda: the KDA core (fla chunk_kda).
func.func @forward(
    %q: tensor<1x?x{H}x{K}xf32> {{k3.name = "q", k3.dims = array<i64: 1, -1, {H}, {K}>}},
    %k: tensor<1x?x{H}x{K}xf32> {{k3.name = "k", k3.dims = array<i64: 1, -1, {H}, {K}>}},
    %v: tensor<1x?x{H}x{V}xf32> {{k3.name = "v", k3.dims = array<i64: 1, -1, {H}, {V}>}},
    %g: tensor<1x?x{H}x{K}xf32> {{k3.name = "g", k3.dims = array<i64: 1, -1, {H}, {K}>}},
    %beta: tensor<1x?x{H}xf32> {{k3.name = "beta", k3.dims = array<i64: 1, -1, {H}>}},
    %s0: tensor<?x{H}x{K}x{V}xf32> {{k3.name = "initial_state", k3.dims = array<i64: -2, {H}, {K}, {V}>}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<1x?x{H}x{V}xf32> {{k3.name = "o"}}, tensor<?x{H}x{K}x{V}xf32> {{k3.name = "final_state"}}) {{
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) cu_seqlens(%cu) {{scale = {scale!r} : f64{l2}}}
      : (tensor<1x?x{H}x{K}xf32>, tensor<1x?x{H}x{K}xf32>, tensor<1x?x{H}x{V}xf32>, tensor<1x?x{H}x{K}xf32>, tensor<1x?x{H}xf32>, tensor<?x{H}x{K}x{V}xf32>, tensor<?xi32>)
      -> (tensor<1x?x{H}x{V}xf32>, tensor<?x{H}x{K}x{V}xf32>)
  return %o, %s : tensor<1x?x{H}x{V}xf32>, tensor<?x{H}x{K}x{V}xf32>
}}
"""


def _pow2(n: int, lo: int) -> int:
    return max(lo, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _device_of(x: Any) -> str:
    """'cpu' or 'cuda:N' of an array/tensor (DLPack device when it has one)."""
    if isinstance(x, np.ndarray):
        return "cpu"
    if hasattr(x, "__dlpack_device__"):
        t, i = x.__dlpack_device__()
        return "cpu" if int(t) == 1 else f"cuda:{int(i)}" if int(t) == 2 else f"dlpack:{int(t)}"
    return "cpu"


def _host_f32(name: str, x: Any, rank: int) -> np.ndarray:
    """A CPU array or DLPack tensor as contiguous f32 (floating dtypes only)."""
    from . import dlpack
    if dlpack.is_dlpack(x):
        f = dlpack.from_dlpack(x, name)
        if f.dl_dtype[0] not in (2, 4):  # kDLFloat, kDLBfloat
            raise K3Error(f"chunk_kda: {name} has dtype {f.dtype_name()}, expected a floating "
                          "tensor")
        if f.dtype is not None:
            a = f.numpy()
        elif f.dl_dtype == (2, 64):
            import ctypes
            a = np.frombuffer((ctypes.c_uint8 * f.nbytes).from_address(f.ptr),
                              np.float64).reshape(f.shape)
        else:
            raise K3Error(f"chunk_kda: {name} has dtype {f.dtype_name()}, expected f32, f16, "
                          "bf16 or f64")
    else:
        a = np.asarray(x)
        if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
            raise K3Error(f"chunk_kda: {name} has dtype {a.dtype}, expected a floating array")
    if a.ndim != rank:
        raise K3Error(f"chunk_kda: {name} has rank {a.ndim} (shape {list(a.shape)}), expected "
                      f"{rank}")
    return np.ascontiguousarray(a, dtype=np.float32)


def _artifact(H: int, K: int, V: int, scale: float, l2: bool, max_tokens: int, max_seqs: int,
              target: str):
    """The one-op KDA artifact for these shapes (compiled once, cached)."""
    from . import compile, _cache_dir
    text = _MODEL.format(H=H, K=K, V=V, scale=float(scale), l2=", use_qk_l2norm" if l2 else "")
    d = _cache_dir() / "ops"
    d.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    src = d / f"chunk_kda-{digest}.mlir"
    if not src.is_file():
        tmp = src.with_name(src.name + f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, src)
    return compile(src, None, max_tokens=max_tokens, max_seqs=max_seqs,
                   target=None if target == "cpu" else target)


def _session(H: int, K: int, V: int, scale: float, l2: bool, max_tokens: int, max_seqs: int,
             device: str):
    from . import Session
    key = (H, K, V, scale, l2, max_tokens, max_seqs, device)
    if key not in _sessions:
        target = "cuda" if device.startswith("cuda") else "cpu"
        _sessions[key] = Session(_artifact(H, K, V, scale, l2, max_tokens, max_seqs, target),
                                 device=device)
    return _sessions[key]


def bucket(B: int, T: int, N: int) -> Tuple[int, int]:
    """(max_tokens, max_seqs) of the artifact chunk_kda uses for B*T tokens
    in N sequences."""
    return _pow2(B * T, 64), _pow2(N, 1)


def chunk_kda(q: Any, k: Any, v: Any, g: Any, beta: Any, scale: Optional[float] = None,
              initial_state: Any = None, output_final_state: bool = False,
              use_qk_l2norm_in_kernel: bool = False, cu_seqlens: Any = None,
              **kwargs: Any) -> Tuple[Any, Any]:
    """fla's ``chunk_kda``: gated delta rule with per-channel decay.

    q, k, g ``[B, T, H, K]`` (g the log-decay), v ``[B, T, H, V]``, beta
    ``[B, T, H]`` (already in (0, 1)), initial_state ``[N, H, K, V]``;
    cu_seqlens ``[N + 1]`` packs N sequences into B = 1. Returns
    ``(o [B, T, H, V] in v's dtype, final_state [N, H, K, V] f32 or None)``,
    NumPy for NumPy inputs, torch tensors for torch inputs (on their device).
    Computed in f32 by K3's KDA kernels (chunkwise on the CPU; on CUDA the
    kernels k3-opt picks for target=cuda)."""
    if kwargs:
        raise K3Error(f"chunk_kda: unsupported arguments {', '.join(sorted(kwargs))} (the in-kernel "
                      "gate of newer fla versions is not exposed; pass g as the log-decay)")
    args = {"q": q, "k": k, "v": v, "g": g, "beta": beta}
    devices = {n: _device_of(x) for n, x in args.items()}
    if initial_state is not None:
        devices["initial_state"] = _device_of(initial_state)
    if cu_seqlens is not None:
        devices["cu_seqlens"] = _device_of(cu_seqlens)
    if len(set(devices.values())) != 1:
        raise K3Error("chunk_kda: tensors on different devices: " +
                      ", ".join(f"{n} on {d}" for n, d in devices.items()))
    device = devices["q"]
    if not (device == "cpu" or device.startswith("cuda:")):
        raise K3Error(f"chunk_kda: tensors on {device}: only cpu and cuda are supported")
    shapes = {n: tuple(x.shape) for n, x in args.items()}
    for n, r in (("q", 4), ("k", 4), ("v", 4), ("g", 4), ("beta", 3)):
        if len(shapes[n]) != r:
            raise K3Error(f"chunk_kda: {n} has shape {list(shapes[n])}, expected rank {r}")
    B, T, H, K = shapes["q"]
    V = shapes["v"][3]
    for n, want in (("k", (B, T, H, K)), ("g", (B, T, H, K)), ("v", (B, T, H, V)),
                    ("beta", (B, T, H))):
        if shapes[n] != want:
            raise K3Error(f"chunk_kda: {n} has shape {list(shapes[n])}, expected {list(want)}")
    if cu_seqlens is not None:
        if B != 1:
            raise K3Error(f"chunk_kda: with cu_seqlens the batch must be 1, got B = {B}")
        cu = np.asarray(cu_seqlens.cpu() if _is_torch(cu_seqlens) else cu_seqlens)
        if cu.dtype.kind not in "iu" or cu.ndim != 1 or cu.size < 2 or cu[0] != 0 or \
                cu[-1] != T or np.any(np.diff(cu) < 0):
            raise K3Error(f"chunk_kda: cu_seqlens must be non-decreasing integers from 0 to T = {T}")
        cu = cu.astype(np.int32)
    else:
        cu = (np.arange(B + 1) * T).astype(np.int32)
    N = cu.size - 1
    if initial_state is not None and tuple(initial_state.shape) != (N, H, K, V):
        raise K3Error(f"chunk_kda: initial_state has shape {list(initial_state.shape)}, expected "
                      f"{[N, H, K, V]}")
    scale = K ** -0.5 if scale is None else float(scale)
    s = _session(H, K, V, scale, bool(use_qk_l2norm_in_kernel), *bucket(B, T, N), device)
    if device == "cpu":
        feed = {n: _host_f32(n, x, len(shapes[n])).reshape((1, B * T) + shapes[n][2:])
                for n, x in args.items()}
        feed["initial_state"] = np.zeros((N, H, K, V), np.float32) if initial_state is None \
            else _host_f32("initial_state", initial_state, 4)
        feed["cu_seqlens"] = cu
        out = s.run(**feed)
        o = out["o"].reshape(B, T, H, V)
        fs = out["final_state"]
        vdt = np.asarray(v).dtype if not _is_torch(v) else None
        if _is_torch(v):
            import torch
            return (torch.from_numpy(o).to(v.dtype),
                    torch.from_numpy(fs) if output_final_state else None)
        return o.astype(vdt, copy=False), (fs if output_final_state else None)
    # CUDA: torch tensors on the device, by address (no host copy).
    import torch
    feed = {n: x.reshape((1, B * T) + tuple(x.shape[2:])).float().contiguous()
            for n, x in args.items()}
    feed["initial_state"] = torch.zeros((N, H, K, V), dtype=torch.float32, device=q.device) \
        if initial_state is None else initial_state.float().contiguous()
    feed["cu_seqlens"] = torch.as_tensor(cu, device=q.device)
    out = s.run(outputs="dlpack", **feed)
    o = torch.from_dlpack(out["o"]).reshape(B, T, H, V).to(v.dtype, copy=True)
    fs = torch.from_dlpack(out["final_state"]).clone() if output_final_state else None
    return o, fs
