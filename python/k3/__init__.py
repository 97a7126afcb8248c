"""Python layer of the K3 compiler and runtime (docs/python.md).

    import k3
    k3.compile("examples/tiny_k3.mlir", "tiny.k3bin", max_tokens=256, max_seqs=4)
    s = k3.Session(k3.Artifact("tiny.k3bin"))
    s.random_weights(1)
    out = s.run(token_ids=ids, cu_seqlens=cu, context_lens=zeros)  # a prompt: {"logits": ..., ...}
    out = s.run("forward_decode", token_ids=next_ids, cu_seqlens=cu1, context_lens=ctx)  # continue
    s.generate([1, 2, 3], max_new_tokens=8)

Bindings are ctypes over libk3runtime.so (k3/k3_runtime.h); inputs and
outputs are numpy arrays (bf16 as ml_dtypes.bfloat16).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _capi
from ._capi import K3Error, find_runtime_library
from ._format import Dim, EntryInfo, TensorInfo, WeightInfo, parse

from .tokenizer import IncrementalDecoder, Tokenizer, load_tokenizer  # noqa: E402

__all__ = ["Artifact", "Session", "K3Error", "compile", "find_runtime_library", "find_tool",
           "EntryInfo", "TensorInfo", "WeightInfo", "Dim", "BufferInfo", "Tokenizer",
           "load_tokenizer", "IncrementalDecoder", "GenerationStats", "LoadStats", "sample",
           "load", "import_config"]

PathLike = Union[str, os.PathLike]
BUFFER_KINDS = ("arena", "input", "output", "state")
_K3_DTYPES = {"bf16": 0, "f16": 1, "f32": 2, "i32": 3}
_NAMES = {v: k for k, v in _K3_DTYPES.items()}


def _np_dtype(name: str) -> np.dtype:
    if name == "bf16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype({"f16": np.float16, "f32": np.float32, "i32": np.int32}[name])


def _k3_dtype(dt: np.dtype) -> Optional[str]:
    if dt == np.float32:
        return "f32"
    if dt == np.float16:
        return "f16"
    if dt == np.int32:
        return "i32"
    if dt.name == "bfloat16":
        return "bf16"
    return None


class BufferInfo:
    """A plan buffer (artifact BUFS section)."""

    def __init__(self, index: int, info: _capi.BufferInfo):
        self.index = index
        self.name: str = info.name.decode()
        self.kind: str = BUFFER_KINDS[info.kind]
        self.size: int = int(info.size)
        self.per_seq_stride: int = int(info.per_seq_stride)
        self.device: int = int(info.device)

    def __repr__(self) -> str:
        return f"BufferInfo({self.name!r}, {self.kind}, size={self.size}, stride={self.per_seq_stride})"


class Artifact:
    """An opened, fully validated .k3bin."""

    def __init__(self, path: PathLike):
        self.path = Path(path)
        L = _capi.lib()
        h = ctypes.c_void_p()
        _capi.check(L.k3_artifact_open(os.fsencode(self.path), ctypes.byref(h)))
        self._h = h
        try:
            self.weights, entries = parse(self.path.read_bytes())
        except Exception as e:  # the runtime accepted it, so this is our bug
            self.close()
            raise K3Error(f"{self.path}: cannot read the manifest: {e}", "INTERNAL", 7) from e
        self._entries = {e.name: e for e in entries}
        n = L.k3_artifact_num_metadata(h)
        keys = [L.k3_artifact_metadata_key(h, i).decode() for i in range(n)]
        self.metadata: dict[str, str] = {
            k: L.k3_artifact_metadata(h, k.encode()).decode("utf-8", "replace") for k in keys}
        self.symbols: dict[str, int] = {
            L.k3_artifact_symbol_name(h, i).decode(): int(L.k3_artifact_symbol_max(h, i))
            for i in range(L.k3_artifact_num_symbols(h))}
        self.buffers: list[BufferInfo] = []
        for i in range(L.k3_artifact_num_buffers(h)):
            info = _capi.BufferInfo()
            _capi.check(L.k3_artifact_buffer_info(h, i, ctypes.byref(info)))
            self.buffers.append(BufferInfo(i, info))

    @property
    def entries(self) -> dict[str, EntryInfo]:
        """Entry points by name, with their inputs/outputs and symbolic shapes."""
        return dict(self._entries)

    def entry(self, name: str) -> EntryInfo:
        if name not in self._entries:
            raise K3Error(f"unknown entry '{name}' (entries: {', '.join(self._entries)})")
        return self._entries[name]

    @property
    def vocab_size(self) -> Optional[int]:
        v = self.metadata.get("vocab_size")
        return int(v) if v and v.isdigit() else None

    @property
    def max_tokens(self) -> Optional[int]:
        return self.symbols.get("num_tokens")

    @property
    def max_seqs(self) -> Optional[int]:
        return self.symbols.get("num_seqs")

    def state_buffers(self) -> list[BufferInfo]:
        return [b for b in self.buffers if b.kind == "state"]

    def close(self) -> None:
        if getattr(self, "_h", None):
            _capi.lib().k3_artifact_close(self._h)
            self._h = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> "Artifact":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Artifact({str(self.path)!r}, model={self.metadata.get('model_name')!r}, "
                f"entries={list(self._entries)}, weights={len(self.weights)})")


class _Shape:
    """Stands for an array in infer_symbols (only its shape is read)."""

    def __init__(self, shape: tuple):
        self.shape = shape


class Session:
    """Device allocations of one artifact: weights, persistent decode state
    (carried across run() calls) and the activation arena."""

    def __init__(self, artifact: Union[Artifact, PathLike], device: str = "cpu",
                 tokenizer: Optional["Tokenizer"] = None, mpi: bool = False):
        """With ``mpi=True`` this process is one rank of a partitioned
        artifact in a job started by ``mpirun -np N`` (the CPU target; Open
        MPI loaded at run time; docs/scaling.md): every process makes its
        session and the same calls, and ``rank`` tells them apart."""
        self.artifact = artifact if isinstance(artifact, Artifact) else Artifact(artifact)
        self.tokenizer = tokenizer
        self.last_generation: Optional[GenerationStats] = None
        self.last_load: Optional[LoadStats] = None
        L = _capi.lib()
        h = ctypes.c_void_p()
        create = L.k3_session_create_mpi if mpi else L.k3_session_create
        _capi.check(create(self.artifact._h, device.encode(), ctypes.byref(h)))
        self._h = h
        self.device: str = L.k3_session_device_name(h).decode()
        self.rank: int = int(L.k3_session_rank(h))

    # -- weights and state -------------------------------------------------
    def load_weights(self, paths: Union[PathLike, Sequence[PathLike]],
                     progress: Optional[Callable[[int, int], None]] = None) -> "LoadStats":
        """Loads .safetensors files, sharded *.index.json files and/or
        checkpoint directories. `progress(bytes_done, bytes_total)` is called
        at most about ten times a second and once at the end. Returns the
        load's LoadStats (also kept as `last_load`)."""
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        arr = (ctypes.c_char_p * len(paths))(*[os.fsencode(p) for p in paths])
        L = _capi.lib()
        # Kept referenced until the call returns (ctypes frees it otherwise).
        callback = _capi.PROGRESS_FN(lambda _user, done, total: progress(done, total)) \
            if progress else _capi.PROGRESS_FN()
        L.k3_session_set_load_progress(self._h, callback, None)
        try:
            _capi.check(L.k3_session_load_weights(self._h, arr, len(paths)))
        finally:
            L.k3_session_set_load_progress(self._h, _capi.PROGRESS_FN(), None)
        st = _capi.LoadStats()
        L.k3_session_load_stats(self._h, ctypes.byref(st))
        self.last_load = LoadStats(st.bytes, st.files, st.seconds)
        return self.last_load

    def set_weight(self, name: str, data: np.ndarray) -> None:
        """Weight ``name`` from a host array holding its bytes in the
        manifest's dtype and layout: bf16 as uint16 or ml_dtypes.bfloat16,
        mxfp4 as uint8 (codes ``[.., in/2]`` then scales ``[.., in/32]``,
        flattened). The byte count must be the weight's."""
        a = np.ascontiguousarray(data)
        _capi.check(_capi.lib().k3_session_set_weight(
            self._h, name.encode(), a.ctypes.data, a.nbytes))

    def random_weights(self, seed: int = 0) -> str:
        """Deterministic init from each weight's recipe (docs/runtime.md).
        Returns where the values were made: "device kernels" (the
        artifact's weight-init kernels; the GPU default) or "host threads"
        (the CPU default); K3_RANDOM_WEIGHTS=host|device chooses. The values
        are the same either way."""
        L = _capi.lib()
        _capi.check(L.k3_session_init_random_weights(self._h, seed))
        return L.k3_session_random_weights_place(self._h).decode()

    @property
    def graph_stats(self) -> Tuple[int, int]:
        """(launch graphs captured, runs replayed from one): a run repeating
        the previous run's entry and symbol values (a decode loop) is
        captured once and replayed from then on; K3_LAUNCH_GRAPHS=0 in the
        environment before the session is created turns this off."""
        captured, replayed = ctypes.c_size_t(), ctypes.c_size_t()
        _capi.lib().k3_session_graph_stats(self._h, ctypes.byref(captured), ctypes.byref(replayed))
        return captured.value, replayed.value

    @property
    def graph_lanes(self) -> Tuple[int, int]:
        """(lanes, waits between them) of the last launch graph captured:
        K3_LAUNCH_LANES=n in the environment before the session is created
        lets a graph run launches that share no written bytes side by side
        on up to n lanes; (1, 0) is one lane, in order."""
        lanes, waits = ctypes.c_size_t(), ctypes.c_size_t()
        _capi.lib().k3_session_graph_lanes(self._h, ctypes.byref(lanes), ctypes.byref(waits))
        return lanes.value, waits.value

    def reset_state(self, slot: int = -1) -> None:
        """Zeroes the decode state of one sequence slot, or of all (-1)."""
        _capi.check(_capi.lib().k3_session_reset_state(self._h, slot))

    def state(self, name: str, dtype: Optional[Union[str, np.dtype]] = None) -> np.ndarray:
        """A copy of a state buffer: ``[slots, per_seq_stride]`` bytes (uint8),
        or viewed as ``dtype`` (e.g. "f32") along the last axis."""
        buf = next((b for b in self.artifact.buffers if b.name == name), None)
        if buf is None:
            names = ", ".join(b.name for b in self.artifact.state_buffers())
            raise K3Error(f"no buffer named '{name}' (state buffers: {names})")
        out = np.empty(buf.size, np.uint8)
        _capi.check(_capi.lib().k3_session_read_buffer(
            self._h, buf.index, out.ctypes.data_as(ctypes.c_void_p), out.nbytes))
        if buf.per_seq_stride:
            out = out.reshape(buf.size // buf.per_seq_stride, buf.per_seq_stride)
        if dtype is not None:
            dt = _np_dtype(dtype) if isinstance(dtype, str) and dtype in _K3_DTYPES else np.dtype(dtype)
            out = out.view(dt)
        return out

    # -- running -----------------------------------------------------------
    def infer_symbols(self, entry: str, inputs: Mapping[str, np.ndarray]) -> dict[str, int]:
        """Symbol values read off input shapes whose dims are ``a*sym+b``."""
        found: dict[str, int] = {}
        for t in self.artifact.entry(entry).inputs:
            if t.name not in inputs:
                continue
            x = inputs[t.name]
            shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
            if len(shape) != len(t.shape):
                continue
            for n, d in zip(shape, t.shape):
                if d.sym is not None and d.a > 0 and d.c == 1 and (n - d.b) % d.a == 0 \
                        and d.sym not in found and n - d.b >= 0:
                    found[d.sym] = (n - d.b) // d.a
        return found

    # -- profiling and timing ----------------------------------------------
    @property
    def profiling(self) -> bool:
        """Per-kernel profiling (docs/runtime.md "Profiling and timing"):
        while True every launch is timed (CUDA events; the host clock on the
        CPU) and launch graphs are off. Setting it True starts an empty
        profile."""
        return getattr(self, "_profiling", False)

    @profiling.setter
    def profiling(self, on: bool) -> None:
        _capi.check(_capi.lib().k3_session_set_profiling(self._h, 1 if on else 0))
        self._profiling = bool(on)

    def reset_profile(self) -> None:
        _capi.check(_capi.lib().k3_session_reset_profile(self._h))

    @property
    def clock(self) -> str:
        """What profiles and time() measure with: "CUDA events" or "host steady_clock"."""
        return _capi.lib().k3_session_clock_name(self._h).decode()

    def profile(self, entry: Optional[str] = None) -> list[dict]:
        """Per-kernel aggregates of the profile so far, for one entry or all:
        dicts with entry, kernel, calls, runs (profiled runs of the entry),
        total_ms, min_ms, max_ms, share (of the selection's total; they sum
        to 1), grid and block (of the first launch), dims_varied; sorted by
        total_ms, largest first. Turns profiling on if it was off (the
        profile is then empty)."""
        if not self.profiling:
            self.profiling = True
        L = _capi.lib()
        n = L.k3_session_profile_snapshot(self._h, entry.encode() if entry else None)
        rows = []
        for i in range(n):
            p = _capi.KernelProfile()
            _capi.check(L.k3_session_profile_kernel(self._h, i, ctypes.byref(p)))
            rows.append({"entry": p.entry.decode(), "kernel": p.kernel.decode(), "calls": p.calls,
                         "runs": p.runs, "total_ms": p.total_ms, "min_ms": p.min_ms,
                         "max_ms": p.max_ms, "share": p.share, "grid": tuple(p.grid),
                         "block": tuple(p.block), "dims_varied": bool(p.dims_varied)})
        return rows

    def time(self, entry: str = "forward", symbols: Optional[Mapping[str, int]] = None,
             warmup: int = 5, reps: int = 20, **inputs: object) -> list[float]:
        """Runs ``entry`` warmup + reps times with the same inputs (as run():
        numpy arrays, or DLPack device tensors on a CUDA session) and returns
        the milliseconds of each of the last ``reps`` runs: the whole entry
        between two CUDA events (device time) on the GPU, the host clock on
        the CPU; input copies are outside. Outputs stay on the device (read
        them with run(), or ``outputs="dlpack"`` views after a run)."""
        return self._call(entry, symbols, None, inputs, (int(warmup), int(reps)))

    def run(self, entry: str = "forward", symbols: Optional[Mapping[str, int]] = None,
            outputs: Optional[str] = None, **inputs: object) -> dict:
        """Runs an entry with inputs by name; returns every output.

        Inputs are numpy arrays, lists, or DLPack tensors (torch, CuPy, ...;
        docs/python.md "DLPack and PyTorch"): CPU tensors are read in place;
        on a CUDA session, CUDA tensors on its device go to the runtime by
        address (k3_session_run_device: no host copy). Lists (and
        integer/float arrays of another width) are converted to the declared
        dtype; arrays of the wrong kind are passed as they are and the
        runtime rejects them. Symbols are inferred from the input shapes
        unless given. Token ids are checked against vocab_size.

        ``outputs="numpy"`` (the default for host inputs) returns copies;
        ``outputs="dlpack"`` (the default for device inputs) returns
        ``k3.dlpack.DeviceTensor`` views of the output buffers on the
        session's device, valid until the next run."""
        return self._call(entry, symbols, outputs, inputs, None)

    def _call(self, entry, symbols, outputs, inputs, timing):
        """run() (timing None) or time() (timing = (warmup, reps))."""
        from . import dlpack
        if outputs not in (None, "numpy", "dlpack"):
            raise K3Error(f"outputs={outputs!r}: expected 'numpy' or 'dlpack'")
        info = self.artifact.entry(entry)
        declared = {t.name: t for t in info.inputs}
        foreign = {}
        for name, a in inputs.items():
            if dlpack.is_dlpack(a):
                foreign[name] = f = dlpack.from_dlpack(a, name)
                if name in declared and f.dtype != declared[name].dtype:
                    raise K3Error(f"input '{name}': dtype {f.dtype_name()}, expected "
                                  f"{declared[name].dtype}")
        on_device = {n: f for n, f in foreign.items() if f.device_type != dlpack.kDLCPU}
        if on_device:
            return self._run_device(entry, info, symbols, inputs, on_device, outputs, timing)
        inputs = {n: (foreign[n].numpy() if n in foreign else a) for n, a in inputs.items()}
        arrays: dict[str, np.ndarray] = {}
        for t in info.inputs:
            if t.name not in inputs:
                continue
            a = inputs[t.name]
            want = _np_dtype(t.dtype)
            if not isinstance(a, np.ndarray):
                a = np.asarray(a, dtype=want)
            elif _k3_dtype(a.dtype) is None and a.dtype.kind == want.kind:
                if a.dtype.kind in "iu" and a.size and (a.min() < np.iinfo(want).min or
                                                        a.max() > np.iinfo(want).max):
                    raise K3Error(f"input '{t.name}': values do not fit {t.dtype}")
                a = a.astype(want)
            arrays[t.name] = np.ascontiguousarray(a)
        for name in inputs:
            if name not in arrays:
                known = ", ".join(t.name for t in info.inputs)
                raise K3Error(f"entry '{entry}' has no input '{name}' (inputs: {known})")
        syms = self.infer_symbols(entry, arrays)
        syms.update(symbols or {})
        L = _capi.lib()
        sv = (_capi.SymbolValue * max(len(syms), 1))(
            *[_capi.SymbolValue(k.encode(), int(v)) for k, v in syms.items()])
        shapes = [(ctypes.c_int64 * max(a.ndim, 1))(*a.shape) for a in arrays.values()]
        ht = (_capi.HostTensor * max(len(arrays), 1))()
        for i, ((name, a), shp) in enumerate(zip(arrays.items(), shapes)):
            code = _K3_DTYPES.get(_k3_dtype(a.dtype) or "", -1)
            if code < 0:
                raise K3Error(f"input '{name}': numpy dtype {a.dtype} is not a K3 dtype "
                              f"(expected {next(t.dtype for t in info.inputs if t.name == name)})")
            ht[i] = _capi.HostTensor(name.encode(), code, a.ndim, shp,
                                     a.ctypes.data_as(ctypes.c_void_p), a.nbytes)
        if timing is not None:
            ms = (ctypes.c_double * max(timing[1], 1))()
            _capi.check(L.k3_session_time(self._h, entry.encode(), sv, len(syms), ht, len(arrays),
                                          timing[0], timing[1], ms))
            return list(ms)[:timing[1]]
        _capi.check(L.k3_session_run(self._h, entry.encode(), sv, len(syms), ht, len(arrays)))
        if outputs == "dlpack":
            return self._device_outputs(info)
        return self._numpy_outputs()

    def _numpy_outputs(self) -> dict[str, np.ndarray]:
        L = _capi.lib()
        out: dict[str, np.ndarray] = {}
        for i in range(L.k3_session_num_outputs(self._h)):
            v = _capi.TensorView()
            _capi.check(L.k3_session_output(self._h, i, ctypes.byref(v)))
            dt = _np_dtype(_NAMES[v.dtype])
            shape = tuple(v.shape[j] for j in range(v.rank))
            buf = ctypes.string_at(v.data, v.nbytes) if v.nbytes else b""
            out[v.name.decode()] = np.frombuffer(buf, dtype=dt).reshape(shape).copy()
        return out

    def _device_outputs(self, info: EntryInfo) -> dict:
        from .dlpack import DeviceTensor
        out = {}
        for t in info.outputs:
            v = _capi.DeviceView()
            _capi.check(_capi.lib().k3_session_output_device(self._h, t.name.encode(),
                                                             ctypes.byref(v)))
            out[t.name] = DeviceTensor(self, t.name, _NAMES[v.dtype],
                                       tuple(v.shape[j] for j in range(v.rank)), int(v.data),
                                       int(v.device_type), int(v.device_id), int(v.nbytes))
        return out

    def _run_device(self, entry: str, info: EntryInfo, symbols, inputs, on_device, outputs,
                    timing=None):
        """All inputs on the session's CUDA device: k3_session_run_device."""
        if not self.device.startswith("cuda"):
            n, f = next(iter(on_device.items()))
            raise K3Error(f"input '{n}': tensor on {f.device} but the session runs on "
                          f"{self.device.split(' ')[0]}")
        host = [n for n in inputs if n not in on_device]
        if host:
            raise K3Error(f"inputs {', '.join(host)} are host arrays but "
                          f"{', '.join(on_device)} are device tensors: give all on the device "
                          "or all on the host")
        ordinal = int(self.device.split(" ")[0].split(":")[1]) if ":" in self.device else 0
        for n, f in on_device.items():
            if f.device_type != 2 or f.device_id != ordinal:
                raise K3Error(f"input '{n}': tensor on {f.device} but the session runs on "
                              f"cuda:{ordinal}")
        declared = {t.name for t in info.inputs}
        for n in on_device:
            if n not in declared:
                raise K3Error(f"entry '{entry}' has no input '{n}' (inputs: "
                              f"{', '.join(sorted(declared))})")
        syms = self.infer_symbols(entry, {n: _Shape(f.shape) for n, f in on_device.items()})
        syms.update(symbols or {})
        sv = (_capi.SymbolValue * max(len(syms), 1))(
            *[_capi.SymbolValue(k.encode(), int(v)) for k, v in syms.items()])
        shapes = [(ctypes.c_int64 * max(len(f.shape), 1))(*f.shape) for f in on_device.values()]
        dt = (_capi.DeviceTensorC * len(on_device))()
        for i, ((n, f), shp) in enumerate(zip(on_device.items(), shapes)):
            dt[i] = _capi.DeviceTensorC(n.encode(), _K3_DTYPES[f.dtype], len(f.shape), shp,
                                        f.ptr, f.nbytes)
        if timing is not None:
            ms = (ctypes.c_double * max(timing[1], 1))()
            _capi.check(_capi.lib().k3_session_time_device(self._h, entry.encode(), sv, len(syms),
                                                           dt, len(on_device), timing[0], timing[1],
                                                           ms))
            return list(ms)[:timing[1]]
        _capi.check(_capi.lib().k3_session_run_device(self._h, entry.encode(), sv, len(syms),
                                                      dt, len(on_device)))
        if outputs == "numpy":
            _capi.check(_capi.lib().k3_session_fetch_outputs(self._h))
            return self._numpy_outputs()
        return self._device_outputs(info)

    def generate(self, prompt: Union[str, Sequence[int], Sequence[Union[str, Sequence[int]]]],
                 max_new_tokens: Union[int, Sequence[int]] = 16, *,
                 temperature: Union[float, Sequence[float]] = 0.0,
                 top_k: Union[int, Sequence[int]] = 0,
                 top_p: Union[float, Sequence[float]] = 1.0,
                 min_p: Union[float, Sequence[float]] = 0.0,
                 repetition_penalty: Union[float, Sequence[float]] = 1.0,
                 seed: Union[int, Sequence[int]] = 0,
                 stop_token_ids: Optional[Sequence[int]] = None,
                 stop: Optional[Union[str, Sequence[str]]] = None,
                 ignore_eos: bool = False, chat: bool = False,
                 tokenizer: Optional["Tokenizer"] = None,
                 stream: bool = False, entry: str = "forward"):
        """Generates from one prompt or a batch (up to the artifact's max_seqs,
        of different lengths, each in its own state slot), through the
        runtime's generation loop (k3_generation_*: packed prefill, then
        decode steps through ``<entry>_decode`` when the artifact has it).

        A prompt is token ids or text (text needs a tokenizer: this
        argument or the session's; ``chat=True`` applies its chat template
        first). Sampling settings are one value for all sequences or one per
        sequence; ``temperature=0`` (the default) is greedy and exact. With
        one ``seed`` for a batch, sequence i draws from RNG stream i; with a
        list of seeds, every sequence uses stream 0 of its seed, so its
        tokens do not depend on the rest of the batch. Generation of a
        sequence ends after ``max_new_tokens``, a ``stop_token_ids`` id or the
        tokenizer's eos ids (unless ``ignore_eos``), or a ``stop`` string
        (text mode: the text is cut before it).

        Returns what was given: ids -> list of ids, text -> text; a batch ->
        a list of those. ``stream=True`` returns an iterator instead: of new
        ids (ids) or text pieces (text) for one prompt, of ``(i, piece)`` for
        a batch. ``self.last_generation`` holds timings and finish reasons."""
        tok = tokenizer or self.tokenizer
        batch = not isinstance(prompt, str) and len(prompt) > 0 and \
            (isinstance(prompt[0], str) or hasattr(prompt[0], "__len__"))
        prompts = list(prompt) if batch else [prompt]
        text = isinstance(prompts[0], str)
        if any(isinstance(p, str) != text for p in prompts):
            raise K3Error("generate: mix of text and token-id prompts")
        if (text or chat or stop) and tok is None:
            raise K3Error("generate: a text prompt, chat=True or stop strings need a tokenizer "
                          "(Session(..., tokenizer=k3.load_tokenizer(DIR)) or tokenizer=)")
        ids: list[list[int]] = []
        for p in prompts:
            if chat:
                p = tok.apply_chat_template(p if text else tok.decode(p))
                ids.append(tok.encode(p))
            elif text:
                ids.append(tok.encode(p))
            else:
                ids.append([int(t) for t in np.asarray(p).reshape(-1)])
        n = len(ids)

        def per(name: str, v: object) -> list:
            if isinstance(v, (list, tuple, np.ndarray)):
                if len(v) != n:
                    raise K3Error(f"generate: {name} has {len(v)} values for {n} prompts")
                return list(v)
            return [v] * n
        maxn = per("max_new_tokens", max_new_tokens)
        seeds = per("seed", seed)
        stops = [int(t) for t in (stop_token_ids or [])]
        if tok is not None and not ignore_eos:
            stops += [t for t in tok.eos_token_ids if t not in stops]
        params = []
        for i, (T, K, P, M, R) in enumerate(zip(per("temperature", temperature), per("top_k", top_k),
                                                per("top_p", top_p), per("min_p", min_p),
                                                per("repetition_penalty", repetition_penalty))):
            sp = _capi.SamplingParams()
            _capi.lib().k3_sampling_params_init(ctypes.byref(sp))
            sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.repetition_penalty = \
                float(T), int(K), float(P), float(M), float(R)
            sp.seed = int(seeds[i]) & (2**64 - 1)
            sp.stream = 0 if isinstance(seed, (list, tuple, np.ndarray)) else i
            params.append(sp)
        stop_strings = [stop] if isinstance(stop, str) else list(stop or [])
        gen = _Generation(self, entry, ids, maxn, params, stops)
        it = gen.run(tok if (text or stop_strings) else None, stop_strings, text)
        if stream:
            return (piece if batch else piece[1] for piece in it)
        for _ in it:
            pass
        out = gen.texts if text else gen.tokens
        return out if batch else out[0]

    def close(self) -> None:
        if getattr(self, "_h", None):
            _capi.lib().k3_session_destroy(self._h)
            self._h = None

    def __del__(self) -> None:
        self.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


FINISH_REASONS = ("running", "length", "stop_token", "stop_string")


def _size_text(n: int) -> str:
    """13.1 GB, 2.0 kB: decimal units, as GB/s are (k3-run's)."""
    v, unit = float(n), 0
    units = ("B", "kB", "MB", "GB", "TB")
    while v >= 1000 and unit < len(units) - 1:
        v, unit = v / 1000, unit + 1
    return f"{v:.0f} B" if unit == 0 else f"{v:.1f} {units[unit]}"


class LoadStats:
    """What Session.load_weights did: bytes written to the device (the
    weights at the manifest's dtypes), the safetensors files they came from,
    and the wall seconds from opening the files to the last copy done.
    str() is k3-run's line: ``13.1 GB from 3 files in 2.41 s (5.4 GB/s)``."""

    def __init__(self, bytes: int, files: int, seconds: float):
        self.bytes = bytes
        self.files = files
        self.seconds = seconds

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        return (f"{_size_text(self.bytes)} from {self.files} file{'' if self.files == 1 else 's'} "
                f"in {self.seconds:.2f} s ({self.gb_per_s:.1f} GB/s)")

    def __repr__(self) -> str:
        return f"LoadStats({self})"


class GenerationStats:
    """Timings and outcome of the last Session.generate."""

    def __init__(self, prefill_ms: float, decode_ms: float, decode_steps: int,
                 prompt_tokens: list[int], finish_reasons: list[str], tokens: list[list[int]]):
        self.prefill_ms = prefill_ms
        self.decode_ms = decode_ms
        self.decode_steps = decode_steps
        self.prompt_tokens = prompt_tokens
        self.finish_reasons = finish_reasons
        self.tokens = tokens

    @property
    def generated_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)

    @property
    def decode_tokens_per_s(self) -> float:
        n = self.generated_tokens - sum(1 for t in self.tokens if t)
        return n / (self.decode_ms / 1e3) if self.decode_ms > 0 else 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return sum(self.prompt_tokens) / (self.prefill_ms / 1e3) if self.prefill_ms > 0 else 0.0

    def __repr__(self) -> str:
        return (f"GenerationStats(prefill {sum(self.prompt_tokens)} tokens {self.prefill_ms:.2f} ms, "
                f"decode {self.decode_steps} steps {self.decode_ms:.2f} ms, "
                f"finish={self.finish_reasons})")


class _Generation:
    """One k3_generation: the C handle, the tokens so far, the text so far."""

    def __init__(self, session: "Session", entry: str, ids: list[list[int]], maxn: list,
                 params: list, stops: list[int]):
        L = _capi.lib()
        self.s, self.n, self.L = session, len(ids), L
        self._keep = [np.ascontiguousarray(np.asarray(p, np.int64)) for p in ids]
        for i, p in enumerate(self._keep):
            if p.size and (p.min() < -2**31 or p.max() >= 2**31):
                raise K3Error(f"sequence {i}: prompt token ids do not fit i32")
        self._keep = [p.astype(np.int32) for p in self._keep]
        stop_arr = np.asarray(stops, np.int32)
        self._stop = stop_arr
        reqs = (_capi.SequenceRequest * self.n)()
        for i in range(self.n):
            r = reqs[i]
            r.prompt = self._keep[i].ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            r.prompt_len = self._keep[i].size
            r.max_new_tokens = int(maxn[i])
            r.sampling = params[i]
            r.stop_tokens = stop_arr.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            r.num_stop_tokens = stop_arr.size
        # One generation per session at a time (they share the state slots):
        # a new one ends a stream still open on the session.
        prev = getattr(session, "_generation", None)
        prev = prev() if prev is not None else None
        if prev is not None:
            prev.close(superseded=True)
        h = ctypes.c_void_p()
        _capi.check(L.k3_generation_start(session._h, entry.encode(), reqs, self.n,
                                          ctypes.byref(h)))
        self._h = h
        self._superseded = False
        import weakref
        session._generation = weakref.ref(self)
        self.tokens: list[list[int]] = [[] for _ in range(self.n)]
        self.texts: list[str] = ["" for _ in range(self.n)]
        self.prompt_lens = [p.size for p in self._keep]

    def run(self, tok, stop_strings: list[str], text: bool):
        """Steps to the end; yields (i, new id) or, in text mode, (i, new text)."""
        from .tokenizer import IncrementalDecoder
        decs = None if tok is None else \
            [IncrementalDecoder(tok, skip_special_tokens=True) for _ in range(self.n)]
        hold = max((len(x) for x in stop_strings), default=1) - 1
        shown = [0] * self.n     # characters of texts[i] already yielded
        cut = [False] * self.n   # ended by a stop string
        out = (ctypes.c_int32 * self.n)()
        active = ctypes.c_size_t(1)
        try:
            while active.value:
                if self._h is None:
                    raise K3Error("this generation was ended by a newer generate() on the same "
                                  "session (they share its state); finish one stream first"
                                  if self._superseded else "generation closed")
                _capi.check(self.L.k3_generation_step(self._h, out, ctypes.byref(active)))
                for i in range(self.n):
                    t = out[i]
                    if t < 0:
                        continue
                    self.tokens[i].append(t)
                    if decs is None:
                        yield (i, t)
                        continue
                    done = self.L.k3_generation_finish_reason(self._h, i) != 0
                    self.texts[i] += decs[i].push(t) + (decs[i].flush() if done else "")
                    if stop_strings:
                        at = min((k for k in (self.texts[i].find(x) for x in stop_strings)
                                  if k >= 0), default=-1)
                        if at >= 0:
                            self.texts[i] = self.texts[i][:at]
                            cut[i] = done = True
                            _capi.check(self.L.k3_generation_stop(self._h, i))
                    if not text:
                        yield (i, t)
                        continue
                    upto = len(self.texts[i]) if done else max(shown[i], len(self.texts[i]) - hold)
                    if upto > shown[i]:
                        yield (i, self.texts[i][shown[i]:upto])
                        shown[i] = upto
                if decs is not None and text:
                    # a sequence that just ended (stop token, length): the held-back tail
                    for i in range(self.n):
                        if self.L.k3_generation_finish_reason(self._h, i) != 0 and \
                                shown[i] < len(self.texts[i]):
                            yield (i, self.texts[i][shown[i]:])
                            shown[i] = len(self.texts[i])
            pre, dec, steps = ctypes.c_double(), ctypes.c_double(), ctypes.c_size_t()
            self.L.k3_generation_timing(self._h, ctypes.byref(pre), ctypes.byref(dec),
                                        ctypes.byref(steps))
            reasons = [FINISH_REASONS[self.L.k3_generation_finish_reason(self._h, i)]
                       for i in range(self.n)]
            self.s.last_generation = GenerationStats(pre.value, dec.value, steps.value,
                                                     self.prompt_lens, reasons, self.tokens)
        finally:
            self.close()

    def close(self, superseded: bool = False) -> None:
        if getattr(self, "_h", None):
            self.L.k3_generation_destroy(self._h)
            self._h = None
            self._superseded = superseded

    def __del__(self) -> None:
        self.close()


def sample(logits: np.ndarray, *, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
           min_p: float = 0.0, repetition_penalty: float = 1.0, seed: int = 0, stream: int = 0,
           step: int = 0, history: Sequence[int] = ()) -> int:
    """The runtime's sampler (k3_sample) on one row of logits: the token the
    generation loop would pick at `step` of a sequence with these settings."""
    row = np.ascontiguousarray(np.asarray(logits, np.float32).reshape(-1))
    hist = np.ascontiguousarray(np.asarray(list(history), np.int32))
    sp = _capi.SamplingParams()
    L = _capi.lib()
    L.k3_sampling_params_init(ctypes.byref(sp))
    sp.temperature, sp.top_k, sp.top_p, sp.min_p = float(temperature), int(top_k), float(top_p), \
        float(min_p)
    sp.repetition_penalty, sp.seed, sp.stream = float(repetition_penalty), int(seed), int(stream)
    out = ctypes.c_int32()
    _capi.check(L.k3_sample(row.ctypes.data_as(ctypes.c_void_p), row.size, ctypes.byref(sp),
                            hist.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), hist.size,
                            int(step), ctypes.byref(out)))
    return out.value


def find_tool(name: str) -> str:
    """A K3 tool (k3-opt, k3-run, k3-import): $K3_BIN_DIR/name; the copy
    bundled in the package (k3/_bin); name on PATH; the newest build*/bin of
    the source tree."""
    d = os.environ.get("K3_BIN_DIR")
    if d and (Path(d) / name).is_file():
        return str(Path(d) / name)
    bundled = Path(__file__).resolve().parent / "_bin" / name
    if bundled.is_file() and os.access(bundled, os.X_OK):
        return str(bundled)
    p = shutil.which(name)
    if p:
        return p
    root = Path(__file__).resolve().parents[1]
    builds = sorted((b for b in root.parent.glob("build*/bin/" + name)
                     if not any(t in b.parts[-3] for t in ("san", "fuzz"))),
                    key=lambda b: -b.stat().st_mtime)
    if builds:
        return str(builds[0])
    raise K3Error(f"cannot find {name}: set K3_BIN_DIR, put it on PATH, or bundle it in "
                  f"{bundled.parent}", "IO", 2)


def _cache_dir() -> Path:
    return Path(os.environ.get("K3_CACHE_DIR") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "k3")


def import_config(config: PathLike, output: PathLike, extra_args: Sequence[str] = ()) -> Path:
    """Runs ``k3-import CONFIG_OR_DIR -o OUTPUT`` (a checkpoint directory
    stands for its config.json)."""
    r = subprocess.run([find_tool("k3-import"), os.fspath(config), "-o", os.fspath(output),
                        *extra_args], capture_output=True, text=True)
    if r.returncode != 0:
        raise K3Error(r.stderr.strip() or f"k3-import failed with exit code {r.returncode}",
                      "COMPILE", r.returncode)
    return Path(output)


def compile(model: PathLike, output: Optional[PathLike] = None, max_tokens: int = 4096,
            max_seqs: int = 16, entry: str = "forward", report: bool = False,
            target: Optional[str] = None, options: str = "",
            progress: Optional[bool] = None) -> Artifact:
    """Compiles a model description (.mlir), a Hugging Face config.json or a
    checkpoint directory (its config.json, through k3-import) with
    ``k3-opt --k3-compile=...`` and opens the artifact. Without `output` the
    artifact goes to the cache ($K3_CACHE_DIR, else ~/.cache/k3) under a key
    of the model text, the options and k3-opt, and a cached one is reused.
    A progress line shows on a terminal. Raises K3Error with the tools'
    diagnostics on failure."""
    model = Path(model)
    if not model.exists():
        raise K3Error(f"{model}: no such model file or checkpoint directory", "IO", 2)
    opts = f"max-tokens={max_tokens} max-seqs={max_seqs} entry={entry}"
    if target:
        opts += f" target={target}"
    if report:
        opts += " report=1"
    if options:
        opts += " " + options
    config = model / "config.json" if model.is_dir() else model if model.suffix == ".json" else None
    if config is not None and not config.is_file():
        raise K3Error(f"{model}: checkpoint directory has no config.json", "IO", 2)
    tool_id = None
    if output is None:
        # Cached under a key of the model text and the options; the k3-opt
        # that wrote it is noted beside it (`.k3opt`): another k3-opt
        # recompiles, no k3-opt at all (a machine with the runtime only)
        # uses the cached artifact.
        import hashlib
        h = hashlib.sha256((config or model).read_bytes())
        h.update(opts.encode())
        name = model.name if model.is_dir() else model.stem
        output = _cache_dir() / f"{name}-{h.hexdigest()[:16]}.k3bin"
        try:
            k3opt = find_tool("k3-opt")
            st = os.stat(k3opt)
            tool_id = f"{st.st_size}:{st.st_mtime_ns}"
        except K3Error:
            if output.is_file():
                return Artifact(output)
            raise
        stamp = output.with_suffix(".k3opt")
        if output.is_file() and stamp.is_file() and stamp.read_text() == tool_id:
            return Artifact(output)
        output.parent.mkdir(parents=True, exist_ok=True)
    k3opt = find_tool("k3-opt")
    output = Path(output)
    label = model.name if model.is_dir() else model.stem
    from ._progress import Progress
    with Progress(f"compiling {label}", progress):
        src = model
        if config is not None:
            src = output.with_suffix(".mlir")
            import_config(model if model.is_dir() else config, src)
        tmp = output.with_name(output.name + f".tmp{os.getpid()}")
        r = subprocess.run([k3opt, os.fspath(src), f"--k3-compile=output={tmp} {opts}",
                            "-o", os.devnull], capture_output=True, text=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise K3Error(r.stderr.strip() or f"k3-opt failed with exit code {r.returncode}",
                      "COMPILE", r.returncode)
    if report and r.stderr:
        print(r.stderr, end="", file=sys.stderr)
    os.replace(tmp, output)
    if tool_id is not None:
        output.with_suffix(".k3opt").write_text(tool_id)
    return Artifact(output)


def load(model: PathLike, device: str = "cpu", max_tokens: int = 4096, max_seqs: int = 16,
         tokenizer: Union[None, bool, PathLike, "Tokenizer"] = None,
         random_weights: Optional[int] = None, weights: Optional[PathLike] = None,
         progress: Optional[bool] = None, **compile_options) -> "Session":
    """A ready session from a checkpoint directory (config.json, safetensors
    with or without an index, tokenizer files) or from a .k3bin / .mlir /
    config.json: compiled (cached), weights loaded (the directory's, or
    `weights`, or `random_weights` = a seed), tokenizer attached (the
    directory's when it has one; a path or Tokenizer; False for none)."""
    model = Path(model)
    art = Artifact(model) if model.suffix == ".k3bin" else \
        compile(model, None, max_tokens=max_tokens, max_seqs=max_seqs, progress=progress,
                **compile_options)
    tok: Optional[Tokenizer] = None
    if isinstance(tokenizer, Tokenizer):
        tok = tokenizer
    elif tokenizer not in (None, False, True):
        tok = load_tokenizer(tokenizer)
    elif tokenizer is not False and model.is_dir() and \
            any((model / f).is_file() for f in ("tokenizer.json", "tiktoken.model")):
        tok = load_tokenizer(model)
    elif tokenizer is True:
        tok = load_tokenizer(model if model.is_dir() else model.parent)
    s = Session(art, device=device, tokenizer=tok)
    from ._progress import Progress
    if random_weights is not None:
        s.random_weights(random_weights)
    else:
        src = weights if weights is not None else model if model.is_dir() else None
        if src is None:
            raise K3Error(f"{model}: no weights: give a checkpoint directory, or weights "
                          "(a directory, safetensors file or index; k3: --weights) or random "
                          "weights (random_weights=SEED; k3: --random-weights SEED)", "WEIGHTS", 6)
        with Progress(f"loading weights from {Path(src).name}", progress) as bar:
            s.load_weights(src, progress=bar.update if bar.show else None)
    return s
