"""Numerics on a real checkpoint (issue 17): a seeded random bf16
checkpoint of the 4-layer cut of Kimi-Linear-48B (3 KDA + 1 MLA layers,
~13 GB) in the Hugging Face layout, written by bench/make_checkpoint.py and
loaded unchanged by both runtimes, and the last-token logits of ours (bf16
activations) and of transformers' `KimiLinearForCausalLM` in bf16, each
against transformers' f32 model on the same weights and prompts.

    # here: import and compile the cut for CUDA (bf16 and f32 activations) into out/checkpoint-numerics/
    .venv/bin/python bench/checkpoint_numerics.py prepare [--config bench/configs/kimi-linear-48b-cut4.json]
    # there (torch, transformers; carry build/runtime/libk3runtime.so, out/checkpoint-numerics and
    # .anchors/anchors-fla.tgz; the tracked python/ and bench/ are there):
    K3_RESULTS_DIR=$OUT python3 bench/checkpoint_numerics.py run [--stages checkpoint,ours,hf-f32,hf-bf16,...]

Stages, in this order:
* checkpoint: make_checkpoint.write of out/checkpoint-numerics/config.json
  into --work (default /tmp/k3-checkpoint-numerics/ckpt), transformers'
  tensor names by default (`--names hub` for the hub's; ours loads both, see
  test/e2e/test_make_checkpoint.py; transformers loads its own names with no
  conversion mapping, the hub's only through one, which kimi_linear may not
  have). Reused when its STAMP.json (config, seed, names, make_checkpoint.py)
  matches, so a second call on a warm machine skips the ~3 minutes.
* ours: `k3.Session.load_weights(DIR)` (timed: bytes of the index's
  total_size / seconds, from the page cache since the checkpoint was just
  written), then a prefill of each prompt (one sequence, T in {64, 1024},
  fixed seeded token ids, `logits=last`), with the bf16-activation
  artifact and with the f32-activation one (which separates the semantics
  from bf16 rounding).
* hf-f32, hf-bf16: `KimiLinearForCausalLM.from_pretrained(DIR, dtype=...)`
  (timed likewise), a FAILED load row if anything is missing, unexpected
  or of another shape (then tensors of another shape but the same number of
  elements are copied in reshaped so the numerics still come out), a check
  that the config was read as config.json says, then the same prompts with
  `logits_to_keep=1`. The f32 side runs without fla and with TF32 off
  (torch's reference kernels, in f32); the bf16 side with fla's kernels
  when .anchors/anchors-fla.tgz is there (unpacked to /tmp/k3-fla, as
  bench/gpu_session.sh's e2e stage does).
* compare: per prompt, the normwise relative error ||x - ref|| / ||ref|| and
  whether the greedy tokens agree, for ours bf16 vs transformers f32,
  transformers bf16 vs f32, ours bf16 vs transformers bf16 and ours f32
  activations vs transformers f32; then issue 17's bound, ours bf16 error
  <= transformers bf16 error (both against transformers f32), per prompt.

Each of ours / hf-f32 / hf-bf16 runs in its own process (a crash or a
timeout is then FAILED rows, never missing ones) and leaves its logits in
--work (logits-*.npz, with the prompts and the checkpoint's stamp, which
compare checks), so the stages can be split over calls while the machine
stays warm. The parent writes bench/results/checkpoint-numerics-<gpu>-
<date>.json ($K3_RESULTS_DIR overrides) after each stage and stops starting
sides when --budget-s (default 570 s, under the device tool's 10 minutes)
would be passed: those are FAILED rows saying so, to rerun in a second call.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import make_checkpoint  # noqa: E402
from e2e import prefill_inputs  # noqa: E402
from protocol import Results, rel_err  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "checkpoint-numerics"
WORK = Path("/tmp/k3-checkpoint-numerics")
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
CONFIG = ROOT / "bench" / "configs" / "kimi-linear-48b-cut4.json"
PROMPT_T = [64, 1024]
PROMPT_SEED = 17
FLA_TGZ = ROOT / ".anchors" / "anchors-fla.tgz"
FLA_DIR = Path("/tmp/k3-fla")  # bench/gpu_session.sh's e2e stage unpacks there too
STAGES = ["checkpoint", "ours", "hf-f32", "hf-bf16", "compare"]
# Logits sets: name -> (impl, variant); the side that makes each.
LOGITS = {"ours-bf16": ("k3", "bf16 activations"), "ours-f32": ("k3", "f32 activations"),
          "hf-f32": ("transformers", "f32"), "hf-bf16": ("transformers", "bf16")}
SIDES = {"ours": ["ours-bf16", "ours-f32"], "hf-f32": ["hf-f32"], "hf-bf16": ["hf-bf16"]}
# (got, reference): the rows of compare, in the table's order.
PAIRS = [("ours-bf16", "hf-f32"), ("hf-bf16", "hf-f32"), ("ours-bf16", "hf-bf16"), ("ours-f32", "hf-f32")]


def artifacts(out: Path) -> dict:
    return {"bf16": out / "cut-bf16.k3bin", "f32": out / "cut-f32.k3bin"}


def prepare(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mlir = out / "model.mlir"
    subprocess.run([str(BIN / "k3-import"), str(args.config), "--max-context", str(args.max_tokens),
                    "-o", str(mlir)], check=True)
    for dtype, art in artifacts(out).items():
        opts = (f"target={args.target} output={art} max-tokens={args.max_tokens} max-seqs=1 "
                f"activation-dtype={dtype}")
        subprocess.run([str(BIN / "k3-opt"), str(mlir), f"--k3-compile={opts}", "-o", os.devnull], check=True)
    mlir.unlink()
    shutil.copyfile(args.config, out / "config.json")  # the checkpoint is written from this very config
    (out / "prepared.json").write_text(json.dumps({"config": Path(args.config).stem, "target": args.target,
                                                   "max_tokens": args.max_tokens}))
    print(f"prepared {out}: " + ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB"
                                          for p in artifacts(out).values()))


def prompt(T: int, vocab: int) -> np.ndarray:
    return np.random.default_rng([PROMPT_SEED, T]).integers(0, vocab, T).astype(np.int32)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


# ---------------------------------------------------------------- checkpoint


def ckpt_dir(args) -> Path:
    return Path(args.work) / "ckpt"


def stamp_of(args) -> dict:
    cfg = Path(args.out) / "config.json"
    return {"config": sha256(cfg), "seed": args.seed, "names": args.names,
            "make_checkpoint": sha256(make_checkpoint.__file__)}


def checkpoint_bytes(ckpt: Path) -> int:
    return json.loads((ckpt / "model.safetensors.index.json").read_text())["metadata"]["total_size"]


def write_checkpoint(args) -> dict:
    ckpt, stamp = ckpt_dir(args), stamp_of(args)
    st = ckpt / "STAMP.json"
    index = ckpt / "model.safetensors.index.json"
    if st.is_file() and json.loads(st.read_text()) == stamp and index.is_file():
        return {"reused": True, "GB": checkpoint_bytes(ckpt) / 1e9, "dir": str(ckpt)}
    shutil.rmtree(ckpt, ignore_errors=True)
    t0 = time.perf_counter()
    r = make_checkpoint.write(Path(args.out) / "config.json", ckpt, args.seed, int(args.shard_gb * 1e9),
                              args.names)
    st.write_text(json.dumps(stamp))  # last: a half-written checkpoint has none
    return {"reused": False, "seconds": time.perf_counter() - t0, "GB": r["bytes"] / 1e9,
            "tensors": r["tensors"], "shards": r["shards"], "dir": str(ckpt)}


def checkpoint_stamp(args) -> str:
    st = ckpt_dir(args) / "STAMP.json"
    if not st.is_file():
        raise RuntimeError(f"no complete checkpoint in {ckpt_dir(args)} (run the checkpoint stage)")
    return st.read_text()


# ---------------------------------------------------------------- logits files


def logits_path(args, name: str) -> Path:
    return Path(args.work) / f"logits-{name}.npz"


def save_logits(args, name: str, stamp: str, got: dict):
    """All prompts done so far (rewritten after each, so a crash keeps the
    earlier ones)."""
    arrays = {f"T{T}": x for T, (ids, x) in got.items()} | {f"ids{T}": ids for T, (ids, x) in got.items()}
    np.savez(logits_path(args, name), stamp=np.array(stamp), **arrays)


def load_logits(args, name: str, T: int):
    p = logits_path(args, name)
    if not p.is_file():
        raise RuntimeError(f"no logits of {name} ({p.name}: its stage did not run or crashed)")
    with np.load(p) as f:
        if f"T{T}" not in f:
            raise RuntimeError(f"{name} has no logits at T = {T}")
        return str(f["stamp"]), f[f"ids{T}"], f[f"T{T}"].astype(np.float64)


# ---------------------------------------------------------------- ours


def ours_side(args, res: Results):
    """Both artifacts, one session at a time."""
    import k3
    stamp, ckpt = checkpoint_stamp(args), ckpt_dir(args)
    for name in SIDES["ours"]:
        logits_path(args, name).unlink(missing_ok=True)
    for path, name in zip(artifacts(Path(args.out)).values(), SIDES["ours"], strict=True):
        s = ours_load(k3, args, res, path, name, ckpt)
        got = {}
        for T in args.T:
            res.guard(lambda T=T, s=s, name=name, got=got: ours_prefill(args, s, name, stamp, T, got),
                      case="prefill", impl="k3", variant=LOGITS[name][1], shape={"B": 1, "T": T})
        if s is not None:
            s.close()


def ours_load(k3, args, res: Results, path: Path, name: str, ckpt: Path):
    """A session on the artifact with the checkpoint's weights (None if
    that failed: a FAILED row)."""
    held = {}

    def load():
        art = k3.Artifact(path)
        if art.max_tokens < max(args.T):
            raise RuntimeError(f"{path.name} takes {art.max_tokens} tokens, the prompts {max(args.T)}")
        held["s"] = s = k3.Session(art, device=args.device)
        nbytes = checkpoint_bytes(ckpt)
        t0 = time.perf_counter()
        s.load_weights(ckpt)  # synchronous: the weights are on the device when it returns
        dt = time.perf_counter() - t0
        return {"seconds": dt, "GB": nbytes / 1e9, "GBps": nbytes / 1e9 / dt, "device": s.device}

    if res.guard(load, case="load", impl="k3", variant=LOGITS[name][1], shape={})["status"] != "ok":
        return None
    return held["s"]


def ours_prefill(args, s, name: str, stamp: str, T: int, got: dict) -> dict:
    if s is None:
        raise RuntimeError("no session (the load failed)")
    vocab = s.artifact.vocab_size
    ids = prompt(T, vocab)
    s.reset_state()
    t0 = time.perf_counter()
    x = np.asarray(s.run("forward", **prefill_inputs(ids))["logits"], np.float32).reshape(-1)
    dt = time.perf_counter() - t0
    if x.size != vocab or not np.all(np.isfinite(x)):
        raise RuntimeError(f"logits: {x.size} values (vocab {vocab}), finite: {bool(np.all(np.isfinite(x)))}")
    got[T] = (ids, x)
    save_logits(args, name, stamp, got)
    return {"seconds": dt, "argmax": int(np.argmax(x))}


# ---------------------------------------------------------------- transformers


def hf_from_pretrained(cls, ckpt: Path, dtype, device: str):
    """from_pretrained as it is, else with the mismatched tensors copied in
    reshaped when only their shape differs (the numerics still come out;
    the load row is FAILED either way)."""
    import torch

    def load(**kw):
        try:
            return cls.from_pretrained(ckpt, dtype=dtype, device_map=device, output_loading_info=True, **kw)
        except (ImportError, ValueError) as e:  # device_map wanting accelerate: load here, then move
            if "accelerate" not in str(e):
                raise
            model, info = cls.from_pretrained(ckpt, dtype=dtype, output_loading_info=True, **kw)
            return model.to(device), info

    try:
        model, info = load()
        problems = [f"{k}: {sorted(map(str, v))[:6]}" for k, v in info.items() if v]
        if not problems:
            return model, [], []
        model = None
    except Exception as e:  # noqa: BLE001 (a size mismatch raises in some versions)
        problems = [f"{type(e).__name__}: {str(e)[:600]}"]
    gc.collect()  # the first model's memory, before the second
    torch.cuda.empty_cache()
    try:
        model, info = load(ignore_mismatched_sizes=True)
    except Exception as e:  # noqa: BLE001
        raise RuntimeError("; ".join(problems) + f"; and with ignore_mismatched_sizes: {e}") from e
    if info.get("missing_keys") or info.get("unexpected_keys"):
        raise RuntimeError("checkpoint not loadable: " + "; ".join(problems))
    from safetensors import safe_open
    where = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"]
    params = dict(model.named_parameters()) | dict(model.named_buffers())
    reshaped = []
    for m in info.get("mismatched_keys") or []:
        key = m[0] if isinstance(m, (tuple, list)) else m
        with safe_open(ckpt / where[key], framework="pt") as f:
            t = f.get_tensor(key)
        with torch.no_grad():
            params[key].copy_(t.reshape(params[key].shape))  # raises when the sizes differ too
        reshaped.append(f"{key} {list(t.shape)} -> {list(params[key].shape)}")
    return model, problems, reshaped


def check_config(cfg, raw: dict):
    """The fields that do not show in the tensors' shapes, read as
    config.json says (transformers' names, then the hub's)."""
    fields = {"num_experts_per_token": ("num_experts_per_tok", "num_experts_per_token"),
              "routed_scaling_factor": ("routed_scaling_factor",), "rms_norm_eps": ("rms_norm_eps",),
              "moe_renormalize": ("norm_topk_prob", "moe_renormalize")}
    wrong = []
    for key, names in fields.items():
        have = [getattr(cfg, n) for n in names if hasattr(cfg, n)]
        if key in raw and (not have or have[0] != raw[key]):
            wrong.append(f"{key}: config.json {raw[key]}, transformers {have[0] if have else 'absent'}")
    if wrong:
        raise RuntimeError("transformers read config.json otherwise: " + "; ".join(wrong))


def hf_side(args, res: Results, name: str):
    import importlib.util

    import torch
    from transformers import KimiLinearForCausalLM
    stamp, ckpt = checkpoint_stamp(args), ckpt_dir(args)
    logits_path(args, name).unlink(missing_ok=True)
    impl, variant = LOGITS[name]
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[variant]
    if dtype == torch.float32:  # the reference: f32 products, not TF32 (cuDNN's convolutions default to TF32)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    fla = importlib.util.find_spec("fla") is not None
    nbytes = checkpoint_bytes(ckpt)
    held = {}

    def load():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model, problems, reshaped = hf_from_pretrained(KimiLinearForCausalLM, ckpt, dtype, args.device)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        held["m"] = model.eval()
        row = {"seconds": dt, "GB": nbytes / 1e9, "GBps": nbytes / 1e9 / dt, "fla": fla,
               "attn_implementation": getattr(model.config, "_attn_implementation", None),
               "experts_implementation": getattr(model.config, "_experts_implementation", None)}
        try:
            check_config(model.config, json.loads((ckpt / "config.json").read_text()))
        except RuntimeError as e:
            problems.append(str(e))
        return row, problems, reshaped

    ident = {"case": "load", "impl": impl, "variant": variant, "shape": {}}
    try:
        row, problems, reshaped = load()
        if problems:  # FAILED, with the measured fields: the numerics below still run
            res.failed("checkpoint not loaded as it is: " + "; ".join(problems), **ident, **row,
                       reshaped=reshaped)
        else:
            res.add(**ident, **row)
    except Exception as e:  # noqa: BLE001
        res.failed(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}", **ident)
    got = {}

    def prefill(T):
        if "m" not in held:
            raise RuntimeError("no model (the load failed)")
        model = held["m"]
        ids = prompt(T, model.config.vocab_size)
        with torch.inference_mode():
            x = torch.as_tensor(ids, dtype=torch.long, device=args.device)[None]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model(input_ids=x, logits_to_keep=1, use_cache=False).logits
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
        y = out[0, -1].float().cpu().numpy()
        if not np.all(np.isfinite(y)):
            raise RuntimeError("non-finite logits")
        got[T] = (ids, y)
        save_logits(args, name, stamp, got)
        return {"seconds": dt, "argmax": int(np.argmax(y)), "fla": fla}

    for T in args.T:
        res.guard(lambda T=T: prefill(T), case="prefill", impl=impl, variant=variant, shape={"B": 1, "T": T})
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- compare


def compare(args, res: Results):
    for T in args.T:
        errs = {}
        for a, b in PAIRS:
            def one(a=a, b=b, T=T, errs=errs):
                (sa, ia, x), (sb, ib, ref) = load_logits(args, a, T), load_logits(args, b, T)
                if sa != sb or not np.array_equal(ia, ib):
                    raise RuntimeError(f"{a} and {b} come from different checkpoints or prompts (stale?)")
                errs[(a, b)] = e = rel_err(x, ref)
                return {"rel_err": e, "same_argmax": bool(np.argmax(x) == np.argmax(ref)),
                        "argmax": int(np.argmax(x)), "ref_argmax": int(np.argmax(ref))}

            impl, variant = LOGITS[a]
            res.guard(one, case="numerics", impl=impl, variant=f"{variant} vs {' '.join(LOGITS[b])}",
                      pair=f"{a} vs {b}", shape={"B": 1, "T": T})
        ours, hf = errs.get(PAIRS[0]), errs.get(PAIRS[1])
        row = {"case": "bound", "impl": "k3", "shape": {"B": 1, "T": T},
               "variant": "ours bf16 err <= transformers bf16 err (vs transformers f32)",
               "ours_bf16_err": ours, "transformers_bf16_err": hf,
               "ratio": ours / hf if ours is not None and hf else None}
        if ours is None or hf is None:
            res.failed("an error the bound needs is missing (see the numerics rows)", **row)
        elif ours <= hf:
            res.add(**row)
        else:
            res.failed(f"ours {ours:.3e} > transformers bf16 {hf:.3e}", **row)


# ---------------------------------------------------------------- driver


def side(args):
    res = Results("checkpoint-numerics-side")
    try:
        if args.side == "ours":
            ours_side(args, res)
        else:
            hf_side(args, res, args.side)
    except Exception as e:  # the reason, in the results (the parent adds the rows this left out)
        res.failed(f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}", case="setup",
                   impl=args.side, variant="", shape={})
        raise
    finally:
        Path(args.rows).write_text(json.dumps(res.rows, default=str))


def expected_rows(side_name: str, args) -> list[dict]:
    rows = []
    for name in SIDES[side_name]:
        impl, variant = LOGITS[name]
        rows += [{"case": "load", "impl": impl, "variant": variant, "shape": {}}]
        rows += [{"case": "prefill", "impl": impl, "variant": variant, "shape": {"B": 1, "T": T}}
                 for T in args.T]
    return rows


def row_key(r: dict) -> tuple:
    return r["case"], r["impl"], r["variant"], json.dumps(r["shape"], sort_keys=True)


def side_env(side_name: str, args) -> dict:
    """fla on the path of the bf16 side only: the f32 reference runs
    transformers' own torch kernels."""
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if side_name == "hf-f32":
        paths = [p for p in paths if not (Path(p) / "fla").is_dir()]
    elif side_name == "hf-bf16" and args.fla and Path(args.fla).is_file():
        if not (FLA_DIR / "fla").is_dir():
            FLA_DIR.mkdir(parents=True, exist_ok=True)
            with tarfile.open(args.fla) as t:
                t.extractall(FLA_DIR)
        paths.insert(0, str(FLA_DIR))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run(args) -> int:
    t_start = time.monotonic()
    stages = args.stages.split(",")
    if set(stages) - set(STAGES):
        sys.exit(f"unknown stages {sorted(set(stages) - set(STAGES))}; stages: {','.join(STAGES)}")
    prepared = json.loads((Path(args.out) / "prepared.json").read_text())
    res = Results("checkpoint-numerics")
    Path(args.work).mkdir(parents=True, exist_ok=True)
    if "checkpoint" in stages:
        res.guard(lambda: write_checkpoint(args), case="checkpoint", impl="make_checkpoint",
                  variant=f"{args.names} names, seed {args.seed}", shape={"config": prepared["config"]})
        res.write()
    for side_name in [s for s in SIDES if s in stages]:
        left = args.budget_s - (time.monotonic() - t_start)
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            rows_path = Path(f.name)
        rows_path.write_text("[]")
        why = ""
        if left < 60:
            why = (f"not started: under 60 s of the {args.budget_s} s budget left; "
                   f"rerun --stages {side_name},compare")
        else:
            cmd = [sys.executable, __file__, "side", side_name, "--rows", str(rows_path), "--out", args.out,
                   "--work", args.work, "--device", args.device, "--T", ",".join(map(str, args.T))]
            print("+", " ".join(cmd), flush=True)
            limit = min(args.side_timeout, left - 20)
            try:
                p = subprocess.run(cmd, check=False, timeout=limit, env=side_env(side_name, args))
                why = f"the {side_name} process ended with exit status {p.returncode}" if p.returncode else ""
            except subprocess.TimeoutExpired:
                why = f"the {side_name} process timed out after {limit:.0f} s"
        got = json.loads(rows_path.read_text() or "[]")
        rows_path.unlink()
        res.rows.extend(got)
        have = {row_key(r) for r in got}
        for r in expected_rows(side_name, args):
            if row_key(r) not in have:
                res.failed(f"no result: {why or 'row missing'}", **r)
        res.write()
    if "compare" in stages:
        compare(args, res)
        res.write()
    return 1 if res.failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--config", default=str(CONFIG))
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--target", default="cuda", help="cpu for the test (test/e2e/test_checkpoint_numerics.py)")
    p.add_argument("--max-tokens", type=int, default=max(PROMPT_T))
    for name in ("run", "side"):
        p = sub.add_parser(name)
        if name == "side":
            p.add_argument("side", choices=list(SIDES))
            p.add_argument("--rows", required=True)
        else:
            p.add_argument("--stages", default=",".join(STAGES))
            p.add_argument("--names", choices=["hub", "transformers"], default="transformers")
            p.add_argument("--seed", type=int, default=0)
            p.add_argument("--shard-gb", type=float, default=5.0)
            p.add_argument("--fla", default=str(FLA_TGZ), help="fla's package (tgz) for the bf16 side")
            p.add_argument("--side-timeout", type=int, default=400)
            p.add_argument("--budget-s", type=int, default=570)
        p.add_argument("--out", default=str(OUT))
        p.add_argument("--work", default=str(WORK))
        p.add_argument("--device", default="cuda:0")
        p.add_argument("--T", type=lambda s: [int(x) for x in s.split(",")], default=PROMPT_T)
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args)
    elif args.cmd == "side":
        side(args)
    else:
        sys.exit(run(args))


if __name__ == "__main__":
    main()
