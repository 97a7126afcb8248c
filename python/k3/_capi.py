"""ctypes declarations of the K3 runtime C API (runtime/include/k3/k3_runtime.h)."""
from __future__ import annotations

import ctypes
import os
import shutil
from ctypes import POINTER, c_char_p, c_int, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import Optional

API_VERSION = 4
MAX_RANK = 8
LIB_NAME = "libk3runtime.so"


class K3Error(RuntimeError):
    """A failed runtime (or compiler) call. ``status`` is the k3_status name
    (``INVALID_ARGUMENT``, ``IO``, ``FORMAT``, ``NO_DEVICE``, ``DEVICE``,
    ``WEIGHTS``, ``INTERNAL``, ``OUT_OF_MEMORY``; ``COMPILE`` for k3-opt
    failures) and the message
    is the runtime's one-line error."""

    def __init__(self, message: str, status: str = "INVALID_ARGUMENT", code: int = 1):
        super().__init__(message)
        self.status = status
        self.code = code


class SymbolValue(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_int64)]


class HostTensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int32),
                ("shape", POINTER(c_int64)), ("data", c_void_p), ("nbytes", c_size_t)]


class TensorView(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int32),
                ("shape", c_int64 * MAX_RANK), ("data", c_void_p), ("nbytes", c_size_t)]


class TensorSpec(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int32),
                ("max_shape", c_int64 * MAX_RANK)]


class BufferInfo(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("kind", c_int), ("size", c_uint64),
                ("per_seq_stride", c_uint64), ("device", c_uint32), ("flags", c_uint32)]


class KernelProfile(ctypes.Structure):
    _fields_ = [("entry", c_char_p), ("kernel", c_char_p), ("calls", c_uint64), ("runs", c_uint64),
                ("total_ms", ctypes.c_double), ("min_ms", ctypes.c_double),
                ("max_ms", ctypes.c_double), ("share", ctypes.c_double),
                ("grid", c_int64 * 3), ("block", c_int64 * 3), ("dims_varied", c_int32)]


class LoadStats(ctypes.Structure):
    _fields_ = [("bytes", c_uint64), ("files", c_uint64), ("seconds", ctypes.c_double)]


# k3_progress_fn: (user, bytes done, bytes in all).
PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)


class SamplingParams(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_k", c_int32), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repetition_penalty", ctypes.c_float),
                ("seed", c_uint64), ("stream", c_uint64)]


class SequenceRequest(ctypes.Structure):
    _fields_ = [("prompt", POINTER(c_int32)), ("prompt_len", c_size_t),
                ("max_new_tokens", c_int64), ("sampling", SamplingParams),
                ("stop_tokens", POINTER(c_int32)), ("num_stop_tokens", c_size_t)]


class DeviceTensorC(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int32),
                ("shape", POINTER(c_int64)), ("data", c_uint64), ("nbytes", c_size_t)]


class DeviceView(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("rank", c_int32),
                ("shape", c_int64 * MAX_RANK), ("data", c_uint64), ("nbytes", c_size_t),
                ("device_type", c_int32), ("device_id", c_int32)]


def _candidates() -> list[Path]:
    out: list[Path] = []
    env = os.environ.get("K3_RUNTIME_LIB")
    if env:
        return [Path(env)]
    bin_dir = os.environ.get("K3_BIN_DIR")
    prefixes = []
    if bin_dir:
        prefixes.append(Path(bin_dir).resolve().parent)
    k3run = shutil.which("k3-run")
    if k3run:
        prefixes.append(Path(k3run).resolve().parent.parent)
    if bin_dir:
        out += [prefixes[0] / "lib" / LIB_NAME, prefixes[0] / "runtime" / LIB_NAME]
    # A copy bundled into the installed package (k3/_lib).
    out.append(Path(__file__).resolve().parent / "_lib" / LIB_NAME)
    for p in prefixes[1 if bin_dir else 0:]:  # installed (lib/) or a build tree (runtime/)
        out += [p / "lib" / LIB_NAME, p / "runtime" / LIB_NAME]
    # The source tree's builds, newest first (not the sanitizer/fuzzer ones,
    # which cannot be loaded into an uninstrumented python).
    root = Path(__file__).resolve().parents[2]
    builds = [p for pat in ("build*/lib/", "build*/runtime/") for p in root.glob(pat + LIB_NAME)
              if not any(t in p.parts[-3] for t in ("san", "fuzz"))]
    out += sorted(builds, key=lambda p: -p.stat().st_mtime)
    return out


def find_runtime_library() -> Path:
    """Where libk3runtime.so is: $K3_RUNTIME_LIB; $K3_BIN_DIR/../lib (or
    ../runtime); the copy bundled in the package (k3/_lib); next to k3-run on
    PATH (../lib, ../runtime); the newest build*/{lib,runtime} of the source
    tree."""
    tried = _candidates()
    for p in tried:
        if p.is_file():
            return p
    raise K3Error(f"cannot find {LIB_NAME} (tried: {', '.join(map(str, tried)) or 'nothing'}); "
                  "set K3_RUNTIME_LIB or K3_BIN_DIR", "IO", 2)


_lib: Optional[ctypes.CDLL] = None


def lib() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    path = find_runtime_library()
    L = ctypes.CDLL(str(path))
    P = c_void_p
    sigs = {
        "k3_runtime_api_version": (c_int, []),
        "k3_last_error": (c_char_p, []),
        "k3_status_name": (c_char_p, [c_int]),
        "k3_session_random_weights_place": (c_char_p, [c_void_p]),
        "k3_artifact_open": (c_int, [c_char_p, POINTER(P)]),
        "k3_artifact_close": (None, [P]),
        "k3_artifact_metadata": (c_char_p, [P, c_char_p]),
        "k3_artifact_num_metadata": (c_size_t, [P]),
        "k3_artifact_metadata_key": (c_char_p, [P, c_size_t]),
        "k3_artifact_num_entries": (c_size_t, [P]),
        "k3_artifact_entry_name": (c_char_p, [P, c_size_t]),
        "k3_artifact_num_weights": (c_size_t, [P]),
        "k3_artifact_num_symbols": (c_size_t, [P]),
        "k3_artifact_symbol_name": (c_char_p, [P, c_size_t]),
        "k3_artifact_symbol_max": (c_int64, [P, c_size_t]),
        "k3_artifact_num_buffers": (c_size_t, [P]),
        "k3_artifact_buffer_info": (c_int, [P, c_size_t, POINTER(BufferInfo)]),
        "k3_artifact_entry_num_inputs": (c_size_t, [P, c_size_t]),
        "k3_artifact_entry_num_outputs": (c_size_t, [P, c_size_t]),
        "k3_artifact_entry_input": (c_int, [P, c_size_t, c_size_t, POINTER(TensorSpec)]),
        "k3_artifact_entry_output": (c_int, [P, c_size_t, c_size_t, POINTER(TensorSpec)]),
        "k3_session_create": (c_int, [P, c_char_p, POINTER(P)]),
        "k3_session_create_mpi": (c_int, [P, c_char_p, POINTER(P)]),
        "k3_session_rank": (c_uint32, [P]),
        "k3_session_destroy": (None, [P]),
        "k3_session_device_name": (c_char_p, [P]),
        "k3_session_load_weights": (c_int, [P, POINTER(c_char_p), c_size_t]),
        "k3_session_set_load_progress": (None, [P, PROGRESS_FN, c_void_p]),
        "k3_session_load_stats": (None, [P, POINTER(LoadStats)]),
        "k3_session_init_random_weights": (c_int, [P, c_uint64]),
        "k3_session_set_weight": (c_int, [P, c_char_p, c_void_p, c_size_t]),
        "k3_session_reset_state": (c_int, [P, c_int64]),
        "k3_session_run": (c_int, [P, c_char_p, POINTER(SymbolValue), c_size_t,
                                   POINTER(HostTensor), c_size_t]),
        "k3_session_num_outputs": (c_size_t, [P]),
        "k3_session_output": (c_int, [P, c_size_t, POINTER(TensorView)]),
        "k3_session_find_output": (c_int, [P, c_char_p, POINTER(TensorView)]),
        "k3_session_read_buffer": (c_int, [P, c_size_t, c_void_p, c_size_t]),
        "k3_session_graph_stats": (None, [P, POINTER(c_size_t), POINTER(c_size_t)]),
        "k3_session_graph_lanes": (None, [P, POINTER(c_size_t), POINTER(c_size_t)]),
        "k3_session_fetch_outputs": (c_int, [P]),
        "k3_session_run_device": (c_int, [P, c_char_p, POINTER(SymbolValue), c_size_t,
                                          POINTER(DeviceTensorC), c_size_t]),
        "k3_session_output_device": (c_int, [P, c_char_p, POINTER(DeviceView)]),
        "k3_session_set_profiling": (c_int, [P, c_int]),
        "k3_session_reset_profile": (c_int, [P]),
        "k3_session_clock_name": (c_char_p, [P]),
        "k3_session_profile_snapshot": (c_size_t, [P, c_char_p]),
        "k3_session_profile_kernel": (c_int, [P, c_size_t, POINTER(KernelProfile)]),
        "k3_session_time": (c_int, [P, c_char_p, POINTER(SymbolValue), c_size_t,
                                    POINTER(HostTensor), c_size_t, c_int32, c_int32,
                                    POINTER(ctypes.c_double)]),
        "k3_session_time_device": (c_int, [P, c_char_p, POINTER(SymbolValue), c_size_t,
                                           POINTER(DeviceTensorC), c_size_t, c_int32, c_int32,
                                           POINTER(ctypes.c_double)]),
        "k3_sampling_params_init": (None, [POINTER(SamplingParams)]),
        "k3_sample": (c_int, [c_void_p, c_int64, POINTER(SamplingParams), POINTER(c_int32),
                              c_size_t, c_uint64, POINTER(c_int32)]),
        "k3_generation_start": (c_int, [P, c_char_p, POINTER(SequenceRequest), c_size_t,
                                        POINTER(P)]),
        "k3_generation_step": (c_int, [P, POINTER(c_int32), POINTER(c_size_t)]),
        "k3_generation_stop": (c_int, [P, c_size_t]),
        "k3_generation_finish_reason": (c_int, [P, c_size_t]),
        "k3_generation_timing": (None, [P, POINTER(ctypes.c_double), POINTER(ctypes.c_double),
                                        POINTER(c_size_t)]),
        "k3_generation_destroy": (None, [P]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(L, name)
        fn.restype = res
        fn.argtypes = args
    version = L.k3_runtime_api_version()
    if version != API_VERSION:
        raise K3Error(f"{path}: runtime API version {version}, the bindings need {API_VERSION}",
                      "INTERNAL", 7)
    _lib = L
    return L


STATUS_NAMES = {1: "INVALID_ARGUMENT", 2: "IO", 3: "FORMAT", 4: "NO_DEVICE", 5: "DEVICE",
                6: "WEIGHTS", 7: "INTERNAL", 8: "OUT_OF_MEMORY"}


def check(status: int) -> None:
    """Raises K3Error with the runtime's one-line last error unless ``status`` is K3_OK."""
    if status == 0:
        return
    msg = (lib().k3_last_error() or b"").decode("utf-8", "replace")
    raise K3Error(msg or f"k3 runtime error {status}", STATUS_NAMES.get(status, "INTERNAL"), status)
