"""The per-GPU plan of a model split over ranks (issue 19; docs/scaling.md).

    python -m k3.plan examples/configs/kimi-k3.json --gpus 8,16,32

For each GPU count N and each split (TP ranks for attention and the dense
projections, EP = N ranks for the routed experts, N / TP attention
replicas) it prints, per GPU: the weights (routed experts as stored, MXFP4
or bf16, and as bf16), the KDA state per sequence, the MLA latent cache per
token, the activation arena (given, or with --arena-from-compile the
compiler's own plan of each TP's rank), and the largest batch at a few
contexts and the largest context of one sequence that fit in the GPU's
memory; and the collective bytes per token of the split.

The weights are the compiler's own: `k3-import` then `k3-opt
--k3-inline-layers` (every layer's weights under their checkpoint names),
so the single-GPU total is the one `k3-compile report=1` prints. How each
weight splits follows Megatron and vLLM: heads and the projections into
them (and the vocabulary) by TP, the projections out of them by TP along
their input, routed expert stacks by EP, everything else (norms, the
router, the low-rank and latent projections) replicated. MLA's latent cache
has no head dimension, so every TP rank keeps all of it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# How a weight splits, by the end of its checkpoint name.
TP_ROWS = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "g_proj.weight", "f_b_proj.weight",
           "b_proj.weight", "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight", "dt_bias",
           "q_b_proj.weight", "kv_b_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
           "shared_experts.gate_proj.weight", "shared_experts.up_proj.weight", "lm_head.weight",
           "embed_tokens.weight")
TP_COLUMNS = ("o_proj.weight", "mlp.down_proj.weight", "shared_experts.down_proj.weight")
EXPERTS = ".{expert}."

ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "f4E2M1FN": 0.5}
WEIGHT_RE = re.compile(r'k3\.weight "([^"]+)" : tensor<([^>]+)>')


@dataclass
class Weight:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    def stored_bytes(self) -> int:
        if self.dtype == "f4E2M1FN":  # E2M1 codes, two a byte, one E8M0 scale per 32
            return self.elements // 2 + self.elements // 32
        return self.elements * ELEMENT_BYTES[self.dtype]

    def split(self) -> str:
        if EXPERTS in self.name:
            return "ep"
        if self.name.endswith(TP_ROWS):
            return "tp_rows"
        if self.name.endswith(TP_COLUMNS):
            return "tp_columns"
        return "replicated"


class PlanError(Exception):
    pass


def parse_weights(mlir_text: str) -> list[Weight]:
    out = []
    for name, ty in WEIGHT_RE.findall(mlir_text):
        *dims, dtype = ty.split("x")
        out.append(Weight(name, tuple(int(d) for d in dims), dtype))
    if not out:
        raise PlanError("no k3.weight in the inlined model")
    return out


ARENA_RE = re.compile(r"k3-plan-memory: \d+ activation buffers, arena (\d+) bytes")


def compiled_arena(config: Path, bin_dir: Path, tp: int, max_tokens: int, max_seqs: int) -> int:
    """The activation arena of one rank, as `k3-compile target=cuda tp=TP
    report=1` plans it under the bf16 policy (the largest of its entries').
    EP is left out (CUDA refuses it until the MoE kernels skip other ranks'
    experts): its form 1 sizes each rank's MoE buffers by tokens x top-k,
    as without it; the CPU target plans the full K3 at ep = 16 with the
    arena of ep = 1
    (bench/results/compile-reports/kimi-k3-mxfp4-ep16-report-20261205.txt)."""
    with tempfile.TemporaryDirectory() as d:
        imported = Path(d) / "model.mlir"
        opts = (f"target=cuda output={Path(d) / 'm.k3bin'} max-tokens={max_tokens} "
                f"max-seqs={max_seqs} activation-dtype=bf16 report=1" + (f" tp={tp}" if tp > 1 else ""))
        for cmd in ([str(bin_dir / "k3-import"), str(config), "-o", str(imported)],
                    [str(bin_dir / "k3-opt"), str(imported), f"--k3-compile={opts}", "-o", os.devnull]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise PlanError(f"{Path(cmd[0]).name} failed: {r.stderr.strip()[-400:]}")
        arenas = [int(a) for a in ARENA_RE.findall(r.stderr)]
        if not arenas:
            raise PlanError(f"k3-compile tp={tp} report=1 printed no arena")
        return max(arenas)


def model_weights(config: Path, bin_dir: Path) -> list[Weight]:
    with tempfile.TemporaryDirectory() as d:
        imported = Path(d) / "model.mlir"
        for cmd in ([str(bin_dir / "k3-import"), str(config), "-o", str(imported)],
                    [str(bin_dir / "k3-opt"), str(imported), "--k3-inline-layers", "-o",
                     str(imported.with_suffix(".inl.mlir"))]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise PlanError(f"{Path(cmd[0]).name} failed: {r.stderr.strip()}")
        return parse_weights(imported.with_suffix(".inl.mlir").read_text())


def per_gpu_weight_bytes(weights: list[Weight], tp: int, ep: int, experts_as_bf16=False) -> int:
    total = 0
    for w in weights:
        kind = w.split()
        n = w.elements * 2 if (kind == "ep" and experts_as_bf16) else w.stored_bytes()
        parts = {"ep": ep, "tp_rows": tp, "tp_columns": tp}.get(kind, 1)
        dim = {"ep": 0, "tp_rows": 0, "tp_columns": 1}.get(kind)
        if parts > 1 and w.shape[dim] % parts:
            raise PlanError(f"{w.name} {list(w.shape)}: dimension {dim} does not split over {parts} ranks")
        total += n // parts
    return total


@dataclass
class Decoder:
    """The state-carrying parts of the text config."""
    hidden: int
    kda_layers: int
    kda_heads: int
    kda_head_dim: int
    conv_kernel: int
    mla_layers: int
    latent_width: int  # kv_lora_rank + qk_rope_head_dim
    moe_layers: int
    top_k: int
    routed_hidden: int
    layers: int
    max_positions: int

    @staticmethod
    def from_config(cfg: dict) -> "Decoder":
        t = cfg.get("text_config", cfg)
        lin = t.get("linear_attn_config") or {}
        kda = len(lin.get("kda_layers", []))
        layers = t["num_hidden_layers"]
        dense = t.get("first_k_dense_replace", 0)
        return Decoder(hidden=t["hidden_size"], kda_layers=kda, kda_heads=lin.get("num_heads", 0),
                       kda_head_dim=lin.get("head_dim", 0),
                       conv_kernel=lin.get("short_conv_kernel_size", 4), mla_layers=layers - kda,
                       latent_width=t["kv_lora_rank"] + t["qk_rope_head_dim"],
                       moe_layers=layers - dense if t.get("num_experts") else 0,
                       top_k=t.get("num_experts_per_token", 0),
                       routed_hidden=t.get("routed_expert_hidden_size") or t["hidden_size"],
                       layers=layers, max_positions=t.get("max_position_embeddings", 1 << 20))

    def kda_state_bytes(self, tp: int) -> int:
        """Per sequence and GPU: the f32 recurrent state [H/tp, dk, dv] and
        the f32 q, k, v convolution windows (kernel - 1 tokens) of each KDA
        layer, as the runtime keeps them."""
        heads = self.kda_heads // tp
        recurrent = heads * self.kda_head_dim * self.kda_head_dim * 4
        conv = 3 * heads * self.kda_head_dim * (self.conv_kernel - 1) * 4
        return self.kda_layers * (recurrent + conv)

    def cache_bytes_per_token(self, element_bytes: int) -> int:
        """Per token and GPU: c_kv and k_pe of each MLA layer (no head
        dimension: every TP rank keeps all of it)."""
        return self.mla_layers * self.latent_width * element_bytes

    def collective_bytes_per_token(self, tp: int, ep: int) -> dict:
        """Bytes each GPU sends per token of a forward pass (bf16): a ring
        all-reduce of the hidden state after attention and after the MLP of
        every layer (2 (tp - 1) / tp of it), and EP's dispatch and combine
        of each routed row that leaves the GPU ((ep - 1) / ep of top_k)."""
        allreduce = 2 * self.layers * self.hidden * 2 * 2 * (tp - 1) / tp if tp > 1 else 0.0
        alltoall = 2 * self.moe_layers * self.top_k * self.routed_hidden * 2 * (ep - 1) / ep
        return {"tp_all_reduce": allreduce, "ep_all_to_all": alltoall}


def splits(n: int) -> list[tuple[int, int]]:
    """(tp, ep) for n GPUs: experts over all of them, attention TP a power
    of two up to 8 (one NVLink node) dividing n."""
    return [(tp, n) for tp in (1, 2, 4, 8) if n % tp == 0]


def plan_rows(weights, dec: Decoder, gpus: list[int], memory: float, arena,
              cache_element_bytes: int, contexts: list[int]) -> list[dict]:
    """``arena``: bytes per GPU, or a function of the split's TP giving them."""
    rows = []
    for n in gpus:
        for tp, ep in splits(n):
            arena_bytes = arena(tp) if callable(arena) else arena
            stored = per_gpu_weight_bytes(weights, tp, ep)
            bf16 = per_gpu_weight_bytes(weights, tp, ep, experts_as_bf16=True)
            state = dec.kda_state_bytes(tp)
            cache = dec.cache_bytes_per_token(cache_element_bytes)
            free = memory - stored - arena_bytes
            row = {"gpus": n, "tp": tp, "ep": ep, "weights": stored, "weights_bf16_experts": bf16,
                   "kda_state_per_seq": state, "cache_per_token": cache, "arena": arena_bytes,
                   "free": free, **dec.collective_bytes_per_token(tp, ep)}
            for c in contexts:
                row[f"max_batch_at_{c}"] = max(0, int(free // (state + c * cache))) if free > 0 else 0
            row["max_context_b1"] = (min(dec.max_positions, int((free - state) // cache))
                                     if free > state and cache else 0)
            rows.append(row)
    return rows


def gb(x: float) -> str:
    return f"{x / 1e9:,.1f}"


def render(rows: list[dict], contexts: list[int]) -> str:
    head = ["GPUs", "TP", "EP", "weights GB (as stored)", "weights GB (bf16 experts)",
            "arena GB", "KDA state MB/seq", "MLA cache KB/token", "free GB"]
    head += [f"max batch @ {c // 1024}k" for c in contexts]
    head += ["max context (B 1)", "TP all-reduce KB/token", "EP all-to-all KB/token"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r["gpus"], r["tp"], r["ep"], gb(r["weights"]), gb(r["weights_bf16_experts"]),
                 gb(r["arena"]), f"{r['kda_state_per_seq'] / 1e6:.1f}", f"{r['cache_per_token'] / 1e3:.1f}",
                 gb(r["free"]) if r["free"] > 0 else "does not fit"]
        cells += [r[f"max_batch_at_{c}"] for c in contexts]
        cells += [f"{r['max_context_b1']:,}", f"{r['tp_all_reduce'] / 1e3:.1f}",
                  f"{r['ep_all_to_all'] / 1e3:.1f}"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m k3.plan", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", type=Path, help="the model's config.json")
    ap.add_argument("--gpus", default="8,16,32", help="GPU counts (default 8,16,32)")
    ap.add_argument("--memory-gb", type=float, default=141.0, help="memory of one GPU (H200: 141)")
    ap.add_argument("--arena-gb", type=float, default=0.0,
                    help="activation arena per GPU (k3-compile report=1 prints it for one device)")
    ap.add_argument("--arena-from-compile", metavar="TOKENS,SEQS",
                    help="take each TP's arena from k3-compile target=cuda tp=TP report=1 at this "
                         "many tokens and sequences (a compile of the model per TP)")
    ap.add_argument("--cache-bytes", type=int, default=2,
                    help="bytes per latent cache element: 2 under the bf16 policy "
                         "(activation-dtype=bf16 keeps the cache bf16), 4 under f32")
    ap.add_argument("--contexts", default="4096,32768,131072")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--bin-dir", type=Path, default=Path(os.environ.get("K3_BIN_DIR", "build/bin")))
    a = ap.parse_args(argv)
    try:
        gpus = [int(g) for g in a.gpus.split(",")]
        contexts = [int(c) for c in a.contexts.split(",")]
        if any(g <= 0 for g in gpus) or any(c <= 0 for c in contexts):
            raise ValueError("GPU counts and contexts must be positive")
        cfg = json.loads(a.config.read_text())
        weights = model_weights(a.config, a.bin_dir)
        arena = int(a.arena_gb * 1e9)
        if a.arena_from_compile:
            tokens, seqs = (int(v) for v in a.arena_from_compile.split(","))
            cache: dict[int, int] = {}

            def arena(tp: int) -> int:
                if tp not in cache:
                    cache[tp] = compiled_arena(a.config, a.bin_dir, tp, tokens, seqs)
                return cache[tp]
        rows = plan_rows(weights, Decoder.from_config(cfg), gpus, a.memory_gb * 1e9,
                         arena, a.cache_bytes, contexts)
    except (OSError, ValueError, KeyError, PlanError) as e:
        print(f"k3.plan: {a.config}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(rows, indent=1) if a.json else render(rows, contexts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
