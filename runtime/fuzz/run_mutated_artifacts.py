"""Mutate, re-seal and *run* artifacts (issue 19): a .k3bin whose checksum
was fixed up after a table field changed must be rejected with a message or
run to the end, within a time and memory limit, never crash or hang.

    python3 runtime/fuzz/run_mutated_artifacts.py --k3-bin build/bin \
        --iterations 200 --seed 1 [--skip-sections BLOB,ENTR] [--keep DIR]

The seed artifact is the tiny K3 model (examples/tiny_k3.mlir) compiled for
the CPU here, or with `--seed-model mxfp4-tp2` a tiny K3 config with MXFP4
routed experts split over two TP ranks (weight shards of packed codes and
scales), each mutant run alternately on seeded random weights and on a
checkpoint of `weight_packed` / `weight_scale` pairs written by the oracle
(python/k3ref), so the MXFP4 loader's checks meet mutated tables too. Each iteration applies 1-3 mutations to the header's section
count, the section table and the bodies of the sections not skipped (BLOB
always: the kernel objects are machine code, a flipped byte there is not a
malformed table but a different program), each one of:
a flipped bit, a byte set to 0x00 or 0xFF, or a 4- or 8-byte field set to
an extreme (0, 1, 2^31 - 1, 2^32 - 1, 2^63 - 1, -1, a large power of two).
file_size and the FNV-1a checksum are then recomputed (docs/artifact-
format.md) so that the mutation reaches the decoders, the validator and the
session, and `k3-run --random-weights 1 --prompt 1,2,3 --max-new-tokens 2`
runs it with a 1 GiB address-space limit (the tiny model needs a few MB;
a table that asks for gigabytes then fails its allocation at once instead
of spending seconds filling it) under a time limit.

The launch records (ENTR) bind buffers to kernel parameters by id; since
format 1.4 section ANED records what each kernel takes through each
argument (its kind and the bytes it may touch), so a launch argument
pointing at a smaller buffer or of another kind is rejected by the
validator, and CI mutates ENTR too (tools/run-tests.sh).

Outcomes: exit 0 (the mutation changed nothing that matters), or a
non-zero exit with "error" on stderr (a clean rejection) pass; a signal
(crash), a time-out (hang, or work out of all proportion to the model), or a
non-zero exit without a message fail. Failing artifacts are kept (--keep)
for replay. Exit status 1 if any failed.
"""
from __future__ import annotations

import argparse
import random
import resource
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADER = 64
ENTRY = 24
MEMORY_LIMIT = 1 << 30
EXTREMES32 = [0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 1 << 20]
EXTREMES64 = [0, 1, (1 << 63) - 1, (1 << 64) - 1, 1 << 40, 1 << 32]


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def sections(art: bytes) -> list[tuple[str, int, int]]:
    """(tag, offset, size) of every section of the table."""
    (n,) = struct.unpack_from("<I", art, 32)
    out = []
    for i in range(n):
        tag, _, off, size = struct.unpack_from("<4sIQQ", art, HEADER + ENTRY * i)
        out.append((tag.decode("latin-1"), off, size))
    return out


def mutable_ranges(art: bytes, skip: set[str]) -> list[tuple[int, int]]:
    """Byte ranges a mutation may touch: the header's section count, the
    section table, and the bodies of the sections not in `skip`."""
    (n,) = struct.unpack_from("<I", art, 32)
    ranges = [(32, 36), (HEADER, HEADER + ENTRY * n)]
    ranges += [(off, off + size) for tag, off, size in sections(art)
               if tag not in skip and size]
    return ranges


def mutate(art: bytes, rng: random.Random, skip: set[str]) -> bytes:
    b = bytearray(art)
    ranges = mutable_ranges(art, skip)
    weights = [hi - lo for lo, hi in ranges]
    for _ in range(rng.randint(1, 3)):
        lo, hi = rng.choices(ranges, weights)[0]
        at = rng.randrange(lo, hi)
        kind = rng.randrange(4)
        if kind == 0:
            b[at] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[at] = rng.choice([0x00, 0xFF])
        elif kind == 2 and at + 4 <= len(b):
            struct.pack_into("<I", b, at, rng.choice(EXTREMES32))
        elif at + 8 <= len(b):
            struct.pack_into("<Q", b, at, rng.choice(EXTREMES64))
    return reseal(bytes(b))


def reseal(art: bytes) -> bytes:
    b = bytearray(art)
    struct.pack_into("<Q", b, 16, len(b))
    struct.pack_into("<Q", b, 24, fnv1a64(bytes(b[HEADER:])))
    return bytes(b)


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run(k3run: Path, path: Path, timeout: float,
        weights: tuple[str, ...] = ("--random-weights", "1")) -> tuple[str, str]:
    """(outcome, detail): outcome is ok, rejected or a failure kind."""
    try:
        p = subprocess.run([str(k3run), str(path), *weights, "--prompt", "1,2,3",
                            "--max-new-tokens", "2", "--quiet"],
                           capture_output=True, text=True, errors="replace", timeout=timeout,
                           preexec_fn=limit_memory)
    except subprocess.TimeoutExpired:
        return "TIMEOUT", f"still running after {timeout:g} s"
    err = p.stderr.strip().splitlines()
    last = err[-1] if err else ""
    if p.returncode == 0:
        return "ok", ""
    if p.returncode < 0:
        return "CRASH", f"signal {-p.returncode}: {last}"
    if "error" in p.stderr:
        return "rejected", last
    return "SILENT", f"exit {p.returncode} without an error message: {last}"


def seed_artifact(k3bin: Path, work: Path) -> Path:
    out = work / "seed.k3bin"
    subprocess.run([str(k3bin / "k3-opt"), str(ROOT / "examples" / "tiny_k3.mlir"),
                    f"--k3-compile=target=cpu output={out} max-tokens=64 max-seqs=2",
                    "-o", "/dev/null"], check=True)
    return out


def seed_mxfp4_tp2(k3bin: Path, work: Path) -> tuple[Path, Path]:
    """Tiny K3 with MXFP4 experts 64 wide (32 a rank) at tp = 2, and a
    checkpoint of its weights (the experts as packed codes and scales)."""
    import json
    sys.path.insert(0, str(ROOT / "python"))
    import numpy as np
    from k3ref import model, mxfp4
    from k3ref.storage import rounded_random_weights
    d = json.loads((ROOT / "examples" / "configs" / "tiny-k3.json").read_text())
    d["text_config"]["moe_intermediate_size"] = 64
    d["quantization_config"] = mxfp4.quantization_config()
    cfg, mlir, out = work / "config.json", work / "mxfp4.mlir", work / "seed.k3bin"
    cfg.write_text(json.dumps(d))
    subprocess.run([str(k3bin / "k3-import"), str(cfg), "-o", str(mlir)], check=True)
    subprocess.run([str(k3bin / "k3-opt"), str(mlir),
                    f"--k3-compile=target=cpu output={out} max-tokens=64 max-seqs=2 tp=2",
                    "-o", "/dev/null"], check=True)
    ckpt, _ = mxfp4.quantize_experts(rounded_random_weights(model.Config.from_hf(d["text_config"]),
                                                            seed=3))
    wfile = work / "weights.safetensors"
    model.save_safetensors(wfile, {k: (v if v.dtype == np.uint8 else v.astype(np.float32))
                                   for k, v in ckpt.items()})
    return out, wfile


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k3-bin", type=Path, default=ROOT / "build" / "bin")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--skip-sections", default="BLOB",
                    help="sections whose bodies stay as compiled (BLOB always)")
    ap.add_argument("--keep", type=Path, help="directory for the failing artifacts")
    ap.add_argument("--seed-model", choices=("tiny-k3", "mxfp4-tp2"), default="tiny-k3")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    skip = {"BLOB", *a.skip_sections.split(",")}
    k3run = a.k3_bin / "k3-run"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sources = [("--random-weights", "1")]
        if a.seed_model == "mxfp4-tp2":
            seed_path, wfile = seed_mxfp4_tp2(a.k3_bin, work)
            sources.append(("--weights", str(wfile)))
        else:
            seed_path = seed_artifact(a.k3_bin, work)
        seed = seed_path.read_bytes()
        for weights in sources:
            outcome, detail = run(k3run, seed_path, a.timeout, weights)
            if outcome != "ok":
                print(f"the unmutated seed artifact did not run ({' '.join(weights)}): "
                      f"{outcome} {detail}")
                return 1
        counts: dict[str, int] = {}
        failures = 0
        for i in range(a.iterations):
            path = work / f"mutant-{i}.k3bin"
            path.write_bytes(mutate(seed, rng, skip))
            outcome, detail = run(k3run, path, a.timeout, sources[i % len(sources)])
            counts[outcome] = counts.get(outcome, 0) + 1
            if outcome not in ("ok", "rejected"):
                failures += 1
                print(f"FAILED mutant {i} (seed {a.seed}): {outcome}: {detail}")
                if a.keep:
                    a.keep.mkdir(parents=True, exist_ok=True)
                    (a.keep / path.name).write_bytes(path.read_bytes())
            path.unlink()
    print(f"{a.iterations} mutated artifacts run: " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
