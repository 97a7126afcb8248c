"""Gated MLA on the GPU (issue 16): the expanded prefill attention
(``k3.mla_prefill_attention``, dialects/K3/K3MLAOps.td) beside torch SDPA,
and the absorbed decode (``k3.latent_attention`` over the latent cache, a
decode entry) beside a PyTorch absorbed reference, on the same device
tensors, each case checked against a float64 reference first
(bench/protocol.py).

    .venv/bin/python bench/mla.py prepare     # here: the artifacts in out/mla/
    python3 bench/mla.py run                  # on the GPU machine

Prefill. Configs (heads H, nope Dn, rope Dr, value Dv, kv_lora_rank R):
Kimi-Linear-48B (32, 128, 64, 128, 512), K3 (96, 128, 64, 128, 512) and
one that is not NoPE-shaped, to show that the path generalises (16, 64,
64, 64, 256). Cases: B1 T in {2048, 8192, 16384, 32768}, 8 x 1024 packed
(cu_seqlens), and two awkward ones for the numerics: T1000 (one sequence,
not a multiple of 64) and varlen [1, 63, 64, 65, 300, 507]. Our artifact
has one entry, ``forward``, whose inputs are, by name and in this order:
``q [T, H, Dn+Dr]``, ``kv [T, H, Dn+Dv]`` ([k_nope | v] per head),
``latent [T, R+Dr]`` (k_pe = its last Dr columns, shared by the heads),
``gate [T, H*Dv]`` (the output is multiplied by sigmoid(gate)), all bf16
with a dynamic token count, and ``cu_seqlens [N+1]`` i32; output ``o
[T, H, Dv]`` bf16; scale (Dn+Dr)^-1/2. The rows:
* ``k3`` / ``mla_prefill_attention <variant> (kernel <kind>)``: the whole
  entry (the runtime's CUDA events); ``<kind>`` is the kernel config
  k3-compile chose (its ``report=1``, saved at prepare time in
  out/mla/manifest.json): ``mla_flash_wgmma`` where it applies, else the
  generic ``loop_nest`` (whose rows run only up to K3_MLA_LOOP_NEST_MAX_T).
* ``torch`` / ``sdpa <backend>``: ``torch.nn.functional.
  scaled_dot_product_attention(is_causal=True)`` under
  ``sdpa_kernel([backend])`` on the expanded tensors k = [kv[..., :Dn] |
  k_pe broadcast over the heads], v = kv[..., Dn:] (built once, untimed),
  [B, H, T, D] views of the [T, H, D] tensors, then ``o * sigmoid(gate)``
  (timed). Backends: FLASH_ATTENTION (with q/k head dim Dn+Dr and v head
  dim Dv where it takes them, else with v zero-padded to Dn+Dr and the
  output sliced: the variant says which), EFFICIENT_ATTENTION and
  CUDNN_ATTENTION; each is first tried on a small problem of the config's
  dims, and one that refuses gets a ``skipped`` row with torch's reason
  (so does one that refuses a case's shapes: "No available kernel").
  Packed cases: a Python loop over the sequences (``loop``), and the
  nested-jagged form (``torch.nested``, one SDPA call) where torch takes it
  (else a ``skipped`` row). Single sequences also record SDPA alone,
  without the gate (``sdpa_alone_median_ms``, ``sdpa_alone_TFLOPs``).
TFLOP/s on causal flops: sum over sequences of L (L+1)/2 * H * 2 (Dn + Dr
+ Dv).

Decode (Kimi-Linear dims): batch B in {1, 8, 64} x context C in {4096,
32768, 131072}. The artifact has the model's form: ``forward`` fills the
``latent_cache`` state from an input ``cache [B, C, R+Dr]`` (bf16, the
model's state type under the bf16 policy, and f32, the f32 policy's;
docs/precision.md; K3_MLA_DECODE_CACHES), and ``forward_decode`` (attribute
``k3.decode``: the decode kernel configs) reads the state, runs
``k3.latent_attention`` for one token per sequence over C - 1 cached
latents plus its own, and writes the state back, as k3-import's model does;
its inputs ``q [B, H, Dn+Dr]`` bf16, ``latent [B, R+Dr]`` bf16,
``cache_lens [B]`` (C - 1), ``cu_seqlens [B+1]``, weight ``kv_b [H (Dn+Dv),
R]`` bf16. The rows:
* ``k3`` / ``forward_decode``: the whole entry, and from the runtime's
  per-kernel profile each kernel's mean (the attention kernel, and the
  copy launches that write the updated cache back into the state);
* ``torch`` / ``absorbed``: q_nope W_k, scores against the cache's latent
  and k_pe columns, f32 softmax, against the latents, W_v (DeepSeek's
  absorbed einsums), on a torch copy of the same cache (f32; values
  rounded to bf16 so that the bf16 variant reads the same numbers), and
  the same on a bf16 copy of the cache.
TB/s on the bytes of the cache (in the row's cache dtype) + kv_b (bf16)
read once. A combination whose device memory (our session's three cache-
sized buffers, torch's copies) would pass 100 GB is a ``skipped`` row that
says so.

Checks, before timing: ours and the anchors against float64 (torch on the
device, double precision): prefill on sampled query rows (all when T <=
256, else 256 spread over T including the first and the last, plus the
first and last token of each sequence), all heads, with the gate;
decode on up to 8 sequences (first, last, spread), all heads. Bound
2^-7 normwise on ours (bf16 inputs and output: the output's own rounding
is 2^-9, the softmax probabilities and the accumulations add a few
more); a row of ours past it is FAILED and not timed. The anchors' errors
are recorded (``err_vs_oracle``, ``within_bound``), not enforced. The two
f64 references are themselves checked against k3ref's
``ops.mla_prefill_attention`` and ``ops.latent_attention`` (numpy) on
small problems first (rows ``reference``).

Timing: the protocol's (warm-up, >= 20 runs, median, min, max). A row
whose first (checking) run took over 50 ms is warmed up once only; one
whose 21 runs would pass K3_MLA_ROW_BUDGET_S (60 s) records fewer runs
and says so in ``reps_note``.

Environment:
  K3_MLA_CONFIGS   prefill configs (kimi-linear,k3,h16-d64)
  K3_MLA_CASES     prefill cases (T2048,T8192,T16384,T32768,8x1024,T1000,varlen)
  K3_MLA_PARTS     prefill,decode (both)
  K3_MLA_DECODE_BATCH / K3_MLA_DECODE_CONTEXT  (1,8,64 / 4096,32768,131072)
  K3_MLA_ANCHORS   flash,efficient,cudnn,nested (prefill), absorbed,absorbed-bf16
                   (decode); all by default, "none": ours only
  K3_MLA_VARIANTS  our prefill artifacts, ';'-separated NAME or
                   NAME:k3-compile options (default "default"), e.g.
                   "default;loop:kernel-config=mla_prefill_attention.kernel=loop_nest";
                   options that start with k3opt=PATH compile that variant
                   with another k3-opt (a baseline commit's), e.g.
                   "default;base:k3opt=/tmp/old/k3-opt"
  K3_MLA_DECODE_VARIANTS  our decode artifacts, the same form (default
                   "default"), e.g. "default;s3:kernel-config=latent_attention_split.stages=3"
  K3_MLA_DECODE_CACHES  the latent cache's dtype in our decode artifacts
                   (bf16,f32: bf16 is what k3-import's model keeps under the
                   bf16 policy, docs/precision.md)
  K3_MLA_ROW_BUDGET_S  (60)
  K3_MLA_LOOP_NEST_MAX_T  our rows on the generic loop nest (an artifact whose
                   kernel config is loop_nest) only for sequences up to this
                   long (2048; longer ones are skipped rows: minutes a run)
  K3_RESULTS_TAG   part of the result file's name
Prepare and run must see the same K3_MLA_* values (the artifacts' sizes
follow them). Results: bench/results/mla[-TAG]-<gpu>-<date>.json; the exit
status is 1 if a row is FAILED (``skipped`` rows are not failures).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
import protocol  # noqa: E402

OUT = ROOT / "out" / "mla"
K3OPT = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin")) / "k3-opt"


def _env_list(name: str, default: str) -> list[str]:
    return [x.strip() for x in os.environ.get(name, default).split(",") if x.strip()]


# name: heads H, nope Dn, rope Dr, value Dv, kv_lora_rank R
ALL_CONFIGS = {"kimi-linear": dict(H=32, Dn=128, Dr=64, Dv=128, R=512),
               "k3": dict(H=96, Dn=128, Dr=64, Dv=128, R=512),
               "h16-d64": dict(H=16, Dn=64, Dr=64, Dv=64, R=256)}
CONFIGS = {k: v for k, v in ALL_CONFIGS.items()
           if k in _env_list("K3_MLA_CONFIGS", ",".join(ALL_CONFIGS))}
# key: (row label, sequence lengths)
ALL_CASES = {"T2048": ("B1 T2048", [2048]), "T8192": ("B1 T8192", [8192]),
             "T16384": ("B1 T16384", [16384]), "T32768": ("B1 T32768", [32768]), "8x1024": ("8x1024 packed", [1024] * 8),
             "T1000": ("T1000 (not a multiple of 64)", [1000]),
             "varlen": ("varlen [1,63,64,65,300,507]", [1, 63, 64, 65, 300, 507])}
CASES = {k: v for k, v in ALL_CASES.items()
         if k in _env_list("K3_MLA_CASES", ",".join(ALL_CASES))}
PARTS = _env_list("K3_MLA_PARTS", "prefill,decode")
DECODE_CONFIG = "kimi-linear"
DECODE_BATCH = [int(b) for b in _env_list("K3_MLA_DECODE_BATCH", "1,8,64")]
DECODE_CONTEXT = [int(c) for c in _env_list("K3_MLA_DECODE_CONTEXT", "4096,32768,131072")]
ANCHORS = [a for a in _env_list("K3_MLA_ANCHORS", "flash,efficient,cudnn,nested,absorbed,absorbed-bf16")
           if a != "none"]
def parse_variants(spec: str) -> dict[str, str]:
    """NAME or NAME:k3-compile options, ';'-separated."""
    variants = {}
    for v in spec.split(";"):
        if v.strip():
            name, _, opts = v.strip().partition(":")
            variants[name] = opts
    return variants


VARIANTS = parse_variants(os.environ.get("K3_MLA_VARIANTS", "default"))
DECODE_VARIANTS = parse_variants(os.environ.get("K3_MLA_DECODE_VARIANTS", "default"))
DECODE_CACHES = _env_list("K3_MLA_DECODE_CACHES", "bf16,f32")
ROW_BUDGET_S = float(os.environ.get("K3_MLA_ROW_BUDGET_S", "60"))
# Our rows on the generic loop nest (before the dedicated kernel is chosen)
# only up to sequences this long: the loop nest took 0.5 s for one run of
# Kimi's B1 T2048 and grows with T^2 H (K3's T32768: minutes).
LOOP_NEST_MAX_T = int(os.environ.get("K3_MLA_LOOP_NEST_MAX_T", "2048"))
SLOW_RUN_S = 0.05
DEVICE_BUDGET = 100e9  # bytes a decode row may hold on the device
CHECKED_TOKENS = 256
CHECKED_SEQS = 8
BOUND = 2.0 ** -7

PREFILL_MODEL = """func.func @forward(
    %q: tensor<?x{H}x{DQ}xbf16> {{k3.name = "q", k3.dims = array<i64: -1, {H}, {DQ}>}},
    %kv: tensor<?x{H}x{DKV}xbf16> {{k3.name = "kv", k3.dims = array<i64: -1, {H}, {DKV}>}},
    %latent: tensor<?x{W}xbf16> {{k3.name = "latent", k3.dims = array<i64: -1, {W}>}},
    %gate: tensor<?x{HV}xbf16> {{k3.name = "gate", k3.dims = array<i64: -1, {HV}>}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<?x{H}x{Dv}xbf16> {{k3.name = "o"}}) {{
  %o = k3.mla_prefill_attention %q, %kv, %latent gate(%gate) cu_seqlens(%cu)
      {{qk_nope_head_dim = {Dn} : i64, qk_rope_head_dim = {Dr} : i64, v_head_dim = {Dv} : i64,
        scale = {S!r} : f64}}
      : (tensor<?x{H}x{DQ}xbf16>, tensor<?x{H}x{DKV}xbf16>, tensor<?x{W}xbf16>,
         tensor<?x{HV}xbf16>, tensor<?xi32>) -> tensor<?x{H}x{Dv}xbf16>
  return %o : tensor<?x{H}x{Dv}xbf16>
}}
"""
# The decode form of k3-import's MLA layer: the latent cache is decode
# state, read and written back around k3.latent_attention; `forward` only
# fills the state from an input, so that both sides read the same cache.
DECODE_MODEL = """func.func @forward(
    %c: tensor<?x{C}x{W}x{CT}> {{k3.name = "cache", k3.dims = array<i64: -2, {C}, {W}>}}) {{
  k3.state.write "latent_cache", %c : tensor<?x{C}x{W}x{CT}>
  return
}}
func.func @forward_decode(
    %q: tensor<?x{H}x{DQ}xbf16> {{k3.name = "q", k3.dims = array<i64: -2, {H}, {DQ}>}},
    %latent: tensor<?x{W}xbf16> {{k3.name = "latent", k3.dims = array<i64: -2, {W}>}},
    %lens: tensor<?xi32> {{k3.name = "cache_lens", k3.dims = array<i64: -2>}},
    %cu: tensor<?xi32> {{k3.name = "cu_seqlens"}})
    -> (tensor<?x{H}x{Dv}xbf16> {{k3.name = "o"}}) attributes {{k3.decode}} {{
  %kvb = k3.weight "kv_b" : tensor<{KVB}x{R}xbf16>
  %cache = k3.state.read "latent_cache" : tensor<?x{C}x{W}x{CT}>
  %o, %c1 = k3.latent_attention %q, %latent, %kvb cache(%cache, %lens) cu_seqlens(%cu)
      {{num_heads = {H} : i64, qk_nope_head_dim = {Dn} : i64, qk_rope_head_dim = {Dr} : i64,
        v_head_dim = {Dv} : i64, kv_lora_rank = {R} : i64, scale = {S!r} : f64}}
      : (tensor<?x{H}x{DQ}xbf16>, tensor<?x{W}xbf16>, tensor<{KVB}x{R}xbf16>,
         tensor<?x{C}x{W}x{CT}>, tensor<?xi32>, tensor<?xi32>)
      -> (tensor<?x{H}x{Dv}xbf16>, tensor<?x{C}x{W}x{CT}>)
  k3.state.write "latent_cache", %c1 : tensor<?x{C}x{W}x{CT}>
  return %o : tensor<?x{H}x{Dv}xbf16>
}}
"""
# compute-sanitizer's case (bench/gpu_session.sh, stage mla): Kimi's head
# dims, 2 heads, the awkward lengths (300 tokens), with the gate.
SMALL = dict(H=2, Dn=128, Dr=64, Dv=128, R=512)
SMALL_LENGTHS = [1, 63, 64, 65, 107]


def dims_of(d: dict) -> dict:
    """The template's fields for config ``d``."""
    return dict(d, DQ=d["Dn"] + d["Dr"], DKV=d["Dn"] + d["Dv"], W=d["R"] + d["Dr"],
                HV=d["H"] * d["Dv"], KVB=d["H"] * (d["Dn"] + d["Dv"]), S=scale_of(d))


def scale_of(d: dict) -> float:
    return float((d["Dn"] + d["Dr"]) ** -0.5)


def artifact(name: str, variant: str) -> Path:
    return OUT / f"{name}.{variant}.k3bin"


def decode_artifact(b: int, c: int, variant: str = "default", cache: str = "bf16") -> Path:
    suffix = ("" if cache == "bf16" else f".{cache}") + ("" if variant == "default" else f".{variant}")
    return OUT / f"decode-{DECODE_CONFIG}-B{b}-C{c}{suffix}.k3bin"


def split_k3opt(opts: str) -> tuple[Path, str]:
    """A variant's k3-opt (its options' leading k3opt=PATH, else ours) and
    the rest of its options."""
    if opts.startswith("k3opt="):
        path, _, rest = opts.partition(" ")
        return Path(path[len("k3opt="):]), rest
    return K3OPT, opts


def compile_model(src: Path, out: Path, opts: str) -> str:
    """k3-compile with report=1; returns the report (stderr)."""
    k3opt, opts = split_k3opt(opts)
    p = subprocess.run([str(k3opt), str(src), f"--k3-compile=target=cuda output={out} "
                        f"activation-dtype=bf16 decode-entry=0 report=1 {opts}", "-o", os.devnull],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise subprocess.CalledProcessError(p.returncode, p.args)
    return p.stderr


def kernel_kinds(report: str, op: str) -> list[str]:
    """The kernel kinds that report=1 gave ``op`` (its remark's config)."""
    kinds = []
    lines = report.splitlines()
    for i, line in enumerate(lines):
        m = re.search(r"kernel config #k3\.kernel_config<kernel = (\w+)([^>]*)>", line)
        if m and i + 1 < len(lines) and f"k3.{op}" in lines[i + 1]:
            kinds.append(m.group(1) + m.group(2))
    return kinds


def prepare() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = {}
    if "prefill" in PARTS and CASES:
        max_tokens = max(sum(lens) for _, lens in CASES.values())
        max_seqs = max(len(lens) for _, lens in CASES.values())
        for name, d in CONFIGS.items():
            src = OUT / f"{name}.mlir"
            src.write_text(PREFILL_MODEL.format(**dims_of(d)))
            for variant, extra in VARIANTS.items():
                out = artifact(name, variant)
                k3opt, opts = split_k3opt(extra)
                report = compile_model(src, out, f"k3opt={k3opt} max-tokens={max_tokens} "
                                                 f"max-seqs={max_seqs} {opts}")
                manifest[out.name] = {"kernel_config": kernel_kinds(report, "mla_prefill_attention"),
                                      "options": extra, "max_tokens": max_tokens,
                                      "max_seqs": max_seqs}
        prepare_sanitizer_case(manifest)
    if "decode" in PARTS:
        d = ALL_CONFIGS[DECODE_CONFIG]
        for c in DECODE_CONTEXT:
            for ct in DECODE_CACHES:
                src = OUT / f"decode-{DECODE_CONFIG}-C{c}-{ct}.mlir"
                src.write_text(DECODE_MODEL.format(C=c, CT=ct, **dims_of(d)))
                for b in DECODE_BATCH:
                    for variant, extra in DECODE_VARIANTS.items():
                        out = decode_artifact(b, c, variant, ct)
                        report = compile_model(src, out, f"max-tokens={b} max-seqs={b} {extra}")
                        manifest[out.name] = {
                            "kernel_config": kernel_kinds(report, "latent_attention"),
                            "options": extra}
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for k, v in manifest.items():
        print(f"{k}: {', '.join(v['kernel_config']) or '?'}")
    return 0


def prepare_sanitizer_case(manifest: dict) -> None:
    """A small prefill for compute-sanitizer through k3-run (inputs in
    out/mla/in_small.safetensors; num_seqs = 5)."""
    import ml_dtypes
    import numpy as np
    from k3ref.model import save_safetensors
    d = dims_of(SMALL)
    src = OUT / "small.mlir"
    src.write_text(PREFILL_MODEL.format(**d))
    t = sum(SMALL_LENGTHS)
    out = OUT / "small.k3bin"
    report = compile_model(src, out, f"max-tokens={t} max-seqs={len(SMALL_LENGTHS)}")
    manifest[out.name] = {"kernel_config": kernel_kinds(report, "mla_prefill_attention")}
    rng = np.random.default_rng(16)

    def bf16(shape):
        return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    save_safetensors(str(OUT / "in_small.safetensors"), {
        "q": bf16((t, d["H"], d["DQ"])), "kv": bf16((t, d["H"], d["DKV"])),
        "latent": bf16((t, d["W"])), "gate": bf16((t, d["HV"])),
        "cu_seqlens": np.concatenate([[0], np.cumsum(SMALL_LENGTHS)]).astype(np.int32)})


# ---------------------------------------------------------------------------
# float64 references (torch, double precision, on the device)
# ---------------------------------------------------------------------------

def bounds_of(lengths: list[int]) -> list[tuple[int, int]]:
    out, s = [], 0
    for n in lengths:
        out.append((s, s + n))
        s += n
    return out


def checked_rows(lengths: list[int]) -> list[int]:
    """All rows up to 256 tokens, else 256 spread over T (the first and the
    last included); plus the first and last token of every sequence."""
    t = sum(lengths)
    if t <= CHECKED_TOKENS:
        return list(range(t))
    step = (t - 1) / (CHECKED_TOKENS - 1)
    rows = {round(j * step) for j in range(CHECKED_TOKENS)}
    for bos, eos in bounds_of(lengths):
        if eos > bos:
            rows |= {bos, eos - 1}
    return sorted(rows)


def prefill_reference(q, kv, latent, gate, lengths, rows, d, chunk=16):
    """o[rows] in float64: per sequence, key s of head h is [kv[s, h, :Dn] |
    latent[s, W-Dr:]], value kv[s, h, Dn:]; causal softmax with scale
    (Dn+Dr)^-1/2; times sigmoid(gate). Returns [len(rows), H, Dv]."""
    import torch
    dn, dr, dv = d["Dn"], d["Dr"], d["Dv"]
    h, w = q.shape[1], latent.shape[1]
    scale = scale_of(d)
    out = torch.empty(len(rows), h, dv, dtype=torch.float64, device=q.device)
    at = 0
    for bos, eos in bounds_of(lengths):
        mine = [r for r in rows if bos <= r < eos]
        if not mine:
            continue
        kn = kv[bos:eos, :, :dn].double()              # [L, H, Dn]
        vv = kv[bos:eos, :, dn:].double()              # [L, H, Dv]
        kpe = latent[bos:eos, w - dr:].double()        # [L, Dr]
        pos = torch.arange(eos - bos, device=q.device)
        for i in range(0, len(mine), chunk):
            r = torch.tensor(mine[i:i + chunk], device=q.device)
            qq = q[r].double()                         # [r, H, Dn+Dr]
            s = torch.einsum("rhd,lhd->rhl", qq[..., :dn], kn)
            if dr:
                s = s + torch.einsum("rhe,le->rhl", qq[..., dn:], kpe)
            s = s * scale
            s = s.masked_fill(pos[None, None, :] > (r - bos)[:, None, None], float("-inf"))
            o = torch.einsum("rhl,lhv->rhv", torch.softmax(s, dim=-1), vv)
            if gate is not None:
                o = o * torch.sigmoid(gate[r].double().view(len(r), h, dv))
            out[at:at + len(r)] = o
            at += len(r)
        del kn, vv, kpe
    return out


def decode_reference(q, cache, kvb, seqs, d):
    """Absorbed MLA decode in float64 for sequences ``seqs``: each query
    attends to its sequence's whole cache (its own latent is the last row).
    Returns [len(seqs), H, Dv]."""
    import torch
    h, dn, dr, dv, r = d["H"], d["Dn"], d["Dr"], d["Dv"], d["R"]
    w = kvb.double().view(h, dn + dv, r)
    wk, wv = w[:, :dn], w[:, dn:]
    out = []
    for b in seqs:
        c = cache[b].double()                                   # [C, R+Dr]
        qb = q[b].double()                                      # [H, Dn+Dr]
        ql = torch.einsum("hd,hdr->hr", qb[:, :dn], wk)         # absorbed query
        s = (ql @ c[:, :r].T + qb[:, dn:] @ c[:, r:].T) * scale_of(d)   # [H, C]
        ctx = torch.softmax(s, dim=-1) @ c[:, :r]               # [H, R]
        out.append(torch.einsum("hr,hvr->hv", ctx, wv))
        del c
    return torch.stack(out)


def check_references(res) -> None:
    """The two f64 references above against k3ref (numpy, the oracle) on
    small problems: the expanded prefill with a gate over packed sequences,
    and the decode over a cache."""
    import numpy as np
    import torch
    from k3ref import ops
    dev = torch.device("cuda:0")
    rng = np.random.default_rng(16)
    d = dict(H=3, Dn=16, Dr=8, Dv=12, R=20)
    scale = scale_of(d)

    def prefill():
        lengths = [1, 5, 64, 30]
        t = sum(lengths)
        q = rng.standard_normal((t, d["H"], d["Dn"] + d["Dr"]))
        kv = rng.standard_normal((t, d["H"], d["Dn"] + d["Dv"]))
        lat = rng.standard_normal((t, d["R"] + d["Dr"]))
        gate = rng.standard_normal((t, d["H"] * d["Dv"]))
        cu = np.concatenate([[0], np.cumsum(lengths)])
        want = ops.mla_prefill_attention(q, kv, lat, d["Dn"], d["Dr"], d["Dv"], scale, gate=gate,
                                         cu_seqlens=cu)
        rows = checked_rows(lengths)
        got = prefill_reference(*(torch.tensor(x, device=dev) for x in (q, kv, lat, gate)),
                                lengths, rows, d, chunk=7)
        err = protocol.rel_err(got.cpu().numpy(), want[rows])
        if not err < 1e-12:
            raise AssertionError(f"prefill reference vs k3ref: {err:.3e} (bound 1e-12)")
        return {"err_vs_oracle": err}

    def decode():
        b, c = 3, 40
        q = rng.standard_normal((b, d["H"], d["Dn"] + d["Dr"]))
        cache = rng.standard_normal((b, c, d["R"] + d["Dr"]))
        kvb = rng.standard_normal((d["H"] * (d["Dn"] + d["Dv"]), d["R"])) / d["R"] ** 0.5
        want, _ = ops.latent_attention(q, cache[:, c - 1], kvb, d["H"], d["Dn"], d["Dr"], d["Dv"],
                                       d["R"], scale, latent_cache=cache,
                                       cache_lens=np.full(b, c - 1), cu_seqlens=np.arange(b + 1))
        got = decode_reference(*(torch.tensor(x, device=dev) for x in (q, cache, kvb)),
                               list(range(b)), d)
        err = protocol.rel_err(got.cpu().numpy(), want)
        if not err < 1e-12:
            raise AssertionError(f"decode reference vs k3ref: {err:.3e} (bound 1e-12)")
        return {"err_vs_oracle": err}
    res.guard(prefill, case="reference self-check", impl="reference",
              variant="prefill f64 (torch) vs k3ref.ops.mla_prefill_attention",
              shape={"lengths": [1, 5, 64, 30], **d})
    res.guard(decode, case="reference self-check", impl="reference",
              variant="decode f64 (torch) vs k3ref.ops.latent_attention",
              shape={"B": 3, "context": 40, **d})


# ---------------------------------------------------------------------------
# timing helpers
# ---------------------------------------------------------------------------

def plan_reps(first_s: float) -> tuple[int, int, str]:
    """(warm-up, timed runs, note) for a row whose first run took
    ``first_s`` seconds (that run, the check, warmed it up already)."""
    if first_s * (1 + protocol.REPS) > ROW_BUDGET_S:
        reps = max(1, int(ROW_BUDGET_S // max(first_s, 1e-9)))
        reps = min(reps, protocol.REPS)
        return 0, reps, (f"one run took {first_s:.2f} s: {reps} timed runs (fewer than "
                         f"{protocol.REPS}) to stay within {ROW_BUDGET_S:.0f} s")
    if first_s > SLOW_RUN_S:
        return 1, protocol.REPS, ""
    return protocol.WARMUP, protocol.REPS, ""


def timed_first(fn):
    """fn() once, synchronised; returns (its result, seconds)."""
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def anchor_times(fn, first_s):
    warmup, reps, note = plan_reps(first_s)
    row = protocol.summary(protocol.cuda_event_times(fn, warmup=warmup, reps=reps))
    if note:
        row["reps_note"] = note
    return row


def ours_times(s, entry, first_s, syms, inputs):
    warmup, reps, note = plan_reps(first_s)
    row = protocol.summary(protocol.k3_times(s, entry, warmup=warmup, reps=reps, symbols=syms,
                                             **inputs))
    if note:
        row["reps_note"] = note
    return row


# ---------------------------------------------------------------------------
# prefill
# ---------------------------------------------------------------------------

def causal_flops(lengths: list[int], d: dict) -> float:
    return sum(n * (n + 1) / 2 for n in lengths) * d["H"] * 2 * (d["Dn"] + d["Dr"] + d["Dv"])


def make_case(lengths, d, g, dev):
    import torch
    t, h = sum(lengths), d["H"]

    def bf16(*shape):
        return torch.randn(*shape, device=dev, generator=g).to(torch.bfloat16)
    c = {"lengths": lengths, "T": t, "N": len(lengths),
         "q": bf16(t, h, d["Dn"] + d["Dr"]), "kv": bf16(t, h, d["Dn"] + d["Dv"]),
         "latent": bf16(t, d["R"] + d["Dr"]), "gate": bf16(t, h * d["Dv"]),
         "cu": torch.tensor([0] + [sum(lengths[:i + 1]) for i in range(len(lengths))],
                            dtype=torch.int32, device=dev)}
    c["rows_list"] = checked_rows(lengths)
    c["rows"] = torch.tensor(c["rows_list"], device=dev)
    c["ref"] = prefill_reference(c["q"], c["kv"], c["latent"], c["gate"], lengths, c["rows_list"], d)
    return c


def ours_prefill(s, c, flop, kernel):
    """One checked, timed row of our artifact (session ``s``) on case ``c``."""
    import torch
    inputs = dict(q=c["q"], kv=c["kv"], latent=c["latent"], gate=c["gate"], cu_seqlens=c["cu"])
    syms = {"num_tokens": c["T"], "num_seqs": c["N"]}
    out, first = timed_first(lambda: s.run("forward", symbols=syms, outputs="dlpack", **inputs))
    y = torch.from_dlpack(out["o"])
    err = protocol.rel_err(y[c["rows"]], c["ref"])
    if not err < BOUND:
        raise AssertionError(f"error vs f64 {err:.3e} (bound {BOUND:.2e}; kernel {kernel}; "
                             f"first run {first:.3f} s)")
    row = {**ours_times(s, "forward", first, syms, inputs), "err_vs_oracle": err, "kernel": kernel}
    row["TFLOPs"] = flop / row["median_ms"] / 1e9
    return row


def sdpa_backends(d, dev):
    """Which SDPA backends take the config's head dims, on a small causal
    problem: [(label, backend, pad_v)] and [(label, reason)] refused."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import warnings
    dq, dv = d["Dn"] + d["Dr"], d["Dv"]
    # The benchmark's layout: [B, H, T, D] views of [T, H, D] tensors.
    q, k = (torch.randn(128, 2, dq, device=dev, dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(128, 2, dv, device=dev, dtype=torch.bfloat16)
    ok, refused = [], []
    for key, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                         ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                         ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        if key not in ANCHORS:
            continue
        why = ""
        for pad in ((False, True) if key == "flash" and dv < dq else (False,)):
            vv = torch.nn.functional.pad(v, (0, dq - dv)) if pad else v
            try:
                with warnings.catch_warnings(record=True) as said, sdpa_kernel([backend]):
                    warnings.simplefilter("always")
                    F.scaled_dot_product_attention(bhtd(q), bhtd(k), bhtd(vv), is_causal=True)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                told = "; ".join(str(w.message)[:200] for w in said)
                why += (f"{'with v padded: ' if pad else ''}{type(e).__name__}: {str(e)[:200]}"
                        f"{' (' + told + ')' if told else ''}. ")
                continue
            label = f"sdpa {key}" + (f" (v padded {dv}->{dq}, output sliced)" if pad else "")
            ok.append((label, backend, pad))
            break
        else:
            refused.append((f"sdpa {key}", why.strip() or "refused"))
    return ok, refused


def expanded(c, d):
    """The anchors' tensors, built once per case: k = [k_nope | k_pe
    broadcast], v and v zero-padded to Dn+Dr, all [T, H, D]."""
    import torch
    t, h, dn, dr = c["T"], d["H"], d["Dn"], d["Dr"]
    w = c["latent"].shape[1]
    k = torch.cat([c["kv"][..., :dn], c["latent"][:, None, w - dr:].expand(t, h, dr)], dim=-1)
    v = c["kv"][..., dn:].contiguous()
    vpad = torch.nn.functional.pad(v, (0, dn + dr - d["Dv"])) if dr else v
    return k.contiguous(), v, vpad


def bhtd(x):
    """[T, H, D] -> a [1, H, T, D] view."""
    return x.unsqueeze(0).transpose(1, 2)


def sdpa_fn(c, d, k, v, backend, packed: str):
    """The timed anchor: SDPA (+ the gate) into a [T, H, Dv] bf16 output."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    dv, h, t = d["Dv"], d["H"], c["T"]
    q, scale = c["q"], scale_of(d)
    sig_gate = c["gate"].view(t, h, dv)
    out = torch.empty(t, h, dv, dtype=torch.bfloat16, device=q.device)
    if packed == "nested":
        off = c["cu"].long()
        qn, kn, vn = (torch.nested.nested_tensor_from_jagged(x, off).transpose(1, 2)
                      for x in (q, k, v))

        def fn():
            with sdpa_kernel([backend]):
                o = F.scaled_dot_product_attention(qn, kn, vn, is_causal=True, scale=scale)
            o = o.transpose(1, 2).values()[..., :dv]
            return torch.mul(o, torch.sigmoid(sig_gate), out=out)
        return fn
    spans = bounds_of(c["lengths"]) if packed == "loop" else [(0, t)]

    def fn():
        with sdpa_kernel([backend]):
            for bos, eos in spans:
                o = F.scaled_dot_product_attention(bhtd(q[bos:eos]), bhtd(k[bos:eos]),
                                                   bhtd(v[bos:eos]), is_causal=True, scale=scale)
                torch.mul(o[0].transpose(0, 1)[..., :dv], torch.sigmoid(sig_gate[bos:eos]),
                          out=out[bos:eos])
        return out
    return fn


def first_call(fn, refusal):
    """(result, seconds, None) of fn()'s first call, or (None, 0, reason)
    when torch refuses it: ``refusal(e)`` says whether exception ``e`` is a
    refusal (then its reason, with what torch warned, is returned; any other
    exception propagates)."""
    import warnings
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            y, first = timed_first(fn)
            return y, first, None
        except Exception as e:  # noqa: BLE001
            if not refusal(e):
                raise
            # torch's reasons (without the other backends' "runtime disabled").
            told = "; ".join(dict.fromkeys(
                str(w.message).split(" (Triggered internally")[0][:300] for w in said
                if "has been runtime disabled" not in str(w.message)))
            return None, 0.0, f"{type(e).__name__}: {str(e)[:200]}" + (f" ({told})" if told else "")


def anchors_prefill(res, c, d, backends, ident, flop):
    """torch SDPA on case ``c``: every backend that took the config's dims
    (the dense form, or a loop over the sequences when packed) and the
    nested jagged form with the first. A backend that refuses this case's
    shapes ("No available kernel"), or torch refusing the nested form, is a
    ``skipped`` row with the reason; any other exception is FAILED."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    k, v, vpad = expanded(c, d)
    forms = ["loop", "nested"] if c["N"] > 1 else ["dense"]
    for form in forms:
        if form == "nested" and "nested" not in ANCHORS:
            continue
        for label, backend, pad in (backends[:1] if form == "nested" else backends):
            variant = f"{label} + gate" + ("" if form == "dense" else
                                           ", a loop over the sequences" if form == "loop" else
                                           ", nested jagged (one call)")

            def row(backend=backend, pad=pad, form=form):
                vv = vpad if pad else v
                y, first, refused = first_call(
                    lambda: sdpa_fn(c, d, k, vv, backend, form)(),
                    (lambda e: True) if form == "nested" else
                    (lambda e: "No available kernel" in str(e)))
                if refused:
                    return {"status": "skipped", "error": f"torch refused this case: {refused}"}
                fn = sdpa_fn(c, d, k, vv, backend, form)
                err = protocol.rel_err(y[c["rows"]], c["ref"])
                r = {**anchor_times(fn, first), "err_vs_oracle": err, "within_bound": err < BOUND}
                r["TFLOPs"] = flop / r["median_ms"] / 1e9
                if form == "dense":
                    # SDPA alone, without the gate's multiply.
                    def alone():
                        with sdpa_kernel([backend]):
                            return F.scaled_dot_product_attention(
                                bhtd(c["q"]), bhtd(k), bhtd(vv), is_causal=True, scale=scale_of(d))
                    a = anchor_times(alone, first)
                    r["sdpa_alone_median_ms"] = a["median_ms"]
                    r["sdpa_alone_TFLOPs"] = flop / a["median_ms"] / 1e9
                return r
            res.guard(row, impl="torch", variant=variant, **ident)
            torch.cuda.empty_cache()
    del k, v, vpad


def run_prefill_config(res, name, d) -> None:
    import torch
    import k3
    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(16 + d["H"])
    manifest = {}
    if (OUT / "manifest.json").is_file():
        manifest = json.loads((OUT / "manifest.json").read_text())
    shape0 = {k: d[k] for k in ("H", "Dn", "Dr", "Dv", "R")}
    sessions, kinds = {}, {}
    for variant in VARIANTS:
        path = artifact(name, variant)
        kinds[variant] = ", ".join(manifest.get(path.name, {}).get("kernel_config", [])) or "?"
        try:
            sessions[variant] = k3.Session(str(path), device="cuda:0")
        except Exception as e:  # noqa: BLE001
            sessions[variant] = e
    backends, refused = [], []
    if ANCHORS:
        try:
            backends, refused = sdpa_backends(d, dev)
        except Exception as e:  # noqa: BLE001
            refused = [("sdpa", f"{type(e).__name__}: {e}")]
    for label, why in refused:
        res.add(status="skipped", error=f"torch refused these head dims: {why}", case=name,
                impl="torch", variant=label, shape=shape0)
    for key, (label, lengths) in CASES.items():
        ident = {"case": f"{name} {label}",
                 "shape": {**shape0, "T": sum(lengths), "num_seqs": len(lengths),
                           **({"lengths": lengths} if len(lengths) > 1 else {})}}
        flop = causal_flops(lengths, d)
        try:
            c = make_case(lengths, d, g, dev)
        except Exception as e:  # noqa: BLE001
            res.failed(f"inputs/reference: {type(e).__name__}: {e}", impl="k3", **ident)
            continue
        for variant, s in sessions.items():
            v = f"mla_prefill_attention {variant} (kernel {kinds[variant]})"
            if isinstance(s, Exception):
                res.failed(f"session: {type(s).__name__}: {s}", impl="k3", variant=v, **ident)
                continue
            if kinds[variant].startswith("loop_nest") and max(lengths) > LOOP_NEST_MAX_T:
                res.add(status="skipped", impl="k3", variant=v, error=(
                    f"the generic loop nest (no dedicated kernel chosen) on a {max(lengths)}-token "
                    f"sequence: ~0.5 s a run at T2048 H32, growing with T^2 H; skipped above "
                    f"K3_MLA_LOOP_NEST_MAX_T = {LOOP_NEST_MAX_T}"), **ident)
                continue
            res.guard(lambda: ours_prefill(s, c, flop, kinds[variant]), impl="k3", variant=v,
                      **ident)
        if backends:
            anchors_prefill(res, c, d, backends, ident, flop)
        del c
        torch.cuda.empty_cache()
    for s in sessions.values():
        if not isinstance(s, Exception):
            s.close()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# decode
# ---------------------------------------------------------------------------

def checked_seqs(b: int) -> list[int]:
    if b <= CHECKED_SEQS:
        return list(range(b))
    step = (b - 1) / (CHECKED_SEQS - 1)
    return sorted({round(j * step) for j in range(CHECKED_SEQS)})


def torch_absorbed(q, cache, wk, wv, d):
    """DeepSeek's absorbed decode: q_nope W_k, scores against the latents
    and k_pe, f32 softmax, against the latents, W_v. q [B, H, Dn+Dr],
    cache [B, C, R+Dr] (its dtype throughout), wk [H, Dn, R], wv [H, Dv, R]
    in the cache's dtype. Returns [B, H, Dv] bf16."""
    import torch
    dn, r = d["Dn"], d["R"]
    qc = q.to(cache.dtype)
    ql = torch.einsum("bhd,hdr->bhr", qc[..., :dn], wk)
    s = (torch.einsum("bhr,bcr->bhc", ql, cache[..., :r]) +
         torch.einsum("bhe,bce->bhc", qc[..., dn:], cache[..., r:])) * scale_of(d)
    p = s.softmax(dim=-1, dtype=torch.float32).to(cache.dtype)
    ctx = torch.einsum("bhc,bcr->bhr", p, cache[..., :r])
    return torch.einsum("bhr,hvr->bhv", ctx, wv).to(torch.bfloat16)


def run_decode(res) -> None:
    import torch
    from safetensors.torch import save_file
    d = ALL_CONFIGS[DECODE_CONFIG]
    h, dn, dr, dv, r = d["H"], d["Dn"], d["Dr"], d["Dv"], d["R"]
    w = r + dr
    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(1616)
    kvb = (torch.randn(h * (dn + dv), r, device=dev, generator=g) / r ** 0.5).to(torch.bfloat16)
    wfile = OUT / "decode.kv_b.safetensors"
    save_file({"kv_b": kvb.cpu()}, str(wfile))
    kvb_bytes = kvb.numel() * 2
    wsplit = kvb.view(h, dn + dv, r)
    for c in DECODE_CONTEXT:
        for b in DECODE_BATCH:
            ident = {"case": f"{DECODE_CONFIG} decode B{b} C{c}",
                     "shape": {"B": b, "context": c, "H": h, "Dn": dn, "Dr": dr, "Dv": dv, "R": r}}
            cache32_bytes = b * c * w * 4
            bf16_anchor = "absorbed-bf16" in ANCHORS
            need = 4 * cache32_bytes + (cache32_bytes // 2 if bf16_anchor else 0)
            if need > DEVICE_BUDGET:
                res.add(status="skipped", impl="k3", variant="forward_decode", error=(
                    f"needs ~{need / 1e9:.0f} GB on the device (the f32 cache {cache32_bytes / 1e9:.1f}"
                    f" GB four times: torch's copy, our input, state and updated-cache buffers), "
                    f"over the {DEVICE_BUDGET / 1e9:.0f} GB budget"), **ident)
                continue
            decode_row(res, ident, b, c, d, g, dev, kvb, wsplit, wfile, kvb_bytes, bf16_anchor)
            torch.cuda.empty_cache()


def decode_row(res, ident, b, c, d, g, dev, kvb, wsplit, wfile, kvb_bytes, bf16_anchor) -> None:
    import torch
    import k3
    h, dn, dr, r = d["H"], d["Dn"], d["Dr"], d["R"]
    w = r + dr
    try:
        # bf16 values (so the bf16 copy holds the same numbers), stored f32
        # as the state; the new token's latent is the cache's last row.
        cache16 = torch.empty(b, c, w, dtype=torch.bfloat16, device=dev)
        for i in range(b):
            cache16[i] = torch.randn(c, w, device=dev, generator=g).to(torch.bfloat16)
        cache32 = cache16.float()
        if not bf16_anchor and "bf16" not in DECODE_CACHES:
            del cache16
            cache16 = None
        q = torch.randn(b, h, dn + dr, device=dev, generator=g).to(torch.bfloat16)
        lat = cache32[:, c - 1].to(torch.bfloat16).contiguous()
        lens = torch.full((b,), c - 1, dtype=torch.int32, device=dev)
        cu = torch.arange(b + 1, dtype=torch.int32, device=dev)
        seqs = checked_seqs(b)
        ref = decode_reference(q, cache32, kvb, seqs, d)
    except Exception as e:  # noqa: BLE001
        res.failed(f"inputs/reference: {type(e).__name__}: {e}", impl="k3", variant="forward_decode",
                   **ident)
        return
    cache_bytes = {"f32": cache32.numel() * 4, "bf16": cache32.numel() * 2}
    seqs_t = torch.tensor(seqs, device=dev)
    manifest = {}
    if (OUT / "manifest.json").is_file():
        manifest = json.loads((OUT / "manifest.json").read_text())
    for ct in DECODE_CACHES:
        for variant in DECODE_VARIANTS:
            decode_ours(res, ident, variant, ct, manifest, b, c, q, lat, lens, cu, seqs_t, ref,
                        wfile, cache32 if ct == "f32" else cache16, cache_bytes[ct] + kvb_bytes)
    torch.cuda.empty_cache()
    for dtype, cache in (("f32", cache32), ("bf16", cache16)):
        if cache is None or f"absorbed{'' if dtype == 'f32' else '-bf16'}" not in ANCHORS:
            continue
        wk = wsplit[:, :dn].to(cache.dtype).contiguous()
        wv = wsplit[:, dn:].to(cache.dtype).contiguous()

        def anchor(cache=cache, wk=wk, wv=wv, dtype=dtype):
            fn = lambda: torch_absorbed(q, cache, wk, wv, d)  # noqa: E731
            y, first = timed_first(fn)
            err = protocol.rel_err(y[seqs_t], ref)
            row = {**anchor_times(fn, first), "err_vs_oracle": err, "within_bound": err < BOUND}
            row["bytes"] = cache_bytes[dtype] + kvb_bytes
            return {**row, "TBps": row["bytes"] / row["median_ms"] / 1e9}
        res.guard(anchor, impl="torch", variant=f"absorbed einsums, {dtype} cache", **ident)
        torch.cuda.empty_cache()
    del cache16, cache32


def decode_ours(res, ident, variant, ct, manifest, b, c, q, lat, lens, cu, seqs_t, ref, wfile,
                cache, nbytes) -> None:
    """Our decode row for one artifact variant: checked against f64, then
    timed, with the per-kernel means of a profiled series."""
    import torch
    import k3
    path = decode_artifact(b, c, variant, ct)
    kind = ", ".join(manifest.get(path.name, {}).get("kernel_config", [])) or "?"

    def ours():
        s = k3.Session(str(path), device="cuda:0")
        try:
            s.load_weights(str(wfile))
            syms = {"num_tokens": b, "num_seqs": b}
            s.run("forward", symbols=syms, cache=cache)  # fills the state
            inputs = dict(q=q, latent=lat, cache_lens=lens, cu_seqlens=cu)
            out, first = timed_first(lambda: s.run("forward_decode", symbols=syms,
                                                   outputs="dlpack", **inputs))
            y = torch.from_dlpack(out["o"])
            err = protocol.rel_err(y[seqs_t], ref)
            if not err < BOUND:
                raise AssertionError(f"error vs f64 {err:.3e} (bound {BOUND:.2e})")
            row = {**ours_times(s, "forward_decode", first, syms, inputs), "err_vs_oracle": err,
                   "kernel": kind}
            # Per-kernel means from a second, profiled series (few runs when slow).
            warmup, reps, _ = plan_reps(first)
            s.profiling = True
            s.reset_profile()
            protocol.k3_times(s, "forward_decode", warmup=0, reps=min(reps, 5 if first > SLOW_RUN_S
                                                                        else reps),
                              symbols=syms, **inputs)
            row["kernels"] = {p["kernel"]: {"mean_ms": p["total_ms"] / p["calls"], "min_ms": p["min_ms"],
                                            "max_ms": p["max_ms"], "calls": p["calls"]}
                              for p in s.profile("forward_decode")}
            s.profiling = False
        finally:
            s.close()
        row["bytes"] = nbytes
        row["TBps"] = row["bytes"] / row["median_ms"] / 1e9
        att = [v for k, v in row["kernels"].items() if "latent_attention" in k]
        if att:
            row["attention_kernel_ms"] = att[0]["mean_ms"]
            row["attention_kernel_TBps"] = row["bytes"] / att[0]["mean_ms"] / 1e9
        return row
    name = "forward_decode" if variant == "default" else f"forward_decode {variant}"
    res.guard(ours, impl="k3", variant=f"{name} (kernel {kind}; {ct} cache as state)", **ident)
    torch.cuda.empty_cache()


def run() -> int:
    import torch
    res = protocol.Results("mla", tag=os.environ.get("K3_RESULTS_TAG", ""))
    check_references(res)
    if "prefill" in PARTS:
        for name, d in CONFIGS.items():
            try:
                run_prefill_config(res, name, d)
            except Exception as e:  # noqa: BLE001
                res.failed(f"{type(e).__name__}: {e}", case=name, impl="k3")
            torch.cuda.empty_cache()
    if "decode" in PARTS:
        try:
            run_decode(res)
        except Exception as e:  # noqa: BLE001
            res.failed(f"{type(e).__name__}: {e}", case=f"{DECODE_CONFIG} decode", impl="k3")
    res.write()
    return 1 if any(r.get("status") == "FAILED" for r in res.rows) else 0


if __name__ == "__main__":
    cmd = sys.argv[1:] or ["run"]
    sys.exit(prepare() if cmd == ["prepare"] else run())
