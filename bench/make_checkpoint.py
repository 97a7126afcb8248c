"""A seeded random checkpoint in the Hugging Face layout (issue 17): the
config's `config.json`, sharded safetensors `model-0000i-of-0000N.safetensors`
and `model.safetensors.index.json` (its `weight_map`, `total_size`), under
the hub checkpoint's tensor names (`model.layers.N.block_sparse_moe.experts.E
.w1.weight`, ...: python/k3ref's weight_shapes, docs/oracle.md), bf16 but
for the KDA decay parameters and the router's correction bias (f32, as the
hub checkpoint stores them).

    python3 bench/make_checkpoint.py bench/configs/kimi-linear-48b-cut4.json /tmp/kl-cut4 [--seed 0] [--shard-gb 5]

Values follow python/k3ref's random_weights scales (linear ~ N(0, 1/in),
norms 1 + 0.1 N, ...), drawn in float32 tensor by tensor from a generator
seeded by (seed, the tensor's name): the same tensor for the same seed in
any order. Both runtimes load the directory as it is: ours
(`k3-run --weights DIR`, `k3.Session.load_weights(DIR)`) and transformers'
`from_pretrained`. Needs numpy and ml_dtypes only.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model  # noqa: E402

F32_SUFFIXES = ("A_log", "dt_bias", "e_score_correction_bias")


def tensor(name: str, shape, seed: int, kda_heads: int) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    t = model.random_tensor(name, tuple(shape), rng, kda_heads, dtype=np.float32)
    return t.astype(np.float32 if name.endswith(F32_SUFFIXES) else model._bf16())


def write(config: Path, out: Path, seed: int, shard_bytes: int) -> dict:
    cfg = model.Config.from_hf(json.loads(config.read_text()))
    shapes = model.weight_shapes(cfg)
    out.mkdir(parents=True, exist_ok=True)
    shards, current, size, total = [], {}, 0, 0

    def flush():
        nonlocal current, size
        if current:
            path = out / f"shard-{len(shards):05d}.tmp"
            model.save_safetensors(path, current, metadata={"format": "pt"})
            shards.append((path, sorted(current)))
            current, size = {}, 0

    for name, shape in shapes.items():
        t = tensor(name, shape, seed, cfg.kda_num_heads)
        if size and size + t.nbytes > shard_bytes:
            flush()
        current[name] = t
        size += t.nbytes
        total += t.nbytes
        print(f"\r{len(shards) + 1} shards, {total / 1e9:.2f} GB", end="", file=sys.stderr, flush=True)
    flush()
    print(file=sys.stderr)
    weight_map = {}
    for i, (path, names) in enumerate(shards):
        final = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        path.rename(out / final)
        weight_map.update({n: final for n in names})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    shutil.copyfile(config, out / "config.json")
    return {"tensors": len(weight_map), "shards": len(shards), "bytes": total}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-gb", type=float, default=5.0)
    args = ap.parse_args()
    r = write(args.config, args.out, args.seed, int(args.shard_gb * 1e9))
    print(f"wrote {args.out}: {r['tensors']} tensors in {r['shards']} shards, {r['bytes'] / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
