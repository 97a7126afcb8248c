"""Prepare (here) and check (on the GPU machine) the compiled default model
on CUDA against the float64 oracle.

    # here, after building: writes out/gpu/ (artifacts, weights, inputs,
    # oracle logits); carry `out` and `build/bin` to the GPU machine
    .venv/bin/python bench/gpu_e2e.py prepare
    # there (numpy only):
    python3 bench/gpu_e2e.py check

`check` runs k3-run on cuda:0 for every case, compares logits with the
oracle's (normwise relative error, bound 1e-4: f32 activations, bf16
weights), and greedy generation with decode state on the GPU against the
CPU artifact's.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from dumps import read_tensor

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "gpu"
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
CASES = {"one": [7], "packed": [5, 17, 1, 9], "long": [120, 3]}
# CUDA artifacts checked: the default, and the tensor-core linear kernels
# (3xTF32 split, f32-accurate: the same 1e-4 bound).
CUDA_VARIANTS = {"tiny-cuda": "",
                 "tiny-cuda-mma-linear": "kernel-config=linear.kernel=linear_mma_3xtf32"}


def prepare():
    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(ROOT / "test" / "e2e"))
    from k3ref import model
    from k3ref.examples import tiny_k3_example_config
    from test_cpu_oracle import rounded_weights
    OUT.mkdir(parents=True, exist_ok=True)
    for name, target, extra in [("tiny-cpu", "cpu", "")] + [(n, "cuda", o) for n, o in CUDA_VARIANTS.items()]:
        subprocess.run([str(BIN / "k3-opt"), str(ROOT / "examples/tiny_k3.mlir"),
                        f"--k3-compile=target={target} {extra} output={OUT}/{name}.k3bin "
                        "max-tokens=256 max-seqs=4 logits=all", "-o", os.devnull], check=True)
    cfg = tiny_k3_example_config()
    weights = rounded_weights(cfg, seed=3)
    model.save_safetensors(OUT / "weights.safetensors",
                           {k: v.astype(np.float32) for k, v in weights.items()})
    rng = np.random.default_rng(0)
    for name, lens in CASES.items():
        ids = rng.integers(0, cfg.vocab_size, sum(lens)).astype(np.int32)
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        model.save_safetensors(OUT / f"in_{name}.safetensors", {
            "token_ids": ids, "cu_seqlens": cu,
            "context_lens": np.zeros(len(lens), np.int32)})
        np.save(OUT / f"ref_{name}.npy", model.forward(cfg, weights, ids, cu_seqlens=cu))
    print(f"prepared {OUT}")


def check():
    import protocol
    res = protocol.Results("gpu_e2e")  # raw results under bench/results (no timing: checks only)
    ok = True
    for (variant, name) in [(v, c) for v in CUDA_VARIANTS for c in CASES]:
        dump = OUT / f"dump_{name}.safetensors"
        r = subprocess.run([str(BIN / "k3-run"), str(OUT / f"{variant}.k3bin"), "--device", "cuda:0",
                            "--weights", str(OUT / "weights.safetensors"),
                            "--inputs", str(OUT / f"in_{name}.safetensors"), "--dump", str(dump)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{variant} {name}: k3-run failed: {r.stderr.strip()}")
            res.failed(f"k3-run failed: {r.stderr.strip()}", case=name, impl="k3", variant=variant)
            ok = False
            continue
        got = read_tensor(dump, "logits").astype(np.float64)
        ref = np.load(OUT / f"ref_{name}.npy")
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        ok &= err <= 1e-4
        res.add(case=name, impl="k3", variant=variant, tokens=int(ref.shape[0]),
                err_vs_oracle={"logits": float(err)}, bound=1e-4,
                status="ok" if err <= 1e-4 else "FAILED")
        print(f"{variant} {name}: tokens {ref.shape[0]}, normwise relative error of logits vs oracle {err:.2e}"
              f" {'ok' if err <= 1e-4 else 'FAIL'}")
    # Greedy generation: CPU, CUDA (decode steps replayed from a launch graph, a CUDA graph there
    # after the second), CUDA with graphs off: the same tokens.
    gen, lines = {}, {}
    for label, target, device, env in (("cpu", "cpu", "cpu", {}), ("cuda", "cuda", "cuda:0", {}),
                                       ("cuda, no graphs", "cuda", "cuda:0", {"K3_LAUNCH_GRAPHS": "0"})):
        r = subprocess.run([str(BIN / "k3-run"), str(OUT / f"tiny-{target}.k3bin"), "--device", device,
                            "--weights", str(OUT / "weights.safetensors"),
                            "--prompt", "11,42,7,200,3,99,150,21,5", "--max-new-tokens", "24"],
                           capture_output=True, text=True, env=dict(os.environ, **env))
        print(f"generation on {device} ({label}):\n{r.stdout.strip() or r.stderr.strip()}")
        gen[label] = [l for l in r.stdout.splitlines() if l.startswith("generated:")]
        lines[label] = r.stdout
    same = gen["cpu"] and gen["cpu"] == gen["cuda"] == gen["cuda, no graphs"]
    print(f"greedy decode cpu vs cuda (graphs on and off): {'identical' if same else 'DIFFERENT'}")
    ok &= bool(same)
    graphs = "replayed from 1 launch graph" in lines["cuda"]
    print(f"decode through a CUDA graph: {'yes' if graphs else 'NO'}")
    ok &= graphs
    res.add(case="greedy decode cpu vs cuda (graphs on, off)", impl="k3", variant="tiny-cuda",
            status="ok" if same and graphs else "FAILED", identical=bool(same), cuda_graph=graphs)
    res.write()
    print("ALL OK" if ok else "FAILURES")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(prepare() if sys.argv[1:] == ["prepare"] else check())
