"""python -m k3.plan (python/k3/plan.py): the per-GPU plan of a split model
(issue 19). Its single-GPU figures must be the compiler's and the runtime's
own: the weight bytes `k3-compile report=1` prints, the state per sequence
and cache per token `k3-run` prints before it allocates.

Run by ctest (K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_plan.py
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3 import plan  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")
CONFIGS = ROOT / "examples" / "configs"


@pytest.mark.parametrize("name,dtype", [("tiny-kimi-linear", "f32"), ("tiny-k3", "f32"),
                                        ("tiny-kimi-linear", "bf16")])
def test_one_gpu_is_what_the_compiler_and_runtime_report(tmp_path, name, dtype):
    """Under the bf16 policy the latent cache is bf16: 2 bytes an element."""
    config = CONFIGS / f"{name}.json"
    mlir, art = tmp_path / "m.mlir", tmp_path / "m.k3bin"
    subprocess.run([f"{BIN}/k3-import", str(config), "-o", str(mlir)], check=True)
    r = subprocess.run([f"{BIN}/k3-opt", str(mlir), f"--k3-compile=output={art} max-tokens=64 max-seqs=2 "
                        f"activation-dtype={dtype} report=1", "-o", os.devnull],
                       capture_output=True, text=True, check=True)
    reported = int(re.search(r"weights (\d+) bytes per device", r.stderr).group(1))
    weights = plan.model_weights(config, Path(BIN))
    assert plan.per_gpu_weight_bytes(weights, 1, 1) == reported
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--random-weights", "1", "--prompt", "1,2",
                        "--max-new-tokens", "1"], capture_output=True, text=True, check=True)
    per_seq, per_tok = map(int, re.search(r"\((\d+) B per sequence, (\d+) B per cached token\)",
                                          r.stderr + r.stdout).groups())
    dec = plan.Decoder.from_config(json.loads(config.read_text()))
    assert dec.cache_bytes_per_token(4 if dtype == "f32" else 2) == per_tok
    if name == "tiny-kimi-linear":  # K3's sequences also carry the AttnRes blocks
        assert dec.kda_state_bytes(1) == per_seq


def test_splits_divide_the_heads_and_experts():
    weights = plan.model_weights(CONFIGS / "kimi-k3.json", Path(BIN))
    one = plan.per_gpu_weight_bytes(weights, 1, 1)
    eight = plan.per_gpu_weight_bytes(weights, 8, 8)
    experts = sum(w.stored_bytes() for w in weights if w.split() == "ep")
    # EP 8 keeps an eighth of the experts; TP 8 takes the head projections too.
    assert eight < one - experts * 7 // 8
    with pytest.raises(plan.PlanError, match=r"experts\.\{expert\}\..*does not split over 5 ranks"):
        plan.per_gpu_weight_bytes(weights, 1, 5)


def test_cli_prints_every_gpu_count(tmp_path):
    r = subprocess.run([sys.executable, "-m", "k3.plan", str(CONFIGS / "kimi-k3.json"), "--gpus", "8,16",
                        "--bin-dir", BIN], capture_output=True, text=True, cwd=ROOT / "python")
    assert r.returncode == 0, r.stderr
    rows = [l for l in r.stdout.splitlines() if re.match(r"\| (8|16) \|", l)]
    assert len(rows) == 8, r.stdout
    bad = subprocess.run([sys.executable, "-m", "k3.plan", str(tmp_path / "missing.json"), "--bin-dir", BIN],
                         capture_output=True, text=True, cwd=ROOT / "python")
    assert bad.returncode == 1 and "missing.json" in bad.stderr


def test_expert_split_is_what_the_compiler_reports(tmp_path):
    """ep = 2 and 4: the weight bytes each rank holds, as k3-compile
    report=1 prints them for the SPMD program, are the plan's. (With TP the
    plan also splits the embedding and the LM head by vocabulary, which the
    compiler keeps whole by default.)"""
    config = CONFIGS / "tiny-k3.json"
    mlir = tmp_path / "m.mlir"
    subprocess.run([f"{BIN}/k3-import", str(config), "-o", str(mlir)], check=True)
    weights = plan.model_weights(config, Path(BIN))
    for tp, ep in ((1, 2), (1, 4)):
        r = subprocess.run([f"{BIN}/k3-opt", str(mlir), f"--k3-compile=output={tmp_path / 'e.k3bin'} "
                            f"max-tokens=64 max-seqs=2 report=1 tp={tp} ep={ep}", "-o", os.devnull],
                           capture_output=True, text=True, check=True)
        m = re.search(r"weights (\d+) bytes per device \(each of (\d+) ranks' devices\)", r.stderr)
        assert m and int(m.group(2)) == tp * ep, r.stderr[-500:]
        assert plan.per_gpu_weight_bytes(weights, tp, ep) == int(m.group(1)), (tp, ep)


def test_arena_from_compile_is_the_compilers_per_tp(tmp_path):
    """--arena-from-compile: each split's arena is k3-compile's plan of a
    rank at its TP (tiny K3, 2 heads: TP 1 and 2), and TP 2's is no larger
    than one device's (its attention activations are halved)."""
    config = CONFIGS / "tiny-k3.json"
    one, two = (plan.compiled_arena(config, Path(BIN), tp, 64, 2) for tp in (1, 2))
    assert 0 < two <= one
    r = subprocess.run([sys.executable, "-m", "k3.plan", str(config), "--gpus", "2", "--json",
                        "--arena-from-compile", "64,2", "--bin-dir", BIN],
                       capture_output=True, text=True, cwd=ROOT / "python")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["tp"], x["arena"]) for x in rows] == [(1, one), (2, two)]
