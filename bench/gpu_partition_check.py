"""The NCCL path of a partitioned artifact on one GPU (issue 19's test on
one H200): a 4-layer Kimi-Linear-48B at its real widths (3 KDA + 1 MLA
layers, 8 experts top-2 so that it is small) compiled for CUDA with bf16
activations twice, plain and as the SPMD program of one rank (k3-compile
tp=1 spmd=1: weight shards of one part, one all-reduce per attention layer
and MLP block, run by NCCL with one rank). Both must give the same logits,
bit for bit, on the same seeded weights and packed prompts, and the same
greedy tokens through the decode entry. A TP = 2 artifact on a machine with
one GPU must be refused with a clear error, not crash or hang.

    .venv/bin/python bench/gpu_partition_check.py prepare   # here (k3-opt)
    python3 bench/gpu_partition_check.py check              # GPU machine

NCCL comes from the machine's PyTorch (nvidia-nccl); K3_NCCL_LIB names
another libnccl.so.2. Writes bench/results/gpu_partition_check-<gpu>-
<date>.json (a FAILED row per failed case; exit status 1 if any).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
import protocol  # noqa: E402

OUT = ROOT / "out" / "partition_check"
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
CONFIG = ROOT / "bench" / "configs" / "kimi-linear-48b.json"
# The cut: real widths and heads, 4 layers, few experts.
CUT = {"num_hidden_layers": 4, "num_experts": 8, "num_experts_per_token": 2}
VOCAB = 163840
ARTIFACTS = {"plain": "tp=1", "spmd1": "tp=1 spmd=1", "tp2": "tp=2"}
LENS = [[7], [5, 17, 1, 9], [64, 3]]


def prepare() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    import json
    cfg = dict(json.loads(CONFIG.read_text()), **CUT)
    cfg["linear_attn_config"] = dict(cfg["linear_attn_config"], kda_layers=[1, 2, 3],
                                     full_attn_layers=[4])
    cpath, mlir = OUT / "kimi-cut.json", OUT / "kimi.mlir"
    cpath.write_text(json.dumps(cfg))
    subprocess.run([str(BIN / "k3-import"), str(cpath), "-o", str(mlir), "--max-context", "1024"],
                   check=True)
    for name, opts in ARTIFACTS.items():
        subprocess.run([str(BIN / "k3-opt"), str(mlir),
                        f"--k3-compile=target=cuda activation-dtype=bf16 max-tokens=160 "
                        f"max-seqs=4 output={OUT / (name + '.k3bin')} {opts}",
                        "-o", os.devnull], check=True)
    return 0


def nccl_library() -> str:
    """libnccl.so.2 of the machine's PyTorch, unless K3_NCCL_LIB is set."""
    if os.environ.get("K3_NCCL_LIB"):
        return os.environ["K3_NCCL_LIB"]
    import nvidia.nccl  # the wheel PyTorch depends on
    lib = Path(list(nvidia.nccl.__path__)[0]) / "lib" / "libnccl.so.2"
    return str(lib)


def check() -> int:
    os.environ["K3_NCCL_LIB"] = nccl_library()
    import k3
    res = protocol.Results("gpu_partition_check")
    plain = k3.Session(str(OUT / "plain.k3bin"), device="cuda:0")
    plain.random_weights(1)
    spmd = None

    def open_spmd():
        nonlocal spmd
        spmd = k3.Session(str(OUT / "spmd1.k3bin"), device="cuda:0")
        spmd.random_weights(1)
        return {"device": spmd.device, "nccl": os.environ["K3_NCCL_LIB"]}
    res.guard(open_spmd, case="spmd1 session", impl="k3", variant="NCCL, one rank")
    rng = np.random.default_rng(0)
    for lens in LENS:
        ids = rng.integers(0, VOCAB, sum(lens)).astype(np.int32)
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        inputs = dict(token_ids=ids, cu_seqlens=cu, context_lens=np.zeros(len(lens), np.int32))

        def case(inputs=inputs):
            a = plain.run(**inputs)["logits"]
            b = spmd.run(**inputs)["logits"]
            if not np.array_equal(a, b):
                raise AssertionError(f"logits differ: normwise {protocol.rel_err(b, a):.3e}")
            return {"logits_equal": True, "rows": int(a.shape[0])}
        res.guard(case, case="prefill logits", impl="k3", variant="spmd1 (NCCL) vs plain",
                  shape={"lens": lens})
    prompt = [int(x) for x in rng.integers(0, VOCAB, 9)]

    def decode():
        a, b = plain.generate(prompt, 8), spmd.generate(prompt, 8)
        if a != b:
            raise AssertionError(f"greedy tokens differ: {b} vs {a}")
        return {"tokens": a}
    res.guard(decode, case="greedy decode", impl="k3", variant="spmd1 (NCCL) vs plain",
              shape={"prompt": len(prompt), "new": 8})

    def refused():
        r = subprocess.run([str(BIN / "k3-run"), str(OUT / "tp2.k3bin"), "--device", "cuda:0",
                            "--random-weights", "1", "--prompt", "1,2,3", "--max-new-tokens", "2"],
                           capture_output=True, text=True, timeout=120)
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        if r.returncode != 1 or "needs cuda:1" not in last:
            raise AssertionError(f"exit {r.returncode}: {r.stderr[-800:]}")
        return {"exit": r.returncode, "error": last}
    res.guard(refused, case="tp=2 on one GPU", impl="k3-run", variant="refused")
    res.write()
    return 1 if res.failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("prepare", "check"):
        sys.exit(__doc__)
    sys.exit(prepare() if sys.argv[1] == "prepare" else check())
