"""The ``k3`` command (installed by ``pip install ./python``).

    k3 run DIR --prompt "text"          # text in, text out, then tok/s on stderr
    k3 run model.k3bin --random-weights 7 --tokenizer TOKDIR --prompt "text"
    k3 compile DIR|config.json|model.mlir -o model.k3bin [--max-tokens N] [--max-seqs N]
    k3 import DIR|config.json -o model.mlir
    k3 bench DIR|model.k3bin [--random-weights S] [--prompt-tokens N] [--new-tokens N] [--batch N]

Errors are one line on stderr (``k3: error: ...``), exit status 1; usage
errors exit with 2.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np


def _sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling (default: greedy)")
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--stop-token", type=int, action="append", default=[],
                   help="stop after this token id (repeatable)")
    g.add_argument("--stop", action="append", default=[],
                   help="stop before this text (repeatable)")
    g.add_argument("--ignore-eos", action="store_true")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="checkpoint directory, .k3bin, .mlir or config.json")
    p.add_argument("--device", default="cpu")
    p.add_argument("--weights", help="safetensors file, index or directory (default: the "
                   "checkpoint directory)")
    p.add_argument("--random-weights", type=int, metavar="SEED")
    p.add_argument("--tokenizer", help="tokenizer directory or file (default: the checkpoint "
                   "directory's)")
    p.add_argument("--max-tokens", type=int, default=4096, help="compile for this many tokens "
                   "per call")
    p.add_argument("--max-seqs", type=int, default=16)
    p.add_argument("--no-progress", action="store_true")


def _load(a: argparse.Namespace, need_tokenizer: bool):
    import k3
    if not Path(a.model).exists():
        raise k3.K3Error(f"{a.model}: no such model file or checkpoint directory", "IO", 2)
    tok = None
    if a.tokenizer:
        tok = k3.load_tokenizer(a.tokenizer)
    elif need_tokenizer:
        model = Path(a.model)
        d = model if model.is_dir() else model.parent
        if not any((d / f).is_file() for f in ("tokenizer.json", "tiktoken.model")):
            raise k3.K3Error(f"{d}: no tokenizer.json or tiktoken.model; pass --tokenizer "
                             "or give token ids with --ids", "IO", 2)
        tok = k3.load_tokenizer(d)
    return k3.load(a.model, device=a.device, max_tokens=a.max_tokens, max_seqs=a.max_seqs,
                   tokenizer=tok if tok is not None else False,
                   random_weights=a.random_weights, weights=a.weights,
                   progress=False if a.no_progress else None)


def _ids(text: str) -> list[int]:
    out = []
    for x in text.replace(",", " ").split():
        try:
            out.append(int(x))
        except ValueError:
            raise SystemExit(f"k3: usage error: --ids: '{x}' is not an integer token id")
    return out


def cmd_run(a: argparse.Namespace) -> int:
    if (a.prompt is None) == (a.ids is None):
        raise SystemExit("k3: usage error: give --prompt TEXT or --ids 1,2,3")
    s = _load(a, need_tokenizer=a.prompt is not None or bool(a.stop))
    prompt = a.prompt if a.prompt is not None else _ids(a.ids)
    t0 = time.perf_counter()
    pieces = s.generate(prompt, a.max_new_tokens, temperature=a.temperature, top_k=a.top_k,
                        top_p=a.top_p, min_p=a.min_p, repetition_penalty=a.repetition_penalty,
                        seed=a.seed, stop_token_ids=a.stop_token, stop=a.stop or None,
                        ignore_eos=a.ignore_eos, chat=a.chat, stream=True)
    ids_mode = a.prompt is None
    first = True
    for piece in pieces:
        if ids_mode:
            sys.stdout.write(("" if first else ",") + str(piece))
        else:
            sys.stdout.write(piece)
        first = False
        sys.stdout.flush()
    sys.stdout.write("\n")
    wall = time.perf_counter() - t0
    g = s.last_generation
    print(f"k3: {g.generated_tokens} tokens ({g.finish_reasons[0]}); prefill "
          f"{sum(g.prompt_tokens)} tokens {g.prefill_tokens_per_s:.1f} tok/s; decode "
          f"{g.decode_tokens_per_s:.1f} tok/s; {g.generated_tokens / wall:.1f} tok/s overall "
          f"on {s.device}", file=sys.stderr)
    return 0


def cmd_compile(a: argparse.Namespace) -> int:
    import k3
    art = k3.compile(a.model, a.output, max_tokens=a.max_tokens, max_seqs=a.max_seqs,
                     target=a.target, options=a.options or "", report=a.report,
                     progress=False if a.no_progress else None)
    print(f"{art.path}: {art.metadata.get('model_name')} entries {list(art.entries)}, "
          f"{len(art.weights)} weights, max_tokens {art.max_tokens}, max_seqs {art.max_seqs}")
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    import k3
    extra = []
    if a.max_context:
        extra += ["--max-context", str(a.max_context)]
    if a.name:
        extra += ["--name", a.name]
    out = k3.import_config(a.config, a.output, extra)
    print(out)
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    s = _load(a, need_tokenizer=False)
    vocab = s.artifact.vocab_size or 2
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, vocab, a.prompt_tokens).tolist() for _ in range(a.batch)]
    s.generate(prompts if a.batch > 1 else prompts[0], 2, ignore_eos=True)  # warm-up
    t0 = time.perf_counter()
    s.generate(prompts if a.batch > 1 else prompts[0], a.new_tokens, ignore_eos=True)
    wall = time.perf_counter() - t0
    g = s.last_generation
    print(f"{Path(a.model).name} on {s.device}: batch {a.batch}, prompt {a.prompt_tokens}, "
          f"{a.new_tokens} new tokens per sequence")
    print(f"prefill: {sum(g.prompt_tokens)} tokens in {g.prefill_ms:.2f} ms "
          f"({g.prefill_tokens_per_s:.1f} tok/s)")
    print(f"decode: {g.decode_steps} steps in {g.decode_ms:.2f} ms "
          f"({g.decode_tokens_per_s:.1f} tok/s)")
    print(f"total: {g.generated_tokens} tokens in {wall * 1e3:.1f} ms")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="k3", description="K3: compile and run Kimi-style "
                                "hybrid models (docs/python.md)")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="generate text (or ids) from a prompt")
    _model_args(r)
    r.add_argument("--prompt", help="prompt text (needs a tokenizer)")
    r.add_argument("--ids", help="prompt token ids, comma separated")
    r.add_argument("--chat", action="store_true", help="apply the chat template")
    r.add_argument("--max-new-tokens", type=int, default=64)
    _sampling_args(r)
    r.set_defaults(fn=cmd_run)
    c = sub.add_parser("compile", help="compile a checkpoint directory, config or .mlir")
    c.add_argument("model")
    c.add_argument("-o", "--output", required=True)
    c.add_argument("--max-tokens", type=int, default=4096)
    c.add_argument("--max-seqs", type=int, default=16)
    c.add_argument("--target", help="cpu or cuda")
    c.add_argument("--options", help="more --k3-compile options")
    c.add_argument("--report", action="store_true")
    c.add_argument("--no-progress", action="store_true")
    c.set_defaults(fn=cmd_compile)
    i = sub.add_parser("import", help="Hugging Face config.json / checkpoint dir to K3 IR")
    i.add_argument("config")
    i.add_argument("-o", "--output", required=True)
    i.add_argument("--max-context", type=int)
    i.add_argument("--name")
    i.set_defaults(fn=cmd_import)
    b = sub.add_parser("bench", help="prefill and decode tokens/s")
    _model_args(b)
    b.add_argument("--prompt-tokens", type=int, default=32)
    b.add_argument("--new-tokens", type=int, default=32)
    b.add_argument("--batch", type=int, default=1)
    b.set_defaults(fn=cmd_bench)
    a = p.parse_args(argv)
    import k3
    try:
        return a.fn(a)
    except k3.K3Error as e:
        print(f"k3: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
