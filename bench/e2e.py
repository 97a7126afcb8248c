"""The whole model beside transformers (issue 17): prefill and decode of
Kimi-Linear-48B-A3B (27 layers, hidden 2304, 256 experts top-8) on one GPU,
ours (compiled for CUDA, bf16 activations) and transformers'
`KimiLinearForCausalLM` in bf16 (fla's kernels where it finds them), each
with its weights seeded on the device (98 GB in bf16: the GPU machine's disk
cannot hold a checkpoint).

    # here: import and compile the two artifacts into out/e2e/
    .venv/bin/python bench/e2e.py prepare [--config bench/configs/kimi-linear-48b.json]
    # there (torch, transformers; carry build/bin, build/runtime, python, out/e2e):
    python3 bench/e2e.py run [--stages ours,transformers]

`prepare --config bench/configs/kimi-linear-48b-cut4.json --out out/e2e-cut4`
and `run --out out/e2e-cut4` do the same on the 4-layer cut (3 KDA + 1 MLA,
13 GB: one H100 holds it and transformers' model), tagged
kimi-linear-48b-cut4.

Two artifacts, because one plan cannot hold both on one H200: a prefill
artifact (max-tokens 32768, one sequence, context 34816) and a decode
artifact (64 sequences, context 1024): the MLA latent cache is sized by
sequences x context. Each side runs in its own process (both models do
not fit at once); the parent writes one JSON, bench/results/e2e-*.json,
after each side, so a side that crashes or runs out of time is a FAILED
row, never a missing one.

Rows:
* prefill, T in {1024, 8192, 32768}, one sequence, logits of the last token
  only (ours: the default `logits=last`; transformers: `logits_to_keep=1`):
  median/min/max ms (CUDA events, >= 20 runs after warm-up), tokens/s; the
  time to first token is this time (the prefill ends with the first token).
* decode, B in {1, 8, 64} sequences after prompts of 128 tokens: one greedy
  step for all B sequences (ours: the decode entry, replayed from a CUDA
  graph; transformers: one forward with its cache), ms and tokens/s, beside
  the memory ceiling at B = 1: the GPU's copy rate (a device-to-device copy
  timed first in the same run; ANCHORS.md's 4.25 TB/s on the H200, used if
  torch cannot measure it) over the bytes one step must read
  (weights but the routed experts, 8 routed experts per MoE layer, one
  embedding row, the LM head, KDA and convolution states read and written,
  the latent cache of the context).
* Checks before timing. The f32-activation artifact (the path checked
  against the f64 oracle on smaller models) at T = 1024: the prefill of T
  tokens against the prefill of T - 1 continued by one decode step (the
  same last-token logits through the two entries and the kept state: KDA,
  convolution, latent cache), normwise, bound 1e-3. The bf16 prefill at
  T = 1024 reports its distance to those f32 logits and whether the greedy
  token agrees (27 random layers amplify bf16 rounding and flip MoE routes:
  the prefill-vs-decode distance in bf16 was 0.36,
  bench/results/e2e-kimi-linear-48b-nvidia-h200-20261202T115034Z.json).
  Every row checks that its logits are finite. The numerics of both sides
  against an f32 reference on shared weights are a separate check (not in
  this script).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from protocol import REPS, Results, rel_err, summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "e2e"
BIN = Path(os.environ.get("K3_BIN_DIR", ROOT / "build" / "bin"))
PREFILL_T = [1024, 8192, 32768]
DECODE_B = [1, 8, 64]
PROMPT = 128
SEED = 1
HBM_TBPS = 4.25  # H200 HBM3e, ANCHORS.md: the ceiling if the copy is not measured
COPY_GB = 2.0  # each of the copy's two buffers
F32_CONSISTENCY_BOUND = 1e-3
PREFILL = dict(max_tokens=32768, max_seqs=1, max_context=34816)
DECODE = dict(max_tokens=8192, max_seqs=64, max_context=1024)


CHECK = dict(max_tokens=1024, max_seqs=1, max_context=1024)


def artifacts(out: Path) -> dict:
    return {"prefill": out / "kl48b-prefill.k3bin", "decode": out / "kl48b-decode.k3bin",
            "check": out / "kl48b-check-f32.k3bin"}


def prepare(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    arts = artifacts(out)
    for kind, plan, dtype in (("prefill", PREFILL, "bf16"), ("decode", DECODE, "bf16"), ("check", CHECK, "f32")):
        mlir = out / f"kl48b-{kind}.mlir"
        subprocess.run([str(BIN / "k3-import"), args.config, "--max-context", str(plan["max_context"]),
                        "-o", str(mlir)], check=True)
        subprocess.run([str(BIN / "k3-opt"), str(mlir),
                        f"--k3-compile=target=cuda output={arts[kind]} max-tokens={plan['max_tokens']} "
                        f"max-seqs={plan['max_seqs']} activation-dtype={dtype}", "-o", os.devnull], check=True)
        mlir.unlink()
    # A small model of the same layer kinds for the weight-init check.
    mlir = out / "init-check.mlir"
    subprocess.run([str(BIN / "k3-import"), str(ROOT / "bench/configs/kl-scaled-e16.json"),
                    "--max-context", "256", "-o", str(mlir)], check=True)
    subprocess.run([str(BIN / "k3-opt"), str(mlir),
                    f"--k3-compile=target=cuda output={out / 'init-check.k3bin'} max-tokens=256 max-seqs=1 "
                    "activation-dtype=bf16", "-o", os.devnull], check=True)
    mlir.unlink()
    (out / "config.json").write_text(Path(args.config).read_text())
    print(f"prepared {out}: " + ", ".join(f"{p.name} {p.stat().st_size / 1e6:.1f} MB" for p in arts.values()))


# ---------------------------------------------------------------- ours


DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4}


def weight_bytes(w) -> int:
    return int(np.prod(w.shape, dtype=np.int64)) * DTYPE_BYTES[w.dtype]


def decode_bytes(art, context: int) -> int:
    """Bytes one decode step of one sequence reads: every weight but the
    routed experts (of which 8 per MoE layer) and the embedding table (one
    row), the states read and written, the latent cache over `context`."""
    cfg = json.loads((Path(art.path).parent / "config.json").read_text())
    k = cfg.get("num_experts_per_token", 8)
    total = 0
    for w in art.weights:
        n = weight_bytes(w)
        if "{expert}" in w.name:
            total += n * k // w.shape[0]
        elif w.name.endswith("embed_tokens.weight"):
            total += n // w.shape[0]
        else:
            total += n
    states = art.state_buffers()
    per_seq = sum(b.per_seq_stride for b in states if not b.name.endswith("latent_cache"))
    cache_tok = sum(b.per_seq_stride for b in states if b.name.endswith("latent_cache")) // max(
        1, int(art.metadata.get("max_seq_len", "1")))
    return total + 2 * per_seq + context * cache_tok


def prefill_inputs(ids):
    return dict(token_ids=np.asarray(ids, np.int32), cu_seqlens=np.array([0, len(ids)], np.int32),
                context_lens=np.array([0], np.int32))


def init_check(k3, path: Path, device: str) -> dict:
    """Logits of a small model with weights made by the weight-init kernels
    and by the host generator: the same values but for libdevice's f64 log
    and cos, within an ulp of libm's, which rounding to bf16 hides almost
    always."""
    art = k3.Artifact(path)
    ids = np.random.default_rng(1).integers(0, art.vocab_size, 64)
    got = {}
    for place in ("host", "device"):
        os.environ["K3_RANDOM_WEIGHTS"] = place
        s = k3.Session(art, device=device)
        t0 = time.perf_counter()
        made = s.random_weights(SEED)
        got[place] = (s.run("forward", **prefill_inputs(ids))["logits"], made, time.perf_counter() - t0)
        s.close()
    del os.environ["K3_RANDOM_WEIGHTS"]
    (host, made_h, t_h), (dev, made_d, t_d) = got["host"], got["device"]
    if made_d != "device kernels":
        raise RuntimeError(f"K3_RANDOM_WEIGHTS=device made them by {made_d}")
    err = rel_err(dev, host)
    if not err <= 1e-3:
        raise RuntimeError(f"logits from device-made weights vs host-made: {err:.3e} > 1e-3")
    return {"err_vs_host_weights": err, "bitwise_equal_logits": bool(np.array_equal(dev, host)),
            "host_s": t_h, "device_s": t_d}


class Ours:
    """Our side: the checks, then the prefill and decode rows, one session
    (98 GB) at a time."""

    def __init__(self, args, res: Results):
        import k3
        self.k3, self.args, self.res = k3, args, res
        self.arts = artifacts(Path(args.out))
        self.session = None
        self.f32_ref = None  # f32-activation logits of the check's prompt

    def run(self):
        self.copy_tbps = HBM_TBPS
        self.res.guard(self.copy_ceiling, case="copy ceiling", impl="torch", variant="device-to-device copy",
                       shape={"GB": COPY_GB})
        check = Path(self.args.out) / "init-check.k3bin"
        if check.is_file():
            self.res.guard(lambda: init_check(self.k3, check, self.args.device), case="random weights check",
                           impl="k3", variant="device kernels vs host threads",
                           shape={"config": "kl-scaled-e16", "T": 64})
        art = self.k3.Artifact(self.arts["prefill"])
        if self.arts["check"].is_file():
            self.res.guard(lambda: self.consistency(art.vocab_size), case="prefill vs decode", impl="k3",
                           variant="f32 activations", shape={"B": 1, "T": CHECK["max_tokens"]})
        self.start(art, "prefill artifact")
        for T in self.args.prefill:
            self.res.guard(lambda T=T: self.prefill(T, art.vocab_size), case="prefill", impl="k3",
                           variant="bf16", shape={"B": 1, "T": T})
        dart = self.k3.Artifact(self.arts["decode"])
        self.start(dart, "decode artifact")
        tbps = self.copy_tbps
        ceiling = tbps * 1e12 / decode_bytes(dart, self.args.prompt)
        rng = np.random.default_rng(0)
        for B in self.args.decode:
            self.res.guard(lambda B=B: self.decode(B, dart.vocab_size, rng, ceiling), case="decode", impl="k3",
                           variant="bf16", shape={"B": B, "context": self.args.prompt})
        self.res.add(case="decode", impl="ceiling", variant=f"HBM copy {tbps:.2f} TB/s",
                     shape={"B": 1, "context": self.args.prompt}, tok_per_s=ceiling,
                     bytes_per_step=decode_bytes(dart, self.args.prompt))

    def copy_ceiling(self) -> dict:
        """This GPU's copy ceiling (bytes read + written per second of a
        device-to-device copy, as ANCHORS.md measured 4.25 TB/s on the
        H200), for the decode ceiling; its memory is released before our
        sessions allocate."""
        import torch
        from protocol import cuda_event_times
        n = int(COPY_GB * 1e9) // 2
        src = torch.empty(n, dtype=torch.bfloat16, device=self.args.device)
        dst = torch.empty_like(src)
        row = summary(cuda_event_times(lambda: dst.copy_(src), reps=self.args.reps))
        del src, dst
        torch.cuda.empty_cache()
        self.copy_tbps = 2 * n * 2 / (row["median_ms"] * 1e-3) / 1e12
        return dict(row, TBps=self.copy_tbps)

    def start(self, art, what: str):
        """A session on the artifact with the seeded weights (the previous
        one released first: both would not fit)."""
        if self.session is not None:
            self.session.close()
        self.session = None
        gc.collect()

        def make():
            self.session = self.k3.Session(art, device=self.args.device)
            t0 = time.perf_counter()
            place = self.session.random_weights(SEED)
            return {"seconds": time.perf_counter() - t0, "made_by": place}

        self.res.guard(make, case="random weights", impl="k3", variant=what,
                       shape={"weights_GB": round(sum(weight_bytes(w) for w in art.weights) / 1e9, 2)})

    def live(self):
        if self.session is None:
            raise RuntimeError("no session (random weights failed)")
        return self.session

    def consistency(self, vocab: int) -> dict:
        """f32 activations (the path checked against the f64 oracle on
        smaller models): prefill of T tokens against T - 1 tokens continued
        by one decode step through the kept state."""
        T = CHECK["max_tokens"]
        ids = np.random.default_rng(T).integers(0, vocab, T)
        c = self.k3.Session(self.k3.Artifact(self.arts["check"]), device=self.args.device)
        c.random_weights(SEED)
        full = c.run("forward", **prefill_inputs(ids))["logits"]
        c.reset_state()
        c.run("forward", **prefill_inputs(ids[:-1]))
        step = c.run("forward_decode", token_ids=np.array([ids[-1]], np.int32),
                     cu_seqlens=np.array([0, 1], np.int32), context_lens=np.array([T - 1], np.int32))["logits"]
        c.close()
        err = rel_err(step, full)
        if not err <= F32_CONSISTENCY_BOUND:
            raise RuntimeError(f"prefill of T vs prefill of T-1 + a decode step: {err:.3e} > "
                               f"{F32_CONSISTENCY_BOUND}")
        self.f32_ref = full
        return {"prefill_vs_decode_err": err, "same_greedy_token": bool(np.argmax(step) == np.argmax(full))}

    def prefill(self, T: int, vocab: int) -> dict:
        s = self.live()
        ids = np.random.default_rng(T).integers(0, vocab, T)  # the check's prompt at its T
        logits = s.run("forward", **prefill_inputs(ids))["logits"]
        if not np.all(np.isfinite(logits)):
            raise RuntimeError("non-finite logits")
        row = {}
        if T == CHECK["max_tokens"] and self.f32_ref is not None:
            row["err_vs_f32_activations"] = rel_err(logits, self.f32_ref)
            row["same_greedy_token_as_f32"] = bool(np.argmax(logits) == np.argmax(self.f32_ref))
        row.update(summary(s.time("forward", warmup=self.args.warmup, reps=self.args.reps,
                                    **prefill_inputs(ids))))
        row["tok_per_s"] = T / (row["median_ms"] / 1e3)
        row["ttft_ms"] = row["median_ms"]
        return row

    def decode(self, B: int, vocab: int, rng, ceiling: float) -> dict:
        """One greedy step of B sequences after prompts of `prompt` tokens,
        replayed from the launch graph."""
        s, P = self.live(), self.args.prompt
        s.reset_state()
        ids = rng.integers(0, vocab, B * P).astype(np.int32)
        first = s.run("forward", token_ids=ids, cu_seqlens=np.arange(B + 1, dtype=np.int32) * P,
                      context_lens=np.zeros(B, np.int32))["next_tokens"]
        step = dict(token_ids=np.asarray(first, np.int32), cu_seqlens=np.arange(B + 1, dtype=np.int32),
                    context_lens=np.full(B, P, np.int32))
        if not np.all(np.isfinite(s.run("forward_decode", **step)["logits"])):
            raise RuntimeError("non-finite decode logits")
        before = s.graph_stats
        row = summary(s.time("forward_decode", warmup=self.args.warmup, reps=self.args.reps, **step))
        row["tok_per_s"] = B / (row["median_ms"] / 1e3)
        row["launch_graph_replays"] = s.graph_stats[1] - before[1]
        if B == 1:
            row["ceiling_tok_per_s"] = ceiling
            row["share_of_ceiling"] = row["tok_per_s"] / ceiling
        return row


# ---------------------------------------------------------------- transformers


def hf_config(path: Path):
    from transformers import KimiLinearConfig
    raw = json.loads(path.read_text())
    kw = {k: v for k, v in raw.items() if k not in ("architectures", "model_type", "torch_dtype")}
    # The expert count has had several names in transformers' config.
    n = kw.pop("num_experts", 256)
    for name in ("num_experts", "n_routed_experts", "num_local_experts"):
        try:
            cfg = KimiLinearConfig(**kw, **{name: n})
            break
        except TypeError:
            continue
    return cfg


def hf_build(cfg):
    """transformers' model in bf16, built on the GPU (its init seeds the
    weights there): SDPA attention where the model takes it, else eager."""
    import torch
    from transformers import KimiLinearForCausalLM
    torch.manual_seed(SEED)
    model = None
    for impl in ("sdpa", "eager"):
        try:
            cfg._attn_implementation = impl
            torch.set_default_dtype(torch.bfloat16)
            with torch.device("cuda"):
                model = KimiLinearForCausalLM(cfg)
            break
        except (ValueError, NotImplementedError):
            continue
        finally:
            torch.set_default_dtype(torch.float32)
    if model is None:
        raise RuntimeError("KimiLinearForCausalLM refused both attention implementations")
    model.eval()
    torch.cuda.synchronize()
    return model


def hf_prefill(model, cfg, T: int, g, args) -> dict:
    import torch
    from protocol import cuda_event_times
    ids = torch.randint(0, cfg.vocab_size, (1, T), device="cuda", generator=g)
    with torch.inference_mode():
        logits = model(input_ids=ids, logits_to_keep=1, use_cache=False).logits
        if not torch.isfinite(logits).all():
            raise RuntimeError("non-finite logits")
        ms = cuda_event_times(lambda: model(input_ids=ids, logits_to_keep=1, use_cache=False),
                              warmup=args.warmup, reps=args.reps)
    row = summary(ms)
    row["tok_per_s"] = T / (row["median_ms"] / 1e3)
    row["ttft_ms"] = row["median_ms"]
    return row


def hf_decode(model, cfg, B: int, g, args) -> dict:
    """One greedy step of B sequences with transformers' cache, after
    prompts of `prompt` tokens (the cache grows by a token a step)."""
    import torch
    from protocol import cuda_event_times
    ids = torch.randint(0, cfg.vocab_size, (B, args.prompt), device="cuda", generator=g)
    with torch.inference_mode():
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        last = {}

        def step():
            nonlocal tok
            o = model(input_ids=tok, past_key_values=cache, use_cache=True)
            last["logits"] = o.logits
            tok = o.logits[:, -1].argmax(-1, keepdim=True)

        step()
        if not torch.isfinite(last["logits"]).all():
            raise RuntimeError("non-finite decode logits")
        ms = cuda_event_times(step, warmup=args.warmup, reps=args.reps)
    row = summary(ms)
    row["tok_per_s"] = B / (row["median_ms"] / 1e3)
    return row


def transformers_side(args, res: Results):
    import importlib.util

    import torch
    fla = importlib.util.find_spec("fla") is not None
    cfg = hf_config(Path(args.out) / "config.json")
    variant = "bf16" + (" + fla" if fla else " (no fla)")
    held = {}

    def build():
        t0 = time.perf_counter()
        held["model"] = hf_build(cfg)
        return {"seconds": time.perf_counter() - t0, "attn_implementation": cfg._attn_implementation,
                "fla": fla, "params_B": sum(p.numel() for p in held["model"].parameters()) / 1e9}

    def model():
        if "model" not in held:
            raise RuntimeError("no model")
        return held["model"]

    res.guard(build, case="random weights", impl="transformers", variant=variant, shape={})
    g = torch.Generator(device="cuda").manual_seed(0)
    for T in args.prefill:
        res.guard(lambda T=T: hf_prefill(model(), cfg, T, g, args), case="prefill", impl="transformers",
                  variant=variant, shape={"B": 1, "T": T})
        torch.cuda.empty_cache()
    for B in args.decode:
        res.guard(lambda B=B: hf_decode(model(), cfg, B, g, args), case="decode", impl="transformers",
                  variant=variant, shape={"B": B, "context": args.prompt})
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- driver


def side(args):
    res = Results("e2e-side")
    try:
        if args.side == "ours":
            Ours(args, res).run()
        else:
            transformers_side(args, res)
    finally:
        Path(args.rows).write_text(json.dumps(res.rows, default=str))


def expected_rows(side_name, args):
    impl = "k3" if side_name == "ours" else "transformers"
    rows = [dict(case="prefill", impl=impl, shape={"B": 1, "T": T}) for T in args.prefill]
    return rows + [dict(case="decode", impl=impl, shape={"B": B, "context": args.prompt})
                   for B in args.decode]


def model_tag(out: Path) -> str:
    """kimi-linear-48b for the full config, kimi-linear-48b-cut<L> for a cut
    of it (the prepared config.json's layer count)."""
    layers = json.loads((Path(out) / "config.json").read_text()).get("num_hidden_layers", 27)
    return "kimi-linear-48b" if layers == 27 else f"kimi-linear-48b-cut{layers}"


def run(args):
    res = Results("e2e", tag=model_tag(args.out))
    for side_name in args.stages.split(","):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            rows_path = f.name
        Path(rows_path).write_text("[]")
        cmd = [sys.executable, __file__, "side", side_name, "--rows", rows_path, "--out", args.out,
               "--device", args.device, "--reps", str(args.reps), "--warmup", str(args.warmup),
               "--prefill", ",".join(map(str, args.prefill)), "--decode", ",".join(map(str, args.decode)),
               "--prompt", str(args.prompt)]
        print("+", " ".join(cmd), flush=True)
        try:
            p = subprocess.run(cmd, timeout=args.side_timeout)
            why = f"exit status {p.returncode}" if p.returncode else ""
        except subprocess.TimeoutExpired:
            why = f"timed out after {args.side_timeout} s"
        got = json.loads(Path(rows_path).read_text() or "[]")
        res.rows.extend(got)
        have = {(r["case"], r["impl"], json.dumps(r["shape"], sort_keys=True)) for r in got}
        for r in expected_rows(side_name, args):
            if (r["case"], r["impl"], json.dumps(r["shape"], sort_keys=True)) not in have:
                res.failed(f"no result: the {side_name} process ended ({why or 'row missing'})", variant="",
                           **r)
        res.write()
    return 1 if res.failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--config", default=str(ROOT / "bench/configs/kimi-linear-48b.json"))
    p.add_argument("--out", default=str(OUT))
    for name in ("run", "side"):
        p = sub.add_parser(name)
        if name == "side":
            p.add_argument("side", choices=["ours", "transformers"])
            p.add_argument("--rows", required=True)
        else:
            p.add_argument("--stages", default="ours,transformers")
            p.add_argument("--side-timeout", type=int, default=280)
        p.add_argument("--out", default=str(OUT))
        p.add_argument("--device", default="cuda:0")
        p.add_argument("--reps", type=int, default=REPS)
        p.add_argument("--warmup", type=int, default=3)
        p.add_argument("--prefill", type=lambda s: [int(x) for x in s.split(",")], default=PREFILL_T)
        p.add_argument("--decode", type=lambda s: [int(x) for x in s.split(",")], default=DECODE_B)
        p.add_argument("--prompt", type=int, default=PROMPT)
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args)
    elif args.cmd == "side":
        side(args)
    else:
        sys.exit(run(args))


if __name__ == "__main__":
    main()
