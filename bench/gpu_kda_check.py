"""The KDA kernels on the GPU against the float64 recurrence, over the
awkward shapes of the chunkwise issue: T not a multiple of the chunk, T
shorter than a chunk, packed variable-length batches with an empty-free mix
of lengths, non-zero initial state, gates at the -5 bound, the unbounded
softplus gate with large decays, an external log-decay, beta at both ends.
f32 inputs, bound 1e-4 normwise (issue 6).

    .venv/bin/python bench/gpu_kda_check.py prepare   # here: artifacts, inputs, f64 references
    python3 bench/gpu_kda_check.py check              # GPU machine (numpy only)
    python3 bench/gpu_kda_check.py check-bf16         # the bf16 section alone

Kernels: target=cuda with kda=recurrent (the dedicated recurrent kernel;
also at its one-token tile S = 1, the decode form without staging, on
whole sequences) and kda=chunkwise (the chunk ops on the generic GPU path).

bf16 section (bound 1e-2, issue 6): bf16 q/k/v/g/beta/o, K = 128, V = 96
(value slices: 3 blocks of 2 warps), the in-op gate at -5: the split
tensor-core kernels (k3-kda-mma-split: by default a chain block's slice is
split at run time over 2 blocks of one active warp while the blocks fit the
SMs, which every case here but the 33 sequences does; also with the split
off and with 1 warp per chain block) and the recurrent kernel on the same
inputs. The same with Kimi Linear's
unbounded softplus gate (variants sp_*): mild decays, and decays of up to
~100 per token on a third of the channels (no factorisation of the
in-chunk products stays in f32's range there). The f64 reference runs on
the bf16-rounded inputs.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from dumps import read_tensor

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "kda_check"
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
LENS = {"T1": [1], "T15": [15], "T17": [17], "T65": [65], "T300": [300],
        "varlen": [1, 63, 64, 65, 300],
        # 33 sequences: the operand kernel's sequence search takes two
        # 32-ary rounds (31 or fewer take one).
        "many": [(7 * i) % 23 + 1 for i in range(33)]}
CASES = [(gate, regime, lens) for lens in LENS
         for gate, regime in (("lb_gate", "bound"), ("lb_gate", "random"),
                              ("softplus_gate", "large"), ("ext_gate", "random"),
                              ("lb_gate", "beta_extreme"))]
# Variant -> k3-compile options. recurrent_tokens: the recurrent kernel's
# one-token tile (S = 1, a decode entry's: no staging) on whole sequences.
VARIANTS = {"recurrent": "kda=recurrent", "chunkwise": "kda=chunkwise",
            "recurrent_tokens": "kda=recurrent kernel-config=kda.tile=32x4x1x4"}
TOL = 1e-4
BF16_TOL = 1e-2
BF16_LENS = ["T1", "T15", "T17", "T65", "T300", "varlen"]
BF16_CASES = [(regime, lens) for lens in BF16_LENS for regime in ("bound", "random", "beta_extreme")]
BF16_CASES.append(("random", "many"))
BF16_CASES += [(regime, lens) for lens in BF16_LENS for regime in ("sp_random", "sp_large")]
BF16_CASES.append(("sp_large", "many"))
# Variant -> extra k3-compile options: the split tensor-core form
# (default: chain blocks of 2 warps, a slice split over 2 blocks of one
# active warp when the sequences leave SMs idle), with the split off (both
# warps of a block active: tile[1] = 32 columns), with 1 warp per chain
# block, the recurrent kernel.
BF16_VARIANTS = {"mma": "kda=auto",
                 "mma_nosplit": "kda=auto kernel-config=kda_mma_recurrence.tile=16x32",
                 "mma_w1": "kda=auto kernel-config=kda_mma_recurrence.warps=1",
                 "recurrent": "kda=recurrent",
                 "recurrent_tokens": "kda=recurrent kernel-config=kda.tile=32x8x1x4",
                 "recurrent_tokens_p16": "kda=recurrent kernel-config=kda.tile=32x16x1x4",
                 # The decode entry's default tile: at V = 96 the second
                 # block's upper 8 column groups hold no column.
                 "recurrent_tokens_bv64": "kda=recurrent kernel-config=kda.tile=64x8x1x4"}
# The KDA state stored in bf16 between calls (k3-compile kda-state-dtype=bf16
# makes a model's state so; here the entry's state itself is bf16): the
# kernels widen it on load and round it once on the way out. The same
# cases and references (the f32 initial state; its bf16 rounding and the
# output's stay well inside the bound, docs/precision.md).
BF16_STATE_VARIANTS = {"state_bf16_mma": "kda=auto",
                       "state_bf16_recurrent": "kda=recurrent",
                       "state_bf16_recurrent_tokens": "kda=recurrent kernel-config=kda.tile=32x8x1x4"}
# The softplus gate's variants (cases whose regime starts with "sp_").
BF16_SP_VARIANTS = {"sp_mma": "kda=auto", "sp_recurrent": "kda=recurrent",
                    "sp_recurrent_tokens": "kda=recurrent kernel-config=kda.tile=32x8x1x4"}
BF16_GATE_ATTRS = {"lb": "gate_kind = #k3<decay_gate lower_bounded_sigmoid>, lower_bound = -5.0 : f64",
                   "sp": "gate_kind = #k3<decay_gate neg_softplus>"}


def bf16_variants(regime):
    variants = BF16_SP_VARIANTS if regime.startswith("sp_") else {**BF16_VARIANTS, **BF16_STATE_VARIANTS}
    if os.environ.get("K3_CHECK_VARIANTS"):  # e.g. "mma,sp_mma": a subset
        keep = os.environ["K3_CHECK_VARIANTS"].split(",")
        variants = {k: v for k, v in variants.items() if k in keep}
    return variants
BF16_H, BF16_K, BF16_V = 2, 128, 96
BF16_MODEL = """// KDA core, bf16 operands, K = 128, V = 96, in-op gate.
func.func @forward(
    %q: tensor<1x?x2x128xbf16> {k3.name = "q", k3.dims = array<i64: 1, -1, 2, 128>},
    %k: tensor<1x?x2x128xbf16> {k3.name = "k", k3.dims = array<i64: 1, -1, 2, 128>},
    %v: tensor<1x?x2x96xbf16> {k3.name = "v", k3.dims = array<i64: 1, -1, 2, 96>},
    %g: tensor<1x?x2x128xbf16> {k3.name = "g", k3.dims = array<i64: 1, -1, 2, 128>},
    %beta: tensor<1x?x2xbf16> {k3.name = "beta", k3.dims = array<i64: 1, -1, 2>},
    %s0: tensor<?x2x128x96xf32> {k3.name = "initial_state", k3.dims = array<i64: -2, 2, 128, 96>},
    %alog: tensor<2xf32> {k3.name = "A_log"},
    %dtb: tensor<256xf32> {k3.name = "dt_bias"},
    %cu: tensor<?xi32> {k3.name = "cu_seqlens"})
    -> (tensor<1x?x2x96xbf16> {k3.name = "o"}, tensor<?x2x128x96xf32> {k3.name = "final_state"}) {
  %o, %s = k3.kda %q, %k, %v, %g, %beta initial_state(%s0) cu_seqlens(%cu) gate_params(%alog, %dtb)
      {scale = 0.08838834764831845 : f64, use_qk_l2norm, use_beta_sigmoid,
       GATE_ATTRS}
      : (tensor<1x?x2x128xbf16>, tensor<1x?x2x128xbf16>, tensor<1x?x2x96xbf16>, tensor<1x?x2x128xbf16>,
         tensor<1x?x2xbf16>, tensor<?x2x128x96xf32>, tensor<?xi32>, tensor<2xf32>, tensor<256xf32>)
      -> (tensor<1x?x2x96xbf16>, tensor<?x2x128x96xf32>)
  return %o, %s : tensor<1x?x2x96xbf16>, tensor<?x2x128x96xf32>
}
"""


def prepare():
    sys.path.insert(0, str(ROOT / "python"))
    sys.path.insert(0, str(ROOT / "test" / "e2e"))
    from k3ref import model
    from test_kda_chunkwise import make_inputs, reference
    OUT.mkdir(parents=True, exist_ok=True)
    for gate in ("lb_gate", "softplus_gate", "ext_gate"):
        for kda, options in VARIANTS.items():
            subprocess.run([str(BIN / "k3-opt"), str(ROOT / f"test/e2e/Inputs/kda_{gate}.mlir"),
                            f"--k3-compile=target=cuda {options} output={OUT}/{gate}_{kda}.k3bin "
                            "max-tokens=512 max-seqs=48", "-o", os.devnull], check=True)
    for i, (gate, regime, lens) in enumerate(CASES):
        x = make_inputs(LENS[lens], gate, regime, seed=i)
        o, s = reference(x, gate)
        model.save_safetensors(OUT / f"in_{i}.safetensors", x)
        np.savez(OUT / f"ref_{i}.npz", o=o, s=s)
    (OUT / "cases.json").write_text(json.dumps(CASES))
    print(f"prepared {len(CASES)} cases in {OUT}")
    prepare_bf16(model)


def prepare_bf16(model):
    import ml_dtypes
    from k3ref import ops
    for gate, variants, state in (("lb", BF16_VARIANTS, "f32"), ("sp", BF16_SP_VARIANTS, "f32"),
                                  ("lb", BF16_STATE_VARIANTS, "bf16")):
        src = OUT / f"kda_bf16_{gate}_state_{state}.mlir"
        src.write_text(BF16_MODEL.replace("GATE_ATTRS", BF16_GATE_ATTRS[gate])
                       .replace("tensor<?x2x128x96xf32>", f"tensor<?x2x128x96x{state}>"))
        for name, options in variants.items():
            subprocess.run([str(BIN / "k3-opt"), str(src),
                            f"--k3-compile=target=cuda {options} output={OUT}/bf16_{name}.k3bin "
                            "max-tokens=512 max-seqs=48", "-o", os.devnull], check=True)
    bf = ml_dtypes.bfloat16
    for i, (regime, lens) in enumerate(BF16_CASES):
        lens = LENS[lens]
        rng = np.random.default_rng(100 + i)
        T, N, H, K, V = sum(lens), len(lens), BF16_H, BF16_K, BF16_V
        x = {"q": rng.standard_normal((1, T, H, K)), "k": rng.standard_normal((1, T, H, K)),
             "v": rng.standard_normal((1, T, H, V)), "beta": rng.standard_normal((1, T, H)),
             "g": rng.standard_normal((1, T, H, K)) + (30.0 if regime == "bound" else 0.0)}
        if regime == "beta_extreme":
            x["beta"] = np.where(rng.random((1, T, H)) < 0.5, -12.0, 12.0)
        if regime == "sp_large":
            # A third of the channels decay by ~e^-100 per token.
            x["g"] = x["g"] + np.where(rng.random((1, T, H, K)) < 1 / 3, 20.0, 0.0)
        x = {k: v.astype(bf) for k, v in x.items()}
        x["initial_state"] = (0.5 * rng.standard_normal((N, H, K, V))).astype(np.float32)
        x["A_log"] = (0.5 * rng.standard_normal(H) + (1.5 if regime == "sp_large" else 0.0)).astype(np.float32)
        x["dt_bias"] = rng.standard_normal(H * K).astype(np.float32)
        x["cu_seqlens"] = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        f64 = {k: np.asarray(v).astype(np.float64) for k, v in x.items() if k != "cu_seqlens"}
        if regime.startswith("sp_"):
            g = ops.kda_gate_softplus(f64["g"], f64["A_log"], f64["dt_bias"])
        else:
            g = ops.kda_gate_lower_bounded(f64["g"], f64["A_log"], f64["dt_bias"], -5.0)
        o, s = ops.kda_recurrent(f64["q"], f64["k"], f64["v"], g, ops.sigmoid(f64["beta"]), K ** -0.5,
                                 initial_state=f64["initial_state"], cu_seqlens=x["cu_seqlens"],
                                 use_qk_l2norm=True)
        model.save_safetensors(OUT / f"in_bf16_{i}.safetensors", x)
        # f32 is plenty for a 1e-2 bound and halves what the GPU run carries.
        np.savez(OUT / f"ref_bf16_{i}.npz", o=o.astype(np.float32), s=s.astype(np.float32))
    (OUT / "cases_bf16.json").write_text(json.dumps(BF16_CASES))
    print(f"prepared {len(BF16_CASES)} bf16 cases in {OUT}")


RESULTS = None  # a protocol.Results while check_bf16 runs: one row per case and variant


def run_and_compare(artifact, inputs, ref, tol, label, worst, key):
    """k3-run `artifact` on cuda:0 with `inputs`; o and final_state against
    the reference `ref` (npz with o, s; computed in f64, stored f32 for the
    bf16 cases). Returns the number of failures
    and records the worst error under worst[key]."""
    dump = OUT / "out_check.safetensors"  # one run at a time
    r = subprocess.run([str(BIN / "k3-run"), str(artifact), "--device", "cuda:0",
                        "--inputs", str(inputs), "--dump", str(dump), "--quiet"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{label}: k3-run failed: {r.stderr.strip()}")
        if RESULTS is not None:
            RESULTS.failed(f"k3-run failed: {r.stderr.strip()}", case=label, impl="k3", variant=key)
        return 1
    failures = 0
    errs = {}
    for tensor, k in (("o", "o"), ("final_state", "s")):
        got, want = read_tensor(dump, tensor).astype(np.float64), ref[k]
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        bad = not np.all(np.isfinite(got)) or err > tol
        failures += bad
        errs[tensor] = err if np.all(np.isfinite(got)) else float("inf")
        worst[key] = max(worst.get(key, 0.0), err)
        if bad or os.environ.get("K3_CHECK_VERBOSE") == "1":
            print(f"{'FAIL ' if bad else ''}{label} {tensor}: {err:.2e}")
    if RESULTS is not None:
        RESULTS.add(case=label, impl="k3", variant=key, err_vs_oracle=errs, bound=tol,
                    status="FAILED" if failures else "ok")
    dump.unlink()
    return failures


def check():
    cases = json.loads((OUT / "cases.json").read_text())
    worst, failures = {}, 0
    for i, (gate, regime, lens) in enumerate(cases):
        ref = np.load(OUT / f"ref_{i}.npz")
        for kda in VARIANTS:
            failures += run_and_compare(OUT / f"{gate}_{kda}.k3bin", OUT / f"in_{i}.safetensors", ref, TOL,
                                        f"{kda} {gate} {regime} {lens}", worst, kda)
    for kda, e in worst.items():
        print(f"{kda}: worst normwise relative error over {len(cases)} cases x (o, state): {e:.2e}")
    failures += check_bf16()
    print("ALL OK" if failures == 0 else f"{failures} FAILURES")
    return 1 if failures else 0


def check_bf16():
    global RESULTS
    import protocol
    RESULTS = protocol.Results("kda_check_bf16")
    try:
        return _check_bf16()
    finally:
        RESULTS.write()
        RESULTS = None


def _check_bf16():
    cases = json.loads((OUT / "cases_bf16.json").read_text())
    worst, failures = {}, 0
    only = os.environ.get("K3_CHECK_CASES")  # e.g. "0,1,17": a subset of the cases
    for i, (regime, lens) in enumerate(cases):
        if only and str(i) not in only.split(","):
            continue
        ref = np.load(OUT / f"ref_bf16_{i}.npz")
        for name in bf16_variants(regime):
            failures += run_and_compare(OUT / f"bf16_{name}.k3bin", OUT / f"in_bf16_{i}.safetensors", ref,
                                        BF16_TOL, f"bf16 {name} {regime} {lens}", worst, name)
    for name, e in worst.items():
        print(f"bf16 {name}: worst normwise relative error over {len(cases)} cases x (o, state): {e:.2e}"
              f" (bound {BF16_TOL:g})")
    return failures


if __name__ == "__main__":
    if sys.argv[1:] == ["prepare"]:
        sys.exit(prepare())
    # "check-bf16": the bf16 section alone.
    sys.exit(1 if check_bf16() else 0) if sys.argv[1:] == ["check-bf16"] else sys.exit(check())
