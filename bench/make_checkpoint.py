"""A seeded random checkpoint in the Hugging Face layout (issue 17): the
config's `config.json`, sharded safetensors `model-0000i-of-0000N.safetensors`
and `model.safetensors.index.json` (its `weight_map`, `total_size`), under
the hub checkpoint's tensor names (`model.layers.N.block_sparse_moe.experts.E
.w1.weight`, ...: python/k3ref's weight_shapes, docs/oracle.md); with
`--names transformers`, those of transformers' model in memory (experts
fused into `mlp.experts.gate_up_proj` / `down_proj`, the short convolutions
packed into `self_attn.conv1d.weight`, the router under `mlp.gate`); with
`--names transformers-saved`, what transformers 5.17's save_pretrained
writes (the hub's names, the dense MLP layers under `block_sparse_moe.`:
bench/hf_saved_names.py). transformers loads the first two (checked by
bench/checkpoint_numerics.py), our runtime all three. bf16 but
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
import re
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
    if name.endswith("A_log") and t.shape == (kda_heads,):
        # Kimi Linear's layout (the hub checkpoint and transformers' model:
        # [1, 1, H, 1]); our loader and the oracle drop the unit dimensions.
        t = t.reshape(1, 1, kda_heads, 1)
    return t.astype(np.float32 if name.endswith(F32_SUFFIXES) else model._bf16())


# Hub spelling -> the names of transformers' model in memory. The KDA gates keep the
# hub's names: transformers 5.17 on the H200 refused `forget_gate_down`,
# `beta_proj`, `output_gate_up`, ... (an older spelling) as unexpected and
# reported `f_a_proj`, `b_proj`, `g_a_proj`, ... missing
# (bench/results/checkpoint-numerics-nvidia-h200-20261202T152222Z.json).
RENAMES = [(".block_sparse_moe.gate.", ".mlp.gate."),
           (".block_sparse_moe.shared_experts.", ".mlp.shared_experts.")]
# What transformers 5.17's save_pretrained writes: the hub's names, but the
# dense MLP layers under block_sparse_moe (bench/hf_saved_names.py,
# bench/results/hf-saved-names-nvidia-h200-20261202T153119Z.json).
DENSE_MLP = re.compile(r"(.*)\.mlp\.((gate|up|down)_proj\.weight)$")
EXPERT = re.compile(r"(.*)\.block_sparse_moe\.experts\.(\d+)\.(w1|w2|w3)\.weight")
CONV = re.compile(r"(.*)\.self_attn\.([qkv])_conv1d\.weight")


def transformers_names(layer: dict) -> dict:
    """One layer's tensors under transformers' names: experts fused into
    gate_up_proj [E, 2I, D] and down_proj [E, D, I], the q/k/v short
    convolutions packed into conv1d [3P, 1, K], the rest renamed."""
    out, experts, convs = {}, {}, {}
    for name, t in layer.items():
        m, c = EXPERT.fullmatch(name), CONV.fullmatch(name)
        if m:
            experts.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = t
        elif c:
            convs.setdefault(c.group(1), {})[c.group(2)] = t
        else:
            for hub, native in RENAMES:
                name = name.replace(hub, native)
            out[name] = t
    for base, ts in experts.items():
        n = 1 + max(e for e, _ in ts)
        out[f"{base}.mlp.experts.gate_up_proj"] = np.stack(
            [np.concatenate([ts[(e, "w1")], ts[(e, "w3")]]) for e in range(n)])
        out[f"{base}.mlp.experts.down_proj"] = np.stack([ts[(e, "w2")] for e in range(n)])
    for base, ts in convs.items():
        out[f"{base}.self_attn.conv1d.weight"] = np.concatenate([ts["q"], ts["k"], ts["v"]])
    return out


def layer_of(name: str) -> str:
    m = re.match(r"model\.layers\.(\d+)\.", name)
    return m.group(0) if m else ""


def write(config: Path, out: Path, seed: int, shard_bytes: int, names: str = "hub") -> dict:
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

    groups = {}  # a layer at a time: transformers' names fuse within a layer
    for name, shape in shapes.items():
        groups.setdefault(layer_of(name), []).append((name, shape))
    for group in groups.values():
        tensors = {name: tensor(name, shape, seed, cfg.kda_num_heads) for name, shape in group}
        if names == "transformers-saved":
            tensors = {DENSE_MLP.sub(r"\1.block_sparse_moe.\2", n): t for n, t in tensors.items()}
        if names == "transformers":
            tensors = transformers_names(tensors)
        for name, t in tensors.items():
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
    ap.add_argument("--names", choices=["hub", "transformers", "transformers-saved"], default="hub",
                    help="the hub checkpoint's tensor names; transformers' in-memory names (fused experts, "
                         "packed short convolutions); or what transformers' save_pretrained writes")
    args = ap.parse_args()
    r = write(args.config, args.out, args.seed, int(args.shard_gb * 1e9), args.names)
    print(f"wrote {args.out}: {r['tensors']} tensors in {r['shards']} shards, {r['bytes'] / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
