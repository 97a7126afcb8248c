"""Python layer of the K3 compiler and runtime (docs/python.md).

    import k3
    k3.compile("examples/tiny_k3.mlir", "tiny.k3bin", max_tokens=256, max_seqs=4)
    s = k3.Session(k3.Artifact("tiny.k3bin"))
    s.random_weights(1)
    out = s.run(token_ids=ids, cu_seqlens=cu, context_lens=ctx)   # {"logits": ..., ...}
    s.generate([1, 2, 3], max_new_tokens=8)

Bindings are ctypes over libk3runtime.so (k3/k3_runtime.h); inputs and
outputs are numpy arrays (bf16 as ml_dtypes.bfloat16).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _capi
from ._capi import K3Error, find_runtime_library
from ._format import Dim, EntryInfo, TensorInfo, WeightInfo, parse

__all__ = ["Artifact", "Session", "K3Error", "compile", "find_runtime_library", "find_tool",
           "EntryInfo", "TensorInfo", "WeightInfo", "Dim", "BufferInfo"]

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


class Session:
    """Device allocations of one artifact: weights, persistent decode state
    (carried across run() calls) and the activation arena."""

    def __init__(self, artifact: Union[Artifact, PathLike], device: str = "cpu"):
        self.artifact = artifact if isinstance(artifact, Artifact) else Artifact(artifact)
        L = _capi.lib()
        h = ctypes.c_void_p()
        _capi.check(L.k3_session_create(self.artifact._h, device.encode(), ctypes.byref(h)))
        self._h = h
        self.device: str = L.k3_session_device_name(h).decode()

    # -- weights and state -------------------------------------------------
    def load_weights(self, paths: Union[PathLike, Sequence[PathLike]]) -> None:
        """Loads .safetensors files and/or sharded *.index.json files."""
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        arr = (ctypes.c_char_p * len(paths))(*[os.fsencode(p) for p in paths])
        _capi.check(_capi.lib().k3_session_load_weights(self._h, arr, len(paths)))

    def random_weights(self, seed: int = 0) -> None:
        """Deterministic init from each weight's recipe (docs/runtime.md)."""
        _capi.check(_capi.lib().k3_session_init_random_weights(self._h, seed))

    @property
    def graph_stats(self) -> Tuple[int, int]:
        """(launch graphs captured, runs replayed from one): a run repeating
        the previous run's entry and symbol values (a decode loop) is
        captured once and replayed from then on; K3_LAUNCH_GRAPHS=0 in the
        environment before the session is created turns this off."""
        captured, replayed = ctypes.c_size_t(), ctypes.c_size_t()
        _capi.lib().k3_session_graph_stats(self._h, ctypes.byref(captured), ctypes.byref(replayed))
        return captured.value, replayed.value

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
            shape = np.shape(inputs[t.name])
            if len(shape) != len(t.shape):
                continue
            for n, d in zip(shape, t.shape):
                if d.sym is not None and d.a > 0 and d.c == 1 and (n - d.b) % d.a == 0 \
                        and d.sym not in found and n - d.b >= 0:
                    found[d.sym] = (n - d.b) // d.a
        return found

    def run(self, entry: str = "forward", symbols: Optional[Mapping[str, int]] = None,
            **inputs: object) -> dict[str, np.ndarray]:
        """Runs an entry with numpy inputs by name; returns copies of all outputs.

        Lists (and integer/float arrays of another width) are converted to the
        declared dtype; arrays of the wrong kind are passed as they are and
        the runtime rejects them. Symbols are inferred from the input shapes
        unless given. Token ids are checked against vocab_size."""
        info = self.artifact.entry(entry)
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
        _capi.check(L.k3_session_run(self._h, entry.encode(), sv, len(syms), ht, len(arrays)))
        out: dict[str, np.ndarray] = {}
        for i in range(L.k3_session_num_outputs(self._h)):
            v = _capi.TensorView()
            _capi.check(L.k3_session_output(self._h, i, ctypes.byref(v)))
            dt = _np_dtype(_NAMES[v.dtype])
            shape = tuple(v.shape[j] for j in range(v.rank))
            buf = ctypes.string_at(v.data, v.nbytes) if v.nbytes else b""
            out[v.name.decode()] = np.frombuffer(buf, dtype=dt).reshape(shape).copy()
        return out

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int,
                 entry: str = "forward") -> list[int]:
        """Greedy generation of one sequence (slot 0), as k3-run --prompt:
        resets the state, prefills the prompt, then decodes one token per call
        (through ``<entry>_decode`` when the artifact has that entry: the
        token-by-token KDA form). Returns ``max_new_tokens`` ids (the first
        one from the prefill)."""
        info = self.artifact.entry(entry)
        names = {t.name for t in info.inputs}
        decode = entry + "_decode"
        if decode not in self.artifact.entries:
            decode = entry
        self.reset_state(-1)
        tokens: list[int] = []
        pos = 0
        step = [int(t) for t in prompt_ids]
        while len(tokens) < max_new_tokens:
            n = len(step)
            feed = {"token_ids": np.asarray(step, np.int32),
                    "cu_seqlens": np.asarray([0, n], np.int32),
                    "positions": np.arange(pos, pos + n, dtype=np.int32),
                    "seq_slots": np.zeros(1, np.int32),
                    "context_lens": np.asarray([pos], np.int32)}
            out = self.run(entry if pos == 0 else decode,
                           **{k: v for k, v in feed.items() if k in names})
            tokens.append(int(np.argmax(out["logits"][-1])))
            pos += n
            step = [tokens[-1]]
        return tokens

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


def find_tool(name: str) -> str:
    """$K3_BIN_DIR/name, else name on PATH."""
    d = os.environ.get("K3_BIN_DIR")
    if d and (Path(d) / name).is_file():
        return str(Path(d) / name)
    p = shutil.which(name)
    if p:
        return p
    raise K3Error(f"cannot find {name}: set K3_BIN_DIR or put it on PATH", "IO", 2)


def compile(model_mlir: PathLike, output: PathLike, max_tokens: int = 4096, max_seqs: int = 16,
            entry: str = "forward", report: bool = False) -> Artifact:
    """Runs ``k3-opt MODEL --k3-compile=...`` and opens the artifact written.
    Raises K3Error with k3-opt's diagnostics on failure."""
    opts = f"output={os.fspath(output)} max-tokens={max_tokens} max-seqs={max_seqs} entry={entry}"
    if report:
        opts += " report=1"
    r = subprocess.run([find_tool("k3-opt"), os.fspath(model_mlir), f"--k3-compile={opts}",
                        "-o", os.devnull], capture_output=True, text=True)
    if r.returncode != 0:
        raise K3Error(r.stderr.strip() or f"k3-opt failed with exit code {r.returncode}",
                      "COMPILE", r.returncode)
    return Artifact(output)
