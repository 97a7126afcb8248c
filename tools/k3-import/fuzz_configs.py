"""Mutated model configs through k3-import (and what it emits through
k3-opt's parser and verifiers), under a time limit: the importer's file
parser fuzzed as the runtime's are (runtime/fuzz).

Seeds: every config of examples/configs, bench/configs and
test/Import/Inputs. Each iteration takes one seed and applies 1-3
mutations: structure-aware ones on the parsed JSON (a key deleted, a value
replaced by another type or an extreme number, a list shortened or
lengthened, an integer scaled) or byte-level ones on its text (a byte
flipped, the text cut short). Each mutant runs

    k3-import MUTANT -o OUT.mlir             (then, if it succeeded)
    k3-opt OUT.mlir -o /dev/null             (parse and verify; with --compile,
                                              a tiny seed's mutant compiled
                                              for the CPU instead)

An outcome passes if the tool exits 0, or exits 1 with a message that
says where (the importer's name the file and the field; k3-opt's are
located diagnostics): never a signal, another status, a silent failure or
a run past the time limit. Failing mutants are kept under --keep for replay.

    .venv/bin/python tools/k3-import/fuzz_configs.py --k3-bin build/bin --iterations 500 --seed 1
"""
import argparse
import copy
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED_DIRS = [ROOT / "examples/configs", ROOT / "bench/configs", ROOT / "test/Import/Inputs"]
EXTREMES = [None, "", "x", True, False, -1, 0, 1, 3, 2 ** 31, 2 ** 63, -(2 ** 63), 1e308, -1e-308,
            1.5, float("nan"), [], {}, [1, 2], {"a": 1}, "auto", "bf16", "mxfp4-pack-quantized"]


def paths(node, prefix=()):
    """Every (path) to a value inside `node`."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, prefix + (i,))
    return out


def get(node, path):
    for p in path:
        node = node[p]
    return node


def mutate_tree(doc, rng):
    """One structure-aware mutation of the parsed config, in place."""
    ps = [p for p in paths(doc) if p]
    if not ps:
        return doc
    path = rng.choice(ps)
    parent, key = get(doc, path[:-1]), path[-1]
    value = parent[key]
    kind = rng.randrange(5)
    if kind == 0:
        del parent[key]
    elif kind == 1:
        parent[key] = copy.deepcopy(rng.choice(EXTREMES))
    elif kind == 2 and isinstance(value, int) and not isinstance(value, bool):
        parent[key] = value * rng.choice([-1, 0, 2, 7, 1000, 2 ** 20]) + rng.choice([0, 1, -1])
    elif kind == 3 and isinstance(value, list):
        if value and rng.random() < 0.5:
            del value[rng.randrange(len(value))]
        else:
            value.append(copy.deepcopy(rng.choice(value)) if value else 1)
    else:
        # A key renamed to a near miss, or a value moved to another key.
        if isinstance(parent, dict):
            parent[str(key) + rng.choice(["_", "s", "X"])] = parent.pop(key)
        else:
            parent[key] = copy.deepcopy(rng.choice(EXTREMES))
    return doc


def mutate_text(text, rng):
    data = bytearray(text.encode())
    if not data:
        return text
    if rng.random() < 0.5:
        i = rng.randrange(len(data))
        data[i] = rng.randrange(256)
    else:
        data = data[:rng.randrange(len(data))]
    return data.decode("utf-8", errors="replace")


def acceptable(proc, where):
    """Exit 0, or exit 1 with a message that says where: the importer's
    name the file (and the field), k3-opt's are MLIR diagnostics."""
    if proc.returncode == 0:
        return True
    return proc.returncode == 1 and where in proc.stderr


def check(name, cmd, where, timeout):
    """Runs one tool: (whether it exited 0, None if its outcome is
    acceptable, else why not)."""
    proc = run(cmd, timeout)
    if proc is None:
        return False, f"{name}: ran past {timeout} s"
    if not acceptable(proc, where):
        return False, f"{name}: exit {proc.returncode}: {proc.stderr.strip()[-300:]!r}"
    return proc.returncode == 0, None


def run(cmd, timeout):
    try:
        # Messages may quote a mutant's bytes, which need not be UTF-8.
        return subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8",
                              errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k3-bin", default=str(ROOT / "build" / "bin"))
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--keep", default=str(ROOT / "build" / "fuzz-configs-failures"))
    ap.add_argument("--compile", action="store_true",
                    help="also compile what imports from the tiny seeds (target=cpu, "
                         "max-tokens=16): the whole pipeline on odd but valid shapes")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    seeds = sorted(p for d in SEED_DIRS for p in d.glob("*.json"))
    texts = {p: p.read_text() for p in seeds}
    importer, opt = Path(args.k3_bin) / "k3-import", Path(args.k3_bin) / "k3-opt"
    # The seeds that import as they are: most mutants come from them, with
    # one mutation, so that many get past the checks into the emitter and
    # the verifiers (test/Import/Inputs holds mostly configs that fail).
    valid = [p for p in seeds
             if subprocess.run([str(importer), str(p), "-o", "/dev/null"], capture_output=True).returncode == 0]
    failures, counts = [], {"imported": 0, "refused": 0, "compiled": 0}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for it in range(args.iterations):
            deep = valid and rng.random() < 0.7
            seed = rng.choice(valid if deep else seeds)
            text = texts[seed]
            try:
                doc = json.loads(text)
            except ValueError:
                doc = None
            for _ in range(1 if deep else rng.randint(1, 3)):
                if doc is not None and rng.random() < 0.8:
                    doc = mutate_tree(doc, rng)
                else:
                    text = mutate_text(json.dumps(doc) if doc is not None else text, rng)
                    doc = None
            if doc is not None:
                text = json.dumps(doc)
            src, out = tmp / f"m{it}.json", tmp / f"m{it}.mlir"
            src.write_text(text)
            imported, why = check("k3-import", [str(importer), str(src), "-o", str(out)], str(src),
                                  args.timeout)
            if why is None and not imported:
                counts["refused"] += 1
            elif imported:
                counts["imported"] += 1
                # What imports: parsed and verified, or (a tiny seed's, with
                # --compile) compiled for the CPU.
                if args.compile and seed.stem.startswith("tiny"):
                    counts["compiled"] += 1
                    _, why = check("k3-opt --k3-compile", [
                        str(opt), str(out), f"--k3-compile=target=cpu output={tmp / 'm.k3bin'} "
                        "max-tokens=16 max-seqs=2", "-o", "/dev/null"], "error:", args.timeout)
                else:
                    _, why = check("k3-opt", [str(opt), str(out), "-o", "/dev/null"], "error:",
                                   args.timeout)
            if why:
                keep = Path(args.keep)
                keep.mkdir(parents=True, exist_ok=True)
                kept = keep / f"seed{args.seed}-it{it}-{seed.stem}.json"
                kept.write_text(text)
                failures.append(f"{kept}: {why}")
                print(f"FAIL {kept}: {why}", flush=True)
            src.unlink()
            if out.exists():
                out.unlink()
    print(f"{args.iterations} mutated configs from {len(seeds)} seeds ({len(valid)} valid): "
          f"{counts['imported']} imported "
          f"(and verified by k3-opt; {counts['compiled']} of them compiled for the CPU), "
          f"{counts['refused']} refused with an error, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
