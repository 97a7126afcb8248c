"""Reads a tensor of the .safetensors files `k3-run --dump` writes, with
numpy only (the GPU machine's check scripts need nothing else): F32 and I32
as stored, BF16 widened exactly to f32 (the high half of the bits)."""
import json
from pathlib import Path

import numpy as np


def read_tensor(path, name):
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    info = json.loads(raw[8:8 + n])[name]
    a, b = info["data_offsets"]
    buf = raw[8 + n + a:8 + n + b]
    if info["dtype"] == "BF16":
        x = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        x = np.frombuffer(buf, {"F32": np.float32, "I32": np.int32}[info["dtype"]])
    return x.reshape(info["shape"])
