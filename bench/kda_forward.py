"""KDA forward: our compiled kernels beside fla chunk_kda and FlashKDA.

Shapes and input recipe are those of ../shared/bench-anchors/anchors.py
(bf16 q, k, v, g, beta; f32 initial/final state; gate lower_bound * sigmoid(
exp(A_log) * (g + dt_bias)) with lower_bound -5, q/k L2 norm and beta sigmoid
in the kernel; medians of triton.testing.do_bench for the anchors).

    # here (needs k3-opt): write and compile one model per head count
    .venv/bin/python bench/kda_forward.py prepare
    # on the GPU machine, with .anchors/{fla,flashkda} (see bench-anchors README)
    python3 bench/kda_forward.py run

Our time is k3-run's launch time (first launch to device idle, median of
warm runs; input upload excluded). Numerics are checked against fla's output
before any time is reported.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench"
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
SHAPES = [(1, 2048, 96), (1, 8192, 64), (1, 8192, 96)]
if os.environ.get("K3_BENCH_SHAPES"):  # e.g. "1,8192,96;1,2048,96"
    SHAPES = [tuple(int(x) for x in s.split(",")) for s in os.environ["K3_BENCH_SHAPES"].split(";")]
# Our variants: extra k3-compile options. "mma" is the default CUDA lowering
# for bf16 (kda=auto: k3-kda-mma-split, a token-parallel operand kernel,
# then the tensor-core chain; warps per chain block from the shape: 4 at H64,
# 8 at H96); kernel-config overrides (k3-select-kernel-config) set the
# chain's warps per block (kda_mma_recurrence.warps, 16 value columns
# each), its cp.async stages (kda_mma_recurrence.stages), the operand
# kernel's register cap (kda_mma_operands.blocks_per_sm); "recurrent" is
# the recurrent kernel (kda.tile=BVxPxSxC).
RECURRENT = "kda=recurrent"
TILES = {"mma": "kda=auto",
         "mma_occ4": "kda=auto kernel-config=kda_mma_operands.blocks_per_sm=4",
         "mma_stages2": "kda=auto kernel-config=kda_mma_recurrence.stages=2",
         "mma_w4": "kda=auto kernel-config=kda_mma_recurrence.warps=4",
         "mma_w8": "kda=auto kernel-config=kda_mma_recurrence.warps=8",
         "recurrent": RECURRENT}
# Decode variants: the artifact's decode entry (k3-decode-entry: the
# recurrent kernel with one-token staging), its prefill entry (16-token
# staging), and the prefill entry forced to one-token staging.
DECODE_TILES = {"": RECURRENT, "_prefill_entry": RECURRENT,
                "_s1": "kda=recurrent kernel-config=kda.tile=32x8x1x4"}
DECODE_ENTRY = {"": "forward_decode", "_prefill_entry": "forward", "_s1": "forward"}
VARIANTS = tuple(TILES) + (("chunkwise",) if os.environ.get("K3_BENCH_CHUNKWISE") == "1" else ())
if os.environ.get("K3_BENCH_VARIANTS"):  # e.g. "mma,recurrent"
    VARIANTS = tuple(v for v in os.environ["K3_BENCH_VARIANTS"].split(",") if v in VARIANTS)
ERR_BOUND = 1e-2
# Decode: one token per sequence, N sequences packed with cu_seqlens = arange.
DECODE = [(64, 32), (256, 32), (64, 96)]
DECODE_MODEL = """// KDA decode step: N sequences of one token, H={H}, K=V=128.
func.func @forward(
    %q: tensor<1x?x{H}x128xbf16> {{k3.name = "q", k3.dims = array<i64: 1, -1, {H}, 128>}},
    %k: tensor<1x?x{H}x128xbf16> {{k3.name = "k", k3.dims = array<i64: 1, -1, {H}, 128>}},
    %v: tensor<1x?x{H}x128xbf16> {{k3.name = "v", k3.dims = array<i64: 1, -1, {H}, 128>}},
    %g: tensor<1x?x{H}x128xf32> {{k3.name = "g", k3.dims = array<i64: 1, -1, {H}, 128>}},
    %beta: tensor<1x?x{H}xf32> {{k3.name = "beta", k3.dims = array<i64: 1, -1, {H}>}},
    %s0: tensor<?x{H}x128x128xf32> {{k3.name = "initial_state", k3.dims = array<i64: -2, {H}, 128, 128>}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<1x?x{H}x128xbf16> {{k3.name = "o"}}, tensor<?x{H}x128x128xf32> {{k3.name = "final_state"}}) {{
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) cu_seqlens(%cu)
      {{scale = 0.08838834764831845 : f64}}
      : (tensor<1x?x{H}x128xbf16>, tensor<1x?x{H}x128xbf16>, tensor<1x?x{H}x128xbf16>, tensor<1x?x{H}x128xf32>,
         tensor<1x?x{H}xf32>, tensor<?x{H}x128x128xf32>, tensor<?xi32>)
      -> (tensor<1x?x{H}x128xbf16>, tensor<?x{H}x128x128xf32>)
  return %o, %s : tensor<1x?x{H}x128xbf16>, tensor<?x{H}x128x128xf32>
}}
"""
D = 128
MODEL = """// KDA forward benchmark kernel: B=1, H={H}, K=V=128, bf16 in/out.
func.func @forward(
    %q: tensor<1x?x{H}x128xbf16> {{k3.name = "q", k3.dims = array<i64: 1, -1, {H}, 128>}},
    %k: tensor<1x?x{H}x128xbf16> {{k3.name = "k", k3.dims = array<i64: 1, -1, {H}, 128>}},
    %v: tensor<1x?x{H}x128xbf16> {{k3.name = "v", k3.dims = array<i64: 1, -1, {H}, 128>}},
    %g: tensor<1x?x{H}x128xbf16> {{k3.name = "g", k3.dims = array<i64: 1, -1, {H}, 128>}},
    %beta: tensor<1x?x{H}xbf16> {{k3.name = "beta", k3.dims = array<i64: 1, -1, {H}>}},
    %s0: tensor<?x{H}x128x128xf32> {{k3.name = "initial_state", k3.dims = array<i64: -2, {H}, 128, 128>}},
    %alog: tensor<{H}xf32> {{k3.name = "A_log"}},
    %dtb: tensor<{HD}xf32> {{k3.name = "dt_bias"}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<1x?x{H}x128xbf16> {{k3.name = "o"}}, tensor<?x{H}x128x128xf32> {{k3.name = "final_state"}}) {{
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) cu_seqlens(%cu) gate_params(%alog, %dtb)
      {{scale = 0.08838834764831845 : f64, use_qk_l2norm, use_beta_sigmoid,
       gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64}}
      : (tensor<1x?x{H}x128xbf16>, tensor<1x?x{H}x128xbf16>, tensor<1x?x{H}x128xbf16>, tensor<1x?x{H}x128xbf16>,
         tensor<1x?x{H}xbf16>, tensor<?x{H}x128x128xf32>, tensor<?xi32>, tensor<{H}xf32>, tensor<{HD}xf32>)
      -> (tensor<1x?x{H}x128xbf16>, tensor<?x{H}x128x128xf32>)
  return %o, %s : tensor<1x?x{H}x128xbf16>, tensor<?x{H}x128x128xf32>
}}
"""


def compile_model(src, out, options, max_tokens, max_seqs):
    subprocess.run([str(BIN / "k3-opt"), str(src),
                    f"--k3-compile=target=cuda {options} output={out} "
                    f"max-tokens={max_tokens} max-seqs={max_seqs}", "-o", os.devnull], check=True)


def prepare():
    OUT.mkdir(parents=True, exist_ok=True)
    for H in sorted({h for _, _, h in SHAPES}):
        src = OUT / f"kda_h{H}.mlir"
        src.write_text(MODEL.format(H=H, HD=H * D))
        for kda in VARIANTS:
            compile_model(src, OUT / f"kda_h{H}_{kda}.k3bin", TILES.get(kda, "kda=chunkwise"), 8192, 1)
    for H in sorted({h for _, h in DECODE}):
        src = OUT / f"kda_decode_h{H}.mlir"
        src.write_text(DECODE_MODEL.format(H=H))
        for suffix, tile in DECODE_TILES.items():
            compile_model(src, OUT / f"kda_decode_h{H}{suffix}.k3bin", tile, 256, 256)
    print(f"prepared {OUT}")


def write_safetensors(path, tensors):
    """tensors: name -> torch tensor on any device (bf16, f32, i32)."""
    import torch
    names = {torch.bfloat16: "BF16", torch.float32: "F32", torch.int32: "I32"}
    header, blobs, off = {}, [], 0
    for n, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[n] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            f.write(b)


def read_dump(path, name):
    """A dumped tensor as a torch tensor (bf16 widened to f32, exactly)."""
    import torch
    from dumps import read_tensor
    return torch.from_numpy(read_tensor(path, name).copy())


def run():
    import torch
    import torch.nn.functional as F
    import triton
    anchors = os.environ.get("ANCHORS_DIR", str(ROOT / ".anchors"))
    sys.path.insert(0, anchors)
    sys.path.insert(0, os.path.join(anchors, "flashkda"))
    from fla.ops.kda import chunk_kda
    try:
        import flash_kda
    except Exception as e:  # noqa: BLE001
        print("FlashKDA unavailable:", e)
        flash_kda = None
    dev = "cuda"
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")  # noqa: E731
    print(torch.__version__, triton.__version__, torch.cuda.get_device_name(), flush=True)
    rows = []
    for (B, T, H) in SHAPES:
        if os.environ.get("K3_BENCH_DECODE_ONLY") == "1":
            break
        torch.manual_seed(0)
        q = F.normalize(torch.randn(B, T, H, D, device=dev), dim=-1).bfloat16()
        k = F.normalize(torch.randn(B, T, H, D, device=dev), dim=-1).bfloat16()
        v = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
        g = torch.randn(B, T, H, D, device=dev, dtype=torch.bfloat16)
        beta = torch.randn(B, T, H, device=dev, dtype=torch.bfloat16)
        A_log = torch.rand(H, device=dev)
        dt_bias = torch.rand(H, D, device=dev)
        h0 = torch.randn(B, H, D, D, device=dev)
        scale = D ** -0.5
        row = {"shape": f"B{B} T{T} H{H}"}

        def fla():
            return chunk_kda(q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=h0,
                             output_final_state=True, use_gate_in_kernel=True,
                             use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                             safe_gate=True, A_log=A_log, dt_bias=dt_bias, lower_bound=-5.0)
        os.environ["FLA_FLASH_KDA"] = "0"
        with torch.inference_mode():
            o_ref, s_ref = fla()
            row["fla_ms"] = bench(fla)
        if flash_kda is not None:
            o_fk, s_fk = torch.empty_like(q), torch.empty_like(h0)
            row["flashkda_ms"] = bench(lambda: flash_kda.fwd(q, k, v, g, beta, scale, o_fk, A_log=A_log,
                                                             dt_bias=dt_bias, lower_bound=-5.0,
                                                             initial_state=h0, final_state=s_fk))
        inp = OUT / f"in_{T}_{H}.safetensors"
        write_safetensors(inp, {"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": h0,
                                "A_log": A_log, "dt_bias": dt_bias.reshape(-1),
                                "cu_seqlens": torch.tensor([0, T], dtype=torch.int32)})
        for kda in VARIANTS:
            dump = OUT / f"out_{T}_{H}_{kda}.safetensors"
            r = subprocess.run([str(BIN / "k3-run"), str(OUT / f"kda_h{H}_{kda}.k3bin"), "--device", "cuda:0",
                                "--inputs", str(inp), "--dump", str(dump), "--repeat", "3"],
                               capture_output=True, text=True, timeout=200,
                               # Launches one by one, as the anchors run: a
                               # prefill rarely repeats its shape, so no graphs.
                               env=dict(os.environ, K3_LAUNCH_GRAPHS="0"))
            if r.returncode != 0:
                row[f"k3_{kda}"] = "failed: " + r.stderr.strip()[-200:]
                continue
            o = read_dump(dump, "o").to(dev).float()
            s = read_dump(dump, "final_state").to(dev)
            err_o = ((o - o_ref.float()).norm() / o_ref.float().norm()).item()
            err_s = ((s - s_ref.float()).norm() / s_ref.float().norm()).item()
            ms = float(re.search(r"median ([0-9.]+) ms", r.stdout).group(1))
            row[f"k3_{kda}_ms"] = ms
            ok = err_o <= ERR_BOUND and err_s <= ERR_BOUND
            row[f"k3_{kda}_err_vs_fla"] = f"o {err_o:.1e}, state {err_s:.1e} {'ok' if ok else 'FAIL'}"
            if not ok:
                FAILURES.append(f"{row['shape']} {kda}")
            dump.unlink()
        if os.environ.get("K3_BENCH_KEEP_INPUTS") != "1":
            inp.unlink()
        C = 64
        flops = B * H * (6 * T * D * D + 3 * T * C * D + T * C * C)
        floor_ms = (B * T * H * 1282 + 2 * B * H * D * D * 4) / 4.25e9
        row["GFLOP"] = flops / 1e9
        row["memory_floor_ms"] = floor_ms
        for key in [k for k in row if k.endswith("_ms") and k != "memory_floor_ms"]:
            row[key.replace("_ms", "_TFLOPs")] = flops / row[key] / 1e9
        for kda in VARIANTS:
            if f"k3_{kda}_ms" in row:
                for anchor in ("fla", "flashkda"):
                    if f"{anchor}_ms" in row:
                        row[f"k3_{kda}_over_{anchor}"] = row[f"k3_{kda}_ms"] / row[f"{anchor}_ms"]
                row[f"k3_{kda}_floor_fraction"] = floor_ms / row[f"k3_{kda}_ms"]
        print(json.dumps(row), flush=True)
        rows.append(row)
    if os.environ.get("K3_BENCH_SKIP_DECODE") != "1":
        rows += decode(torch, F, bench, dev)
    (OUT / "kda_forward.json").write_text(json.dumps(rows, indent=1))
    print("ALL OK" if not FAILURES else "FAILURES: " + ", ".join(FAILURES))
    return 1 if FAILURES else 0


def decode(torch, F, bench, dev):
    """One token per sequence: our kernel (cu_seqlens = arange) beside fla
    fused_recurrent_kda on the anchors' decode inputs."""
    from fla.ops.kda import fused_recurrent_kda
    rows = []
    for (B, H) in DECODE:
        torch.manual_seed(1)
        q = F.normalize(torch.randn(B, 1, H, D, device=dev), dim=-1).bfloat16()
        k = F.normalize(torch.randn(B, 1, H, D, device=dev), dim=-1).bfloat16()
        v = torch.randn(B, 1, H, D, device=dev, dtype=torch.bfloat16)
        g = -torch.rand(B, 1, H, D, device=dev)
        beta = torch.rand(B, 1, H, device=dev)
        h0 = torch.randn(B, H, D, D, device=dev)
        row = {"shape": f"decode B{B} H{H}"}
        state_bytes = 2 * h0.numel() * 4

        def fla():
            return fused_recurrent_kda(q=q, k=k, v=v, g=g, beta=beta, scale=D ** -0.5, initial_state=h0,
                                       output_final_state=True)
        with torch.inference_mode():
            o_ref, s_ref = fla()
            row["fla_ms"] = bench(fla)
        flat = lambda x: x.reshape(1, B, *x.shape[2:])  # noqa: E731
        inp = OUT / f"in_decode_{B}_{H}.safetensors"
        write_safetensors(inp, {"q": flat(q), "k": flat(k), "v": flat(v), "g": flat(g), "beta": flat(beta),
                                "initial_state": h0,
                                "cu_seqlens": torch.arange(B + 1, dtype=torch.int32)})
        for suffix in DECODE_TILES:
            dump = OUT / f"out_decode_{B}_{H}.safetensors"
            r = subprocess.run([str(BIN / "k3-run"), str(OUT / f"kda_decode_h{H}{suffix}.k3bin"), "--device", "cuda:0",
                                "--entry", DECODE_ENTRY[suffix],
                                "--inputs", str(inp), "--dump", str(dump), "--repeat", "20"],
                               capture_output=True, text=True, timeout=200)
            if r.returncode != 0:
                row[f"k3{suffix}"] = "failed: " + r.stderr.strip()[-200:]
                FAILURES.append(row["shape"])
                continue
            o = read_dump(dump, "o").to(dev).float()
            s = read_dump(dump, "final_state").to(dev)
            err_o = ((o - flat(o_ref).float()).norm() / o_ref.float().norm()).item()
            err_s = ((s - s_ref.float()).norm() / s_ref.float().norm()).item()
            ok = err_o <= ERR_BOUND and err_s <= ERR_BOUND
            if not ok:
                FAILURES.append(row["shape"] + suffix)
            row[f"k3{suffix}_err_vs_fla"] = f"o {err_o:.1e}, state {err_s:.1e} {'ok' if ok else 'FAIL'}"
            row[f"k3{suffix}_ms"] = float(re.search(r"median ([0-9.]+) ms", r.stdout).group(1))
            row[f"k3{suffix}_state_TBps"] = state_bytes / row[f"k3{suffix}_ms"] / 1e9
            dump.unlink()
        row["fla_state_TBps"] = state_bytes / row["fla_ms"] / 1e9
        if os.environ.get("K3_BENCH_KEEP_INPUTS") != "1":
            inp.unlink()
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


FAILURES = []

if __name__ == "__main__":
    sys.exit(prepare() if sys.argv[1:] == ["prepare"] else run())
