#!/usr/bin/env python3
"""Compares the machine code of two builds of the same CUDA kernels.

    bench/compare_sass.py BASE NEW [--tolerance 0.01]

BASE and NEW are cubins or PTX files (PTX is assembled with ptxas -v
-arch=sm_90a first); or two directories written by bench/port_sass.sh,
compared file by file (every *.cubin of BASE). Per kernel it prints
registers, spill bytes (ptxas -v; LOCAL of cuobjdump -res-usage for a cubin
without its .ptxas.txt beside it), static shared memory, the SASS
instruction count and the counts of the classes HMMA, LDSM, LDGSTS, LDG,
LDS, STS, BAR, MUFU, with NEW - BASE. Exits 1 when a kernel's registers,
spills, HMMA, LDSM, LDGSTS, MUFU or BAR counts differ, when its instruction
count differs by more than the tolerance (relative, default 1%), or when a
kernel is missing on one side.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

CUDA = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
# cuobjdump (and the nvdisasm it runs) from PATH, else the toolkit's; the
# toolkit here ships neither: `pip install --target DIR
# nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm` and put both in one
# folder on PATH.
CUOBJDUMP = shutil.which("cuobjdump") or str(CUDA / "bin/cuobjdump")
CLASSES = ["HMMA", "LDSM", "LDGSTS", "LDG", "LDS", "STS", "BAR", "MUFU"]
STRICT = ["regs", "spill", "HMMA", "LDSM", "LDGSTS", "MUFU", "BAR"]


def run(args):
    return subprocess.run(args, check=True, capture_output=True,
                          text=True).stdout


def ptxas_info(text):
    """kernel -> {regs, spill, smem} from ptxas -v output."""
    info, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            cur = info.setdefault(m.group(1), {})
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and cur is not None:
            cur["spill"] = int(m.group(1)) + int(m.group(2))
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur = info.setdefault(m.group(1), {})
        m = re.search(r"Used (\d+) registers", line)
        if m and cur is not None:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
    return info


def res_usage(cubin):
    info, cur = {}, None
    for line in run([CUOBJDUMP, "-res-usage",
                     str(cubin)]).splitlines():
        m = re.search(r"Function (\S+):", line)
        if m:
            cur = info.setdefault(m.group(1), {})
            continue
        m = re.search(r"REG:(\d+).*SHARED:(\d+).*LOCAL:(\d+)", line)
        if m and cur is not None:
            cur.update(regs=int(m.group(1)), smem=int(m.group(2)),
                       local=int(m.group(3)))
    return info


def sass_counts(cubin):
    """kernel -> Counter of opcode classes plus 'total' (NOPs excluded)."""
    out, cur = {}, None
    for line in run([CUOBJDUMP, "-sass",
                     str(cubin)]).splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            cur = out.setdefault(m.group(1), Counter())
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if not m or cur is None:
            continue
        toks = m.group(1).split()
        if toks and toks[0].startswith("@"):
            toks = toks[1:]
        if not toks:
            continue
        op = toks[0].split(".")[0]
        if op == "NOP":
            continue
        cur["total"] += 1
        cur[op] += 1
    return out


def load(path, tmp):
    path = Path(path)
    info = {}
    if path.suffix == ".ptx":
        cubin = Path(tmp) / (path.stem + str(abs(hash(str(path)))) + ".cubin")
        p = subprocess.run([str(CUDA / "bin/ptxas"), "-v", "-arch=sm_90a",
                            str(path), "-o", str(cubin)], check=True,
                           capture_output=True, text=True)
        info = ptxas_info(p.stdout + p.stderr)
    else:
        cubin = path
        side = path.with_suffix(".ptxas.txt")
        if side.exists():
            info = ptxas_info(side.read_text())
    usage = res_usage(cubin)
    counts = sass_counts(cubin)
    kernels = {}
    for k, c in counts.items():
        u = usage.get(k, {})
        i = info.get(k, {})
        kernels[k] = {
            "regs": i.get("regs", u.get("regs")),
            "spill": i.get("spill", u.get("local", 0)),
            "smem": u.get("smem", i.get("smem", 0)),
            "total": c["total"],
            **{cl: c[cl] for cl in CLASSES},
        }
    return kernels


def compare(base, new, tol, title):
    ok = True
    cols = ["regs", "spill", "smem", "total"] + CLASSES
    print(f"### {title}\n")
    print("| kernel | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for k in sorted(set(base) | set(new)):
        if k not in base or k not in new:
            print(f"| {k} | only in {'NEW' if k in new else 'BASE'} |")
            ok = False
            continue
        b, n = base[k], new[k]
        cells, bad = [], []
        for c in cols:
            d = (n[c] or 0) - (b[c] or 0)
            cells.append(f"{b[c]}" if d == 0 else f"{b[c]} -> {n[c]} ({d:+d})")
            if c in STRICT and d != 0:
                bad.append(c)
        if b["total"] and abs(n["total"] - b["total"]) > tol * b["total"]:
            bad.append("total")
        name = k if len(k) <= 40 else k[:37] + "..."
        flag = " **DIFF: " + ",".join(bad) + "**" if bad else ""
        print(f"| {name}{flag} | " + " | ".join(cells) + " |")
        ok = ok and not bad
    print()
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--tolerance", type=float, default=0.01)
    a = ap.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        if Path(a.base).is_dir():
            for f in sorted(Path(a.base).glob("*.cubin")):
                g = Path(a.new) / f.name
                if not g.exists():
                    print(f"### {f.name}: missing in {a.new}\n")
                    ok = False
                    continue
                ok &= compare(load(f, tmp), load(g, tmp), a.tolerance, f.stem)
        else:
            ok = compare(load(a.base, tmp), load(a.new, tmp), a.tolerance,
                         f"{a.base} -> {a.new}")
    print("RESULT:", "same" if ok else "DIFFERENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
