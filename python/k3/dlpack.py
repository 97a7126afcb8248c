"""DLPack in and out of a session (docs/python.md, "DLPack and PyTorch").

Inputs: anything with ``__dlpack__`` / ``__dlpack_device__`` (a torch
tensor, a CuPy array, a NumPy array) or a ``"dltensor"`` capsule. On a CPU
session CPU tensors are read in place; on a CUDA session CUDA tensors on the
session's device are handed to ``k3_session_run_device`` by address (copied
device to device into the plan's input buffers; no host copy).

Outputs: ``DeviceTensor`` objects that alias the session's output buffers
(no copy; valid until the session's next run, which overwrites them) and
implement ``__dlpack__``, so ``torch.from_dlpack(out["logits"])`` is a
tensor on the session's device with the same data pointer.
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_int32, c_int64, c_uint8, c_uint16, c_uint64, c_void_p
from typing import Any, Optional

import numpy as np

from ._capi import K3Error

kDLCPU, kDLCUDA, kDLCUDAHost = 1, 2, 3
DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                10: "rocm", 13: "cuda_managed", 14: "oneapi"}
# k3 dtype name <-> DLPack (code, bits): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4
_TO_DL = {"i32": (0, 32), "f32": (2, 32), "f16": (2, 16), "bf16": (4, 16)}
_FROM_DL = {v: k for k, v in _TO_DL.items()}
_DL_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", _Deleter)]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [c_void_p, ctypes.c_char_p, c_void_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]

# Exported tensors alive in a consumer: manager address -> what keeps the
# memory (the session) and the structs alive.
_live: dict[int, Any] = {}


@_Deleter
def _dl_deleter(managed: int) -> None:
    _live.pop(managed, None)


_CapsuleDestructor = ctypes.CFUNCTYPE(None, c_void_p)


@_CapsuleDestructor
def _capsule_destructor(capsule: int) -> None:
    # Not consumed (still named "dltensor"): the producer frees.
    obj = ctypes.cast(capsule, ctypes.py_object)
    try:
        if _api.PyCapsule_IsValid(obj, b"dltensor"):
            managed = _api.PyCapsule_GetPointer(obj, b"dltensor")
            _live.pop(managed, None)
    except Exception:  # never raise out of a destructor
        pass


class ForeignTensor:
    """A DLPack producer's tensor, described: device, address, shape, dtype."""

    def __init__(self, device_type: int, device_id: int, ptr: int, shape: tuple,
                 dtype: Optional[str], dl_dtype: tuple, keep: Any):
        self.device_type, self.device_id = device_type, device_id
        self.ptr, self.shape, self.dtype, self.dl_dtype = ptr, shape, dtype, dl_dtype
        self.keep = keep
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * (dl_dtype[1] // 8)

    @property
    def device(self) -> str:
        name = DEVICE_NAMES.get(self.device_type, f"device type {self.device_type}")
        return name if self.device_type == kDLCPU else f"{name}:{self.device_id}"

    def dtype_name(self) -> str:
        code, bits = self.dl_dtype
        return f"{_DL_NAMES.get(code, f'code{code}')}{bits}"

    def numpy(self) -> np.ndarray:
        """A NumPy view (CPU tensors only); keeps the producer's tensor alive."""
        from . import _np_dtype
        if self.device_type != kDLCPU:
            raise K3Error(f"tensor on {self.device} cannot be viewed as a NumPy array")
        if self.dtype is None:
            raise K3Error(f"dtype {self.dtype_name()} is not a K3 dtype (bf16, f16, f32, i32)")
        if self.nbytes == 0:
            return np.zeros(self.shape, _np_dtype(self.dtype))
        buf = (ctypes.c_uint8 * self.nbytes).from_address(self.ptr)
        buf._k3_keep = self.keep  # the array's base keeps the producer alive
        return np.frombuffer(buf, np.uint8).view(_np_dtype(self.dtype)).reshape(self.shape)


def is_dlpack(x: Any) -> bool:
    return (hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__")
            and not isinstance(x, np.ndarray)) or type(x).__name__ == "PyCapsule"


def from_dlpack(x: Any, name: str = "tensor") -> ForeignTensor:
    """Reads a DLPack producer (or a "dltensor" capsule) without copying.
    Raises K3Error for non-contiguous tensors."""
    if type(x).__name__ == "PyCapsule":
        cap = x
    else:
        dev_type, _ = x.__dlpack_device__()
        # CUDA: stream 1 = the legacy default stream, which the runtime's
        # copies use; the producer orders its pending work before it.
        cap = x.__dlpack__(stream=1) if int(dev_type) == kDLCUDA else x.__dlpack__()
    if not _api.PyCapsule_IsValid(cap, b"dltensor"):
        raise K3Error(f"input '{name}': not an unconsumed DLPack capsule "
                      f"(name {_api.PyCapsule_GetName(cap)!r})")
    m = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(cap, b"dltensor"))
    t = m.dl_tensor
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.dtype.lanes != 1:
        raise K3Error(f"input '{name}': vector dtypes (lanes {t.dtype.lanes}) are not supported")
    if t.strides:
        want, expect = 1, []
        for d in reversed(shape):
            expect.append(want)
            want *= d
        got = [t.strides[i] for i in range(t.ndim)]
        if any(g != e for g, e, d in zip(got, reversed(expect), shape) if d > 1):
            raise K3Error(f"input '{name}': tensor is not contiguous (strides {got}, shape "
                          f"{list(shape)}); call .contiguous() first")
    key = (t.dtype.code, t.dtype.bits)
    return ForeignTensor(t.device.device_type, t.device.device_id,
                         (t.data or 0) + t.byte_offset, shape, _FROM_DL.get(key), key,
                         (x, cap))


class DeviceTensor:
    """An output buffer of a session, on its device, without a copy. Valid
    until the session runs again (the next run overwrites it: clone what you
    keep). ``torch.from_dlpack(t)`` / ``np.from_dlpack(t)`` (CPU) alias it."""

    def __init__(self, session: Any, name: str, dtype: str, shape: tuple, ptr: int,
                 device_type: int, device_id: int, nbytes: int):
        self.session, self.name, self.dtype, self.shape = session, name, dtype, shape
        self.data_ptr, self.device_type, self.device_id = ptr, device_type, device_id
        self.nbytes = nbytes

    @property
    def device(self) -> str:
        return "cpu" if self.device_type == kDLCPU else f"cuda:{self.device_id}"

    def __dlpack_device__(self) -> tuple:
        return (self.device_type, self.device_id)

    def __dlpack__(self, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        if copy:
            raise BufferError("k3 outputs are exported without copies (copy=True refused)")
        shape = (c_int64 * max(len(self.shape), 1))(*self.shape)
        m = DLManagedTensor()
        m.dl_tensor.data = self.data_ptr
        m.dl_tensor.device = DLDevice(self.device_type, self.device_id)
        m.dl_tensor.ndim = len(self.shape)
        code, bits = _TO_DL[self.dtype]
        m.dl_tensor.dtype = DLDataType(code, bits, 1)
        m.dl_tensor.shape = shape
        m.dl_tensor.strides = None
        m.dl_tensor.byte_offset = 0
        m.manager_ctx = None
        m.deleter = _dl_deleter
        addr = ctypes.addressof(m)
        _live[addr] = (m, shape, self.session)
        return _api.PyCapsule_New(addr, b"dltensor",
                                  ctypes.cast(_capsule_destructor, c_void_p).value)

    def numpy(self) -> np.ndarray:
        """A NumPy view (CPU sessions), aliasing the output buffer."""
        if self.device_type != kDLCPU:
            raise K3Error(f"output '{self.name}' is on {self.device}: use torch.from_dlpack")
        return from_dlpack(self.__dlpack__(), self.name).numpy()

    def __repr__(self) -> str:
        return (f"DeviceTensor({self.name!r}, {self.dtype}, {list(self.shape)}, {self.device}, "
                f"ptr=0x{self.data_ptr:x})")
