"""PyTorch interop on the GPU: DLPack round trips without copies, and the
runtime's sampler against a PyTorch reference sampler (issue 22).

    # here, after building (k3-opt needed): CUDA artifacts into out/gpu_interop
    .venv/bin/python bench/gpu_interop.py prepare
    # on the GPU machine (torch with CUDA, numpy; python/ and the build's
    # runtime library; carry out/gpu_interop and build/runtime/libk3runtime.so):
    K3_RUNTIME_LIB=build/runtime/libk3runtime.so python3 bench/gpu_interop.py check

`check` prints one line per check and a JSON summary (out/gpu_interop/
interop.json); exit status 1 when a check fails. It checks:

1. DLPack, no copies: a CUDA torch tensor handed to k3 is read at its own
   address (ForeignTensor.ptr == tensor.data_ptr()); `Session.run` on device
   tensors goes through k3_session_run_device (device-to-device into the
   plan's buffers, no host staging) and returns outputs whose
   `torch.from_dlpack(...)` tensors have the data pointer of the session's
   output buffer (k3_session_output_device), the same on every run; a k3
   output re-exported by torch comes back to k3 at the same address. The
   logits equal those of a host run of the same inputs.
2. Sampling statistics on the same logits (a row of the tiny model's
   logits on the GPU, and synthetic peaked/flat rows): k3's sampler
   (k3.sample: Philox keyed by seed/stream/step) against a PyTorch
   reference (temperature, top-k, top-p, min-p in transformers' order, then
   torch.multinomial): the support of k3's draws is inside the reference's
   filtered support, the kept top-p mass reaches top_p, the empirical
   distributions agree (the 20 most likely tokens and the rest of the
   support as bins, each within 5 sigma of the reference), and the
   same seed gives the same draws (k3: bitwise; torch: with a seeded
   generator).
3. Generation on CUDA: greedy tokens equal the argmax of the logits rows
   (the sampler's rule); seeded sampling reproducible.
4. k3.ops.chunk_kda on CUDA torch tensors against the float64 oracle
   (and fla's chunk_kda when fla is installed).
"""
import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "gpu_interop"
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
sys.path.insert(0, str(ROOT / "python"))
KDA_SHAPES = [(1, 300, 4, 64, 64), (2, 128, 2, 128, 128)]  # B, T, H, K, V


def prepare():
    os.environ["K3_CACHE_DIR"] = str(OUT / "cache")
    os.environ.setdefault("K3_BIN_DIR", str(BIN))
    import k3
    import k3.ops
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(BIN / "k3-opt"), str(ROOT / "examples/tiny_k3.mlir"),
                    f"--k3-compile=target=cuda output={OUT}/tiny-cuda.k3bin max-tokens=256 "
                    "max-seqs=4", "-o", os.devnull], check=True)
    subprocess.run([str(BIN / "k3-opt"), str(ROOT / "examples/tiny_k3.mlir"),
                    f"--k3-compile=target=cpu output={OUT}/tiny-cpu.k3bin max-tokens=256 "
                    "max-seqs=4", "-o", os.devnull], check=True)
    for B, T, H, K, V in KDA_SHAPES:
        for l2 in (False, True):
            k3.ops._artifact(H, K, V, K ** -0.5, l2, *k3.ops.bucket(B, T, B), "cuda")
    print(f"prepared {OUT}")


# -- the PyTorch reference sampler ------------------------------------------
def torch_filtered_probs(logits, temperature, top_k=0, top_p=1.0, min_p=0.0):
    """The distribution a transformers-style sampler draws from: logits /
    temperature, top-k, top-p (shortest prefix of descending probability with
    mass >= top_p), min-p (relative to the top probability); float64."""
    import torch
    x = logits.double() / temperature
    if top_k > 0:
        kth = torch.topk(x, top_k).values[-1]
        x = torch.where(x < kth, torch.full_like(x, -math.inf), x)
    p = torch.softmax(x, -1)
    if top_p < 1.0:
        sp, idx = torch.sort(p, descending=True, stable=True)
        cum = torch.cumsum(sp, -1)
        keep = (cum - sp) < top_p  # the prefix until the mass reaches top_p
        mask = torch.zeros_like(p, dtype=torch.bool)
        mask[idx[keep]] = True
        p = torch.where(mask, p, torch.zeros_like(p))
        p = p / p.sum()
    if min_p > 0:
        p = torch.where(p >= min_p * p.max(), p, torch.zeros_like(p))
        p = p / p.sum()
    return p


def check():
    import torch
    import k3
    import k3.ops
    from k3.dlpack import from_dlpack
    os.environ["K3_CACHE_DIR"] = str(OUT / "cache")
    results, ok = {}, True

    def report(name, passed, **info):
        nonlocal ok
        ok &= bool(passed)
        results[name] = dict(passed=bool(passed), **info)
        print(f"{'PASS' if passed else 'FAIL'} {name} {json.dumps(info, default=str)}")

    dev = torch.device("cuda:0")
    s = k3.Session(OUT / "tiny-cuda.k3bin", device="cuda:0")
    s.random_weights(7)
    host = k3.Session(OUT / "tiny-cpu.k3bin")
    host.random_weights(7)

    # 1. DLPack round trips.
    ids = torch.tensor([5, 17, 1, 9, 33], dtype=torch.int32, device=dev)
    cu = torch.tensor([0, 2, 5], dtype=torch.int32, device=dev)
    ctx = torch.zeros(2, dtype=torch.int32, device=dev)
    f = from_dlpack(ids, "token_ids")
    report("dlpack_in_same_pointer", f.ptr == ids.data_ptr() and f.device == "cuda:0",
           k3=hex(f.ptr), torch=hex(ids.data_ptr()))
    s.reset_state()
    out = s.run(token_ids=ids, cu_seqlens=cu, context_lens=ctx)  # outputs="dlpack" by default
    t = torch.from_dlpack(out["logits"])
    report("dlpack_out_same_pointer", t.data_ptr() == out["logits"].data_ptr and t.is_cuda,
           k3=hex(out["logits"].data_ptr), torch=hex(t.data_ptr()), shape=list(t.shape))
    back = from_dlpack(t, "logits")
    report("dlpack_round_trip_same_pointer", back.ptr == t.data_ptr())
    s.reset_state()
    out2 = s.run(token_ids=ids, cu_seqlens=cu, context_lens=ctx)
    report("dlpack_output_buffer_reused", out2["logits"].data_ptr == out["logits"].data_ptr)
    host.reset_state()
    ref = host.run(token_ids=ids.cpu().numpy(), cu_seqlens=cu.cpu().numpy(),
                   context_lens=ctx.cpu().numpy())["logits"]
    got = torch.from_dlpack(out2["logits"]).cpu().numpy()
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    report("dlpack_logits_match_host_run", err < 1e-4, rel_err=err)

    # 2. Sampling statistics on the same logits.
    rng = np.random.default_rng(0)
    rows = {"tiny_model": got[-1].astype(np.float32),
            "peaked_163840": (rng.standard_normal(163840) * 1.5).astype(np.float32),
            "flat_4096": (rng.standard_normal(4096) * 0.3).astype(np.float32)}
    rows["peaked_163840"][rng.integers(0, 163840, 20)] += 12
    settings = [dict(temperature=1.0), dict(temperature=0.7, top_p=0.9),
                dict(temperature=1.0, top_k=50), dict(temperature=0.8, top_p=0.95, min_p=0.05),
                dict(temperature=1.3, top_k=200, top_p=0.8)]
    N = 20000
    for rname, row in rows.items():
        logits_t = torch.from_numpy(row).to(dev)
        for kw in settings:
            p = torch_filtered_probs(logits_t, **kw).cpu().numpy()
            # k3_sample is a pure function and ctypes drops the GIL: the
            # draws spread over the machine's cores (one 163840-wide row
            # costs milliseconds, 20000 of them a minute on one core).
            with ThreadPoolExecutor(os.cpu_count() or 4) as pool:
                draws = np.array(list(pool.map(
                    lambda i, row=row, kw=kw: k3.sample(row, seed=11, step=i, **kw), range(N))))
            freq = np.bincount(draws, minlength=row.size) / N
            support_ok = bool(np.all(p[np.unique(draws)] > 0))
            # Binned agreement: the 20 most likely tokens one by one, the
            # rest of the support as one bin; every bin within 5 sigma.
            top = np.argsort(-p, kind="stable")[:20]
            bins_p = np.append(p[top], p.sum() - p[top].sum())
            bins_f = np.append(freq[top], freq.sum() - freq[top].sum())
            z = float(np.max(np.abs(bins_f - bins_p) /
                             np.sqrt(np.maximum(bins_p * (1 - bins_p), 1e-12) / N)))
            raw = torch.softmax(logits_t.double() / kw["temperature"], -1).cpu().numpy()
            kept_mass = float(raw[p > 0].sum())
            mass_ok = kw.get("top_p", 1.0) >= 1.0 or kept_mass >= kw["top_p"] - 1e-9 or \
                kw.get("min_p", 0) > 0 or kw.get("top_k", 0) > 0
            again = np.array([k3.sample(row, seed=11, step=i, **kw) for i in range(200)])
            g1 = torch.Generator(device=dev).manual_seed(11)
            g2 = torch.Generator(device=dev).manual_seed(11)
            pt = torch.from_numpy(p).to(dev)
            tdet = torch.equal(torch.multinomial(pt, 200, True, generator=g1),
                               torch.multinomial(pt, 200, True, generator=g2))
            report(f"sampling_{rname}_{'_'.join(f'{k}{v}' for k, v in kw.items())}",
                   support_ok and z <= 5 and mass_ok and np.array_equal(again, draws[:200])
                   and tdet, max_z=round(z, 2),
                   kept_top_p_mass=round(kept_mass, 5), support=int((p > 0).sum()))

    # 3. Generation on CUDA.
    greedy = s.generate([5, 17, 1, 9], 16)
    s.reset_state()
    rowsum = []
    pos, step = 0, [5, 17, 1, 9]
    for _ in range(16):
        n = len(step)
        o = s.run("forward" if pos == 0 else "forward_decode", outputs="numpy",
                  token_ids=np.asarray(step, np.int32), cu_seqlens=np.asarray([0, n], np.int32),
                  context_lens=np.asarray([pos], np.int32))
        rowsum.append(int(np.argmax(o["logits"][-1])))
        pos, step = pos + n, [rowsum[-1]]
    report("cuda_greedy_equals_argmax_loop", greedy == rowsum, tokens=greedy)
    a = s.generate([[5, 17, 1, 9], [3]], 16, temperature=0.9, top_p=0.9, seed=[1, 2])
    b = s.generate([[5, 17, 1, 9], [3]], 16, temperature=0.9, top_p=0.9, seed=[1, 2])
    report("cuda_seeded_generation_reproducible", a == b)

    # 4. chunk_kda on CUDA torch tensors.
    from k3ref import ops as ref_ops
    for B, T, H, K, V in KDA_SHAPES:
        for l2 in (False, True):
            gen = torch.Generator(device=dev).manual_seed(0)
            q, k = (torch.randn(B, T, H, K, device=dev, generator=gen) * (1 if l2 else 0.1)
                    for _ in range(2))
            v = torch.randn(B, T, H, V, device=dev, generator=gen)
            g = -torch.rand(B, T, H, K, device=dev, generator=gen) * 0.2
            beta = torch.rand(B, T, H, device=dev, generator=gen)
            h0 = torch.randn(B, H, K, V, device=dev, generator=gen) * 0.1
            o, ht = k3.ops.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                     use_qk_l2norm_in_kernel=l2)
            ro, rht = ref_ops.kda_recurrent(*(x.cpu().double().numpy() for x in (q, k, v, g, beta)),
                                            K ** -0.5, initial_state=h0.cpu().double().numpy(),
                                            use_qk_l2norm=l2)
            e1 = float(np.linalg.norm(o.cpu().double().numpy() - ro) / np.linalg.norm(ro))
            e2 = float(np.linalg.norm(ht.cpu().double().numpy() - rht) / np.linalg.norm(rht))
            info = dict(rel_err_o=e1, rel_err_state=e2, on_cuda=bool(o.is_cuda))
            try:
                from fla.ops.kda import chunk_kda as fla_kda
                fo, _ = fla_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                use_qk_l2norm_in_kernel=l2)
                info["rel_err_vs_fla"] = float((fo - o).norm() / fo.norm())
            except ImportError:
                pass
            report(f"chunk_kda_cuda_B{B}_T{T}_H{H}_K{K}_V{V}_l2{int(l2)}",
                   e1 < 1e-3 and e2 < 1e-3 and o.is_cuda, **info)

    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "interop.json").write_text(json.dumps(results, indent=1, default=str))
    # The raw record: bench/results/gpu_interop-<gpu>-<date>.json, with the
    # GPU, driver, date and commit (bench/protocol.py's environment).
    sys.path.insert(0, str(ROOT / "bench"))
    import protocol
    env = protocol.environment()
    gpu = "".join(c if c.isalnum() else "-" for c in env.get("gpu", "gpu")).strip("-").lower()
    stamp = env["date"].replace(":", "").replace("-", "")
    folder = Path(os.environ.get("K3_RESULTS_DIR", ROOT / "bench" / "results"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"gpu_interop-{gpu}-{stamp}.json"
    path.write_text(json.dumps({"check": "gpu_interop", "environment": env, "all_passed": ok,
                                "checks": results}, indent=1, default=str))
    print(f"wrote {path}")
    print(("all checks passed" if ok else "SOME CHECKS FAILED") + f" ({len(results)} checks)")
    return 0 if ok else 1


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "prepare":
        prepare()
    elif cmd == "check":
        sys.exit(check())
    else:
        print(__doc__)
        sys.exit(2)
