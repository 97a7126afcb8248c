"""Reads the parts of a .k3bin the C API does not expose: the weight manifest
and the symbolic shapes of entry inputs/outputs (docs/artifact-format.md).
The runtime validates the file first (k3_artifact_open); this reader trusts it."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

DTYPES = ("bf16", "f16", "f32", "i32", "mxfp4")
INIT_KINDS = ("unspecified", "normal", "uniform", "constant")
NO_SYM = 0xFFFFFFFF


@dataclass(frozen=True)
class Dim:
    """``ceil_div(a * sym + b, c)``, or the constant ``b`` when sym is None."""
    sym: Optional[str]
    a: int
    b: int
    c: int

    def value(self, symbols: dict[str, int]) -> int:
        if self.sym is None:
            return self.b
        return -((-(self.a * symbols[self.sym] + self.b)) // self.c)

    def __str__(self) -> str:
        if self.sym is None:
            return str(self.b)
        s = self.sym if self.a == 1 else f"{self.a}*{self.sym}"
        if self.b:
            s += f"{self.b:+d}"
        return s if self.c == 1 else f"ceil({s}/{self.c})"


@dataclass(frozen=True)
class WeightInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    init: str
    init_param: float
    device: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[Dim, ...]

    def shape_for(self, symbols: dict[str, int]) -> tuple[int, ...]:
        return tuple(d.value(symbols) for d in self.shape)


@dataclass(frozen=True)
class EntryInfo:
    name: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    num_launches: int


class _Cursor:
    def __init__(self, data: bytes, pos: int):
        self.d, self.pos = data, pos

    def take(self, fmt: str):
        v = struct.unpack_from("<" + fmt, self.d, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v if len(v) > 1 else v[0]

    def str(self) -> str:
        n = self.take("I")
        s = self.d[self.pos:self.pos + n].decode("utf-8", "replace")
        self.pos += n
        return s


def parse(data: bytes) -> tuple[list[WeightInfo], list[EntryInfo]]:
    nsec = struct.unpack_from("<I", data, 32)[0]
    sections = {}
    for i in range(nsec):
        tag, _, off, size = struct.unpack_from("<4sIQQ", data, 64 + 24 * i)
        sections[tag] = off
    cur = _Cursor(data, sections[b"SYMS"])
    syms = []
    for _ in range(cur.take("I")):
        syms.append(cur.str())
        cur.take("q")

    def dim(c: _Cursor) -> Dim:
        s, a, b, cc = c.take("Iqqq")
        return Dim(None if s == NO_SYM else syms[s], a, b, cc)

    cur = _Cursor(data, sections[b"WGHT"])
    weights = []
    for _ in range(cur.take("I")):
        name = cur.str()
        dt, kind, _, dev, param, rank = cur.take("BBHIdI")
        shape = tuple(cur.take("q") for _ in range(rank))
        weights.append(WeightInfo(name, DTYPES[dt], shape, INIT_KINDS[kind], param, dev))

    def tensor(c: _Cursor) -> TensorInfo:
        name = c.str()
        dt, _, _, _, _buf, rank = c.take("BBBBII")
        return TensorInfo(name, DTYPES[dt], tuple(dim(c) for _ in range(rank)))

    cur = _Cursor(data, sections[b"ENTR"])
    entries = []
    for _ in range(cur.take("I")):
        name = cur.str()
        ins = tuple(tensor(cur) for _ in range(cur.take("I")))
        outs = tuple(tensor(cur) for _ in range(cur.take("I")))
        nl = cur.take("I")
        for _ in range(nl):
            cur.take("I")
            cur.str()
            cur.take("I")
            for _ in range(7):
                dim(cur)
            for _ in range(cur.take("I")):
                kind = cur.take("B")
                # 6: tensor map id (1.1); the TMAP section itself is not needed here
                cur.take({0: "IQ", 1: "I", 2: "i", 3: "q", 4: "I", 5: "I", 6: "I"}[kind])
        entries.append(EntryInfo(name, ins, outs, nl))
    return weights, entries
