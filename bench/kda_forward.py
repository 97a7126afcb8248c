"""KDA forward and decode: our compiled kernels beside fla and FlashKDA,
under bench/protocol.py (issue 18).

    # here (needs k3-opt): one artifact per head count and variant, under out/bench
    .venv/bin/python bench/kda_forward.py prepare
    # optional: a baseline set compiled by another k3-opt (old-vs-new, issue 13)
    K3_BASELINE_K3OPT=/old/build/bin/k3-opt .venv/bin/python bench/kda_forward.py prepare-baseline
    # on the GPU machine, with .anchors/{fla,flashkda} (see bench-anchors README)
    python3 bench/kda_forward.py run          # K3_BENCH_BASELINE=out/bench-baseline to compare

Shapes: the 8 KDA rows of ANCHORS.md (every multi-sequence shape packed
into one [1, T] batch with cu_seqlens, for all three implementations), the
awkward shapes of issue 18 (varlen with lengths 1 and 63-65, T not a
multiple of 64, gates at the -5 bound), and decode (one token per
sequence) at B64 H32, B256 H32, B64 H96, B512 H96. Input recipe of
../shared/bench-anchors/anchors.py: bf16 q, k, v, g, beta; f32 initial and
final state [N, H, K, V]; gate lower_bound * sigmoid(exp(A_log) * (g +
dt_bias)), lower bound -5; q/k L2 norm and beta sigmoid in the kernel.

Per case, in one process on the same device tensors:
  1. the f64 oracle (bench/kda_oracle.py, torch float64 on the GPU);
  2. fla chunk_kda and FlashKDA (its state layout is [N, H, V, K], its
     README's: the transposed state goes in, its final state is transposed
     back), each checked against the oracle, then timed with torch.cuda.Event;
  3. each of our variants: run once and checked against the oracle (its own
     artifact: heads, dims, warps, variant), then timed with the runtime's
     timing API (CUDA events around the entry), launch graphs off (the
     anchors launch one by one too);
  4. with K3_BENCH_BASELINE=DIR: the same artifact names from DIR, checked
     and timed on the same tensors, interleaved with ours in rounds; the
     row carries ratio_vs_baseline (ours / baseline, medians).
Anything that raises or fails its check is a FAILED row. Raw JSON goes to
bench/results/kda_forward-<gpu>-<date>.json ($OUT gets a copy).
"""
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import protocol  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "bench"
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
D = 128
SCALE = D ** -0.5
LOWER_BOUND = -5.0
ERR_BOUND = 1e-2  # normwise vs f64, o and final state (bf16 inputs and output)
MAX_TOKENS, MAX_SEQS = 32768, 32
# (label, sequence lengths packed in one batch, heads, gate regime)
PREFILL = [
    ("B1 T8192 H96", [8192], 96, "random"),
    ("B1 T8192 H64", [8192], 64, "random"),
    ("B1 T32768 H96", [32768], 96, "random"),
    ("B1 T2048 H96", [2048], 96, "random"),
    ("B8 T4096 H32", [4096] * 8, 32, "random"),
    ("8x1024 packed H96", [1024] * 8, 96, "random"),
    ("32x512 packed H32", [512] * 32, 32, "random"),
    ("2x16384 packed H64", [16384] * 2, 64, "random"),
    # issue 18's awkward shapes
    ("varlen [1,63,64,65,300,507] H64", [1, 63, 64, 65, 300, 507], 64, "random"),
    ("T1000 H96 (not a multiple of 64)", [1000], 96, "random"),
    ("B1 T2048 H96 gates at -5", [2048], 96, "bound"),
    # Kimi-Linear-48B's KDA layer (32 heads) on one 8192-token prompt: the
    # chain's most split form (2 active warps of 8 a block).
    ("B1 T8192 H32 (Kimi-Linear layer)", [8192], 32, "random"),
]
if os.environ.get("K3_BENCH_CASES"):  # exact labels, ';'-separated
    keep = os.environ["K3_BENCH_CASES"].split(";")
    PREFILL = [c for c in PREFILL if c[0] in keep]
DECODE = [(64, 32), (256, 32), (64, 96), (512, 96)]
DECODE_MAX_SEQS = 512
# Our variants: extra k3-compile options. "mma" is the default CUDA lowering
# for bf16 (kda=auto: k3-kda-mma-split, a token-parallel operand kernel,
# then the tensor-core chain: blocks of 8 warps, 16 value columns each, of
# which a call with few sequences keeps 1, 2 or 4 active, chosen at run
# time: 2 at B1 H32, 4 at B1 H64, 8 at H96 or packed batches);
# kernel-config overrides (k3-select-kernel-config) set the chain's warps
# per block (kda_mma_recurrence.warps) and the fewest value columns a block
# takes (kda_mma_recurrence.tile=16xC: 16 W turns the run-time split off,
# so mma_wN are fixed blocks of N active warps, the default before the
# split), its cp.async stages (kda_mma_recurrence.stages), the operand
# kernel's register cap (kda_mma_operands.blocks_per_sm); "recurrent" is
# the recurrent kernel (kda.tile=BVxPxSxC).
RECURRENT = "kda=recurrent"
TILES = {"mma": "kda=auto",
         "mma_occ4": "kda=auto kernel-config=kda_mma_operands.blocks_per_sm=4",
         "mma_stages2": "kda=auto kernel-config=kda_mma_recurrence.stages=2",
         "mma_w2": "kda=auto kernel-config=kda_mma_recurrence.warps=2,kda_mma_recurrence.tile=16x32",
         "mma_w4": "kda=auto kernel-config=kda_mma_recurrence.warps=4,kda_mma_recurrence.tile=16x64",
         "mma_w8": "kda=auto kernel-config=kda_mma_recurrence.tile=16x128",
         "recurrent": RECURRENT}
VARIANTS = tuple(TILES)
if os.environ.get("K3_BENCH_VARIANTS"):  # e.g. "mma,recurrent"
    VARIANTS = tuple(v for v in os.environ["K3_BENCH_VARIANTS"].split(",") if v in TILES)
# Decode variants: the artifact's decode entry (k3-decode-entry: the
# recurrent kernel with one-token staging), the same with the state stored
# in bf16 (decode_entry_bf16_state, docs/precision.md), its prefill entry
# (16-token staging), and the prefill entry forced to one-token staging.
# The s1_* variants: one-token staging with other tiles (BVxPxSxC: value
# columns per block, lanes per column group, staged tokens, columns per
# lane), to find the decode tile that streams the state fastest.
DECODE_TILES = {"decode_entry": RECURRENT, "prefill_entry": RECURRENT,
                "prefill_entry_s1": "kda=recurrent kernel-config=kda.tile=32x8x1x4"}
S1_TILES = {"s1_bv16": "16x8x1x4", "s1_bv64": "64x8x1x4", "s1_bv128": "128x8x1x4",
            "s1_p16": "32x16x1x4", "s1_bv64_p16": "64x16x1x4", "s1_p32": "32x32x1x4"}
DECODE_TILES.update({k: f"kda=recurrent kernel-config=kda.tile={t}" for k, t in S1_TILES.items()})
# Register caps (blocks_per_sm: ptxas keeps the registers to 65536 / (64
# threads x N)): 154 registers give 6 resident blocks of the default tile.
S1_CAPS = {"s1_bps7": ("32x8x1x4", 7), "s1_bps8": ("32x8x1x4", 8), "s1_bv64_bps4": ("64x8x1x4", 4)}
DECODE_TILES.update({k: f"kda=recurrent kernel-config=kda.tile={t},kda.blocks_per_sm={n}"
                     for k, (t, n) in S1_CAPS.items()})
S1_VARIANTS = [*S1_TILES, *S1_CAPS]
# The decode entry with the state stored in bf16 (kda-state-dtype=bf16:
# the model's state tensors typed bf16, docs/precision.md): half the bytes.
DECODE_TILES["decode_entry_bf16_state"] = RECURRENT
DECODE_ENTRY = {"decode_entry": "forward_decode", "decode_entry_bf16_state": "forward_decode",
                "prefill_entry": "forward",
                "prefill_entry_s1": "forward", **{k: "forward" for k in S1_VARIANTS}}
DECODE_FILE = {"decode_entry": "", "decode_entry_bf16_state": "_bf16_state",
               "prefill_entry": "_prefill_entry", "prefill_entry_s1": "_s1",
               **{k: "_" + k for k in S1_VARIANTS}}

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


def artifact_name(H, variant):
    return f"kda_h{H}_{variant}.k3bin"


def decode_artifact_name(H, variant):
    return f"kda_decode_h{H}{DECODE_FILE[variant]}.k3bin"


def compile_model(k3opt, src, out, options, max_tokens, max_seqs):
    subprocess.run([str(k3opt), str(src),
                    f"--k3-compile=target=cuda {options} output={out} "
                    f"max-tokens={max_tokens} max-seqs={max_seqs}", "-o", os.devnull], check=True)


def prepare(out=OUT, k3opt=BIN / "k3-opt", defaults_only=False):
    """Every artifact `run` uses, written to `out` by `k3opt`. A baseline
    (another commit's k3-opt, whose tuning options may be spelled
    differently) gets the default variants only: those it can compile with
    the same options."""
    out.mkdir(parents=True, exist_ok=True)
    tuned = lambda opts: defaults_only and "kernel-config" in opts  # noqa: E731
    for H in sorted({h for _, _, h, _ in PREFILL}):
        src = out / f"kda_h{H}.mlir"
        src.write_text(MODEL.format(H=H, HD=H * D))
        for variant in VARIANTS:
            if tuned(TILES[variant]):
                continue
            compile_model(k3opt, src, out / artifact_name(H, variant), TILES[variant], MAX_TOKENS, MAX_SEQS)
    for H in sorted({h for _, h in DECODE}):
        src = out / f"kda_decode_h{H}.mlir"
        src.write_text(DECODE_MODEL.format(H=H))
        src_bf16 = out / f"kda_decode_h{H}_bf16_state.mlir"
        src_bf16.write_text(DECODE_MODEL.format(H=H).replace("128x128xf32", "128x128xbf16"))
        for variant, tile in DECODE_TILES.items():
            if tuned(tile) or (defaults_only and variant.endswith("bf16_state")):
                continue
            compile_model(k3opt, src_bf16 if variant.endswith("bf16_state") else src,
                          out / decode_artifact_name(H, variant), tile, DECODE_MAX_SEQS,
                          DECODE_MAX_SEQS)
    print(f"prepared {out}")


# --------------------------------------------------------------------------
# GPU side
# --------------------------------------------------------------------------

def prefill_inputs(torch, lens, H, regime, dev):
    import torch.nn.functional as F
    torch.manual_seed(0)
    T, N = sum(lens), len(lens)
    x = {"q": F.normalize(torch.randn(1, T, H, D, device=dev), dim=-1).bfloat16(),
         "k": F.normalize(torch.randn(1, T, H, D, device=dev), dim=-1).bfloat16(),
         "v": torch.randn(1, T, H, D, device=dev, dtype=torch.bfloat16),
         "g": (torch.randn(1, T, H, D, device=dev) + (30.0 if regime == "bound" else 0.0)).bfloat16(),
         "beta": torch.randn(1, T, H, device=dev, dtype=torch.bfloat16),
         "A_log": torch.rand(H, device=dev),
         "dt_bias": torch.rand(H, D, device=dev),
         "initial_state": torch.randn(N, H, D, D, device=dev)}
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    x["cu_seqlens"] = torch.tensor(cu, dtype=torch.int32, device=dev)
    return x


def prefill_oracle(torch, x, lens):
    import kda_oracle
    d = {k: v.double() for k, v in x.items() if k != "cu_seqlens"}
    g = kda_oracle.gate_lower_bounded(d["g"], d["A_log"], d["dt_bias"], LOWER_BOUND)
    with torch.no_grad():
        return kda_oracle.kda_f64(d["q"], d["k"], d["v"], g, kda_oracle.sigmoid(d["beta"]), SCALE,
                                  d["initial_state"], lens, use_qk_l2norm=True)


def errors(o, s, ref):
    eo, es = protocol.rel_err(o, ref[0]), protocol.rel_err(s, ref[1])
    return {"err_vs_oracle": {"o": eo, "final_state": es},
            "check": "ok" if max(eo, es) <= ERR_BOUND else f"FAIL (bound {ERR_BOUND:g})"}


def checked(fields):
    if fields["check"] != "ok":
        e = fields["err_vs_oracle"]
        raise AssertionError(f"numerics: o {e['o']:.2e}, final_state {e['final_state']:.2e} "
                             f"vs f64 (bound {ERR_BOUND:g})")


class Ours:
    """One artifact on cuda:0 through the Python bindings."""

    def __init__(self, path, entry="forward"):
        import k3
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: artifact missing (run bench/kda_forward.py prepare)")
        self.session = k3.Session(str(path), device="cuda:0")
        self.entry = entry

    def outputs(self, torch, ins):
        out = self.session.run(self.entry, outputs="dlpack", **ins)
        return (torch.from_dlpack(out["o"]).clone(), torch.from_dlpack(out["final_state"]).clone())

    def times(self, ins):
        return protocol.k3_times(self.session, self.entry, **ins)

    def close(self):
        self.session.close()


def time_pair(new, base, ins, rounds=3):
    """Ours and the baseline interleaved in `rounds` rounds (drift hits
    both alike); every round is warm-up + reps of each."""
    tn, tb = [], []
    for _ in range(rounds):
        tn += new.times(ins)
        tb += base.times(ins)
    return tn, tb


def baseline_path(base_dir, name, options):
    """The baseline's artifact of the same name, or None: none is carried,
    or the variant is tuned through kernel-config overrides, which a k3-opt
    from before the kernel layer does not have (prepare-baseline skips
    those variants; timing them beside nothing is not a comparison)."""
    if base_dir is None or "kernel-config" in options:
        return None
    return base_dir / name


def run_ours(res, torch, path, base_path, ins, ref, ident, extra=None):
    """Check then time one of our artifacts and, with a baseline, the
    baseline's artifact of the same name on the same tensors (interleaved);
    each failure is a FAILED row of its own."""
    entry = ident.get("entry", "forward")
    sessions, fields = {}, {}
    for key, p in (("k3", path), ("k3-baseline", base_path)):
        if p is None:
            continue
        try:
            o = Ours(p, entry)
            sessions[key] = o
            f = errors(*o.outputs(torch, ins), ref)
            checked(f)
            fields[key] = f
        except Exception as e:  # noqa: BLE001
            res.failed(f"{type(e).__name__}: {e}", impl=key, artifact=str(p), **ident)
    try:
        if "k3" in fields and "k3-baseline" in fields:
            tn, tb = time_pair(sessions["k3"], sessions["k3-baseline"], ins)
            fields["k3"].update(protocol.summary(tn))
            fields["k3-baseline"].update(protocol.summary(tb))
            fields["k3"]["ratio_vs_baseline"] = (fields["k3"]["median_ms"] /
                                                 fields["k3-baseline"]["median_ms"])
        else:
            for key in fields:
                fields[key].update(protocol.summary(sessions[key].times(ins)))
        for key, f in fields.items():
            if extra:
                f.update(extra(f))
            res.add(impl=key, artifact=str(path if key == "k3" else base_path), **ident, **f)
    except Exception as e:  # noqa: BLE001
        for key in fields:
            res.failed(f"timing: {type(e).__name__}: {e}", impl=key,
                       artifact=str(path if key == "k3" else base_path), **ident)
    for o in sessions.values():
        o.close()


def run():
    import torch
    anchors = os.environ.get("ANCHORS_DIR", str(ROOT / ".anchors"))
    sys.path.insert(0, anchors)
    sys.path.insert(0, os.path.join(anchors, "flashkda"))
    if os.environ.get("FLASHKDA_DIR"):  # built outside .anchors (bench/gpu_session.sh)
        sys.path.insert(0, os.environ["FLASHKDA_DIR"])
    sys.path.insert(0, str(ROOT / "python"))
    # One launch at a time, as the anchors run (a prefill rarely repeats its
    # shape, so no launch graphs); read when each session is created.
    os.environ.setdefault("K3_LAUNCH_GRAPHS", "0")
    os.environ["FLA_FLASH_KDA"] = "0"  # fla's own Triton path, not FlashKDA through fla
    res = protocol.Results("kda_forward", tag=os.environ.get("K3_RESULTS_TAG", ""))
    chunk_kda = fused_recurrent_kda = flash_kda = None
    if os.environ.get("K3_BENCH_ANCHORS", "1") != "0":  # 0: ours only (e.g. under ncu)
        # K3_BENCH_FLA=0: FlashKDA alone (fla autotunes each new shape for a
        # minute or more; a short device session skips it, and says so).
        if os.environ.get("K3_BENCH_FLA", "1") != "0":
            try:
                from fla.ops.kda import chunk_kda, fused_recurrent_kda
            except Exception as e:  # noqa: BLE001
                res.failed(f"fla unavailable: {e}", case="setup", impl="fla")
        else:
            res.add(status="skipped", case="setup", impl="fla",
                    error="not run in this file (K3_BENCH_FLA=0)")

        try:  # prefill only: FlashKDA has no decode kernel
            if os.environ.get("K3_BENCH_DECODE_ONLY") != "1":
                import flash_kda
        except Exception as e:  # noqa: BLE001
            res.failed(f"FlashKDA unavailable: {e}", case="setup", impl="flashkda")
    baseline = os.environ.get("K3_BENCH_BASELINE")
    base_dir = Path(baseline) if baseline else None
    dev = "cuda"
    if os.environ.get("K3_BENCH_DECODE_ONLY") != "1":
        for label, lens, H, regime in PREFILL:
            prefill_case(res, torch, chunk_kda, flash_kda, base_dir, dev, label, lens, H, regime)
    if os.environ.get("K3_BENCH_SKIP_DECODE") != "1":
        for B, H in DECODE:
            decode_case(res, torch, fused_recurrent_kda, base_dir, dev, B, H)
    res.write()
    print("ALL OK" if not res.failures else f"{len(res.failures)} FAILED rows")
    return 1 if res.failures else 0


def prefill_case(res, torch, chunk_kda, flash_kda, base_dir, dev, label, lens, H, regime):
    T, N = sum(lens), len(lens)
    ident = {"case": label, "shape": {"T": T, "N": N, "H": H, "K": D, "V": D, "lens": lens if N <= 8 else
                                      f"{N} x {lens[0]}" if len(set(lens)) == 1 else lens},
             "gate_regime": regime}
    try:
        x = prefill_inputs(torch, lens, H, regime, dev)
        ref = prefill_oracle(torch, x, lens)
    except Exception as e:  # noqa: BLE001
        res.failed(f"inputs/oracle: {type(e).__name__}: {e}", impl="oracle", **ident)
        torch.cuda.empty_cache()
        return
    C = 64
    flops = H * (6 * T * D * D + 3 * T * C * D + T * C * C)
    floor_ms = (T * H * 1282 + 2 * N * H * D * D * 4) / 4.25e9
    perf = lambda f: {"TFLOPs": flops / f["median_ms"] / 1e9,  # noqa: E731
                      "memory_floor_fraction": floor_ms / f["median_ms"]}
    ident["GFLOP"], ident["memory_floor_ms"] = flops / 1e9, floor_ms
    cu64 = x["cu_seqlens"].long()
    q, k, v, g, beta, h0 = (x[n] for n in ("q", "k", "v", "g", "beta", "initial_state"))
    if flash_kda is not None:
        # FlashKDA's state is [N, H, V, K] (its README): ours and fla's are
        # [N, H, K, V], so the transposed copy goes in and its final state is
        # transposed back for the check. cu_seqlens: int64.
        h0_vk = h0.transpose(-1, -2).contiguous()

        def fk_row():
            o = torch.empty_like(v)
            s = torch.empty_like(h0_vk)
            kw = dict(A_log=x["A_log"], dt_bias=x["dt_bias"], lower_bound=LOWER_BOUND,
                      initial_state=h0_vk, final_state=s)
            if N > 1:
                kw["cu_seqlens"] = cu64

            def call():
                flash_kda.fwd(q, k, v, g, beta, SCALE, o, **kw)
            call()
            torch.cuda.synchronize()
            f = errors(o, s.transpose(-1, -2), ref)
            checked(f)
            f.update(protocol.summary(protocol.cuda_event_times(call)))
            return dict(f, **perf(f))
        res.guard(fk_row, impl="flashkda", variant="fwd (state [N,H,V,K])", **ident)
    ins = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": h0, "A_log": x["A_log"],
           "dt_bias": x["dt_bias"].reshape(-1).contiguous(), "cu_seqlens": x["cu_seqlens"]}
    for variant in VARIANTS:
        name = artifact_name(H, variant)
        run_ours(res, torch, OUT / name, baseline_path(base_dir, name, TILES[variant]), ins, ref,
                 dict(ident, variant=variant), extra=perf)
    # fla last: its Triton autotuning of a new (varlen) shape can take
    # minutes; a time limit then costs its row alone (K3_RESULTS_AUTOSAVE).
    if chunk_kda is not None:
        def fla():
            return chunk_kda(q=q, k=k, v=v, g=g, beta=beta, scale=SCALE, initial_state=h0,
                             output_final_state=True, use_gate_in_kernel=True,
                             use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                             safe_gate=True, A_log=x["A_log"], dt_bias=x["dt_bias"],
                             lower_bound=LOWER_BOUND, cu_seqlens=cu64 if N > 1 else None)

        def fla_row():
            with torch.inference_mode():
                o, s = fla()
                f = errors(o, s, ref)
                checked(f)
                f.update(protocol.summary(protocol.cuda_event_times(fla)))
            return dict(f, **perf(f))
        res.guard(fla_row, impl="fla", variant="chunk_kda", **ident)
    del x, ref, ins
    torch.cuda.empty_cache()


def decode_case(res, torch, fused_recurrent_kda, base_dir, dev, B, H):
    """One token per sequence: our kernel (cu_seqlens = arange) beside fla
    fused_recurrent_kda on the anchors' decode inputs."""
    import torch.nn.functional as F
    import kda_oracle
    ident = {"case": f"decode B{B} H{H}", "shape": {"B": B, "H": H, "K": D, "V": D}}
    try:
        torch.manual_seed(1)
        q = F.normalize(torch.randn(B, 1, H, D, device=dev), dim=-1).bfloat16()
        k = F.normalize(torch.randn(B, 1, H, D, device=dev), dim=-1).bfloat16()
        v = torch.randn(B, 1, H, D, device=dev, dtype=torch.bfloat16)
        g = -torch.rand(B, 1, H, D, device=dev)
        beta = torch.rand(B, 1, H, device=dev)
        h0 = torch.randn(B, H, D, D, device=dev)
        flat = lambda t: t.reshape(1, B, *t.shape[2:])  # noqa: E731
        with torch.no_grad():
            o_ref, s_ref = kda_oracle.kda_f64(*(flat(t).double() for t in (q, k, v, g, beta)), SCALE,
                                              h0.double(), [1] * B, use_qk_l2norm=False)
        ref = (o_ref, s_ref)
    except Exception as e:  # noqa: BLE001
        res.failed(f"inputs/oracle: {type(e).__name__}: {e}", impl="oracle", **ident)
        return
    state_bytes = 2 * h0.numel() * 4
    bw = lambda f: {"state_TBps": state_bytes / f["median_ms"] / 1e9}  # noqa: E731
    if fused_recurrent_kda is not None:
        def fla():
            return fused_recurrent_kda(q=q, k=k, v=v, g=g, beta=beta, scale=SCALE, initial_state=h0,
                                       output_final_state=True)

        def fla_row():
            with torch.inference_mode():
                o, s = fla()
                f = errors(flat(o), s, ref)
                checked(f)
                f.update(protocol.summary(protocol.cuda_event_times(fla)))
            return dict(f, **bw(f))
        res.guard(fla_row, impl="fla", variant="fused_recurrent_kda", **ident)
    ins = {"q": flat(q).contiguous(), "k": flat(k).contiguous(), "v": flat(v).contiguous(),
           "g": flat(g).contiguous(), "beta": flat(beta).contiguous(), "initial_state": h0,
           "cu_seqlens": torch.arange(B + 1, dtype=torch.int32, device=dev)}
    for variant in DECODE_TILES:
        name = decode_artifact_name(H, variant)
        v_ins, v_ref, v_bw = ins, ref, bw
        if variant.endswith("bf16_state"):
            # Its initial state is bf16 (the oracle gets the same rounded
            # values); it moves half the bytes.
            h0b = h0.bfloat16()
            v_ins = dict(ins, initial_state=h0b)
            try:
                with torch.no_grad():
                    v_ref = kda_oracle.kda_f64(*(flat(t).double() for t in (q, k, v, g, beta)), SCALE,
                                               h0b.double(), [1] * B, use_qk_l2norm=False)
            except Exception as e:  # noqa: BLE001
                res.failed(f"inputs/oracle: {type(e).__name__}: {e}", impl="oracle", **ident)
                continue
            v_bw = lambda f: {"state_TBps": state_bytes / 2 / f["median_ms"] / 1e9}  # noqa: E731
        run_ours(res, torch, OUT / name, None if variant.endswith("bf16_state") else
                 baseline_path(base_dir, name, DECODE_TILES[variant]),
                 v_ins, v_ref, dict(ident, variant=variant, entry=DECODE_ENTRY[variant]), extra=v_bw)
    torch.cuda.empty_cache()


if __name__ == "__main__":
    cmd = sys.argv[1:] or ["run"]
    if cmd == ["prepare"]:
        sys.exit(prepare())
    if cmd == ["prepare-baseline"]:
        k3opt = os.environ.get("K3_BASELINE_K3OPT")
        if not k3opt:
            sys.exit("prepare-baseline: set K3_BASELINE_K3OPT to the baseline commit's k3-opt")
        sys.exit(prepare(Path(os.environ.get("K3_BENCH_BASELINE", ROOT / "out" / "bench-baseline")),
                         Path(k3opt), defaults_only=True))
    sys.exit(run())
