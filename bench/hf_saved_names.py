"""Which tensor names and shapes transformers saves for a Kimi-Linear config,
beside those bench/make_checkpoint.py writes (`--names transformers` and
`--names hub`): the check that our checkpoints are in transformers' own
layout (issue 17). Needs torch and transformers (the GPU machine).

    python3 bench/hf_saved_names.py [--config bench/configs/kl-scaled-e16.json]

Builds `KimiLinearForCausalLM` from the config on the CPU, `save_pretrained`
into a temporary directory, reads the saved safetensors headers and prints,
per name pattern (layer numbers replaced by N), the saved shape and whether
each of our two layouts has that name with that shape. Writes
bench/results/hf-saved-names-<date>.json ($K3_RESULTS_DIR overrides).
Exit status 1 when the transformers layout differs from what transformers
saved.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import make_checkpoint  # noqa: E402
import protocol  # noqa: E402
from e2e import hf_config  # noqa: E402


def saved_shapes(directory: Path) -> dict:
    """name -> shape of every tensor in the safetensors files of `directory`."""
    out = {}
    for f in sorted(directory.glob("*.safetensors")):
        raw = f.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        for name, v in json.loads(raw[8:8 + n]).items():
            if name != "__metadata__":
                out[name] = v["shape"]
    return out


def patterns(shapes: dict) -> dict:
    """Layer (and expert) numbers replaced by N: one entry per kind of tensor."""
    out = {}
    for name, shape in shapes.items():
        out.setdefault(re.sub(r"\.\d+\.", ".N.", name), shape)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "bench" / "configs" / "kl-scaled-e16.json"))
    args = ap.parse_args()
    import torch
    from transformers import KimiLinearForCausalLM
    res = protocol.Results("hf-saved-names")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        torch.manual_seed(0)
        KimiLinearForCausalLM(hf_config(Path(args.config))).save_pretrained(tmp / "hf")
        theirs = patterns(saved_shapes(tmp / "hf"))
        ours = {}
        for names in ("transformers", "hub"):
            make_checkpoint.write(Path(args.config), tmp / names, seed=0, shard_bytes=1 << 30, names=names)
            ours[names] = patterns(saved_shapes(tmp / names))
    for name in sorted(set(theirs) | set(ours["transformers"])):
        row = {"name": name, "saved_by_transformers": theirs.get(name)}
        for k, v in ours.items():
            row[f"ours_{k}"] = v.get(name)
        ok = theirs.get(name) is not None and theirs.get(name) == ours["transformers"].get(name)
        res.add(case="name", impl="make_checkpoint --names transformers", variant=name,
                status="ok" if ok else "FAILED", **{k: v for k, v in row.items() if k != "name"})
    res.write()
    return 1 if res.failures else 0


if __name__ == "__main__":
    sys.exit(main())
