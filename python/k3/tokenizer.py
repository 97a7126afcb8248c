"""Tokenizers for the text path (docs/python.md, "Text"): the runtime works on
token ids; this module turns text into ids and back.

* ``tokenizer.json`` (Hugging Face ``tokenizers``);
* ``tiktoken.model`` (Kimi's tokenizer: base64 token + rank per line) through
  ``tiktoken``, with the split pattern and the special tokens taken from
  ``tokenizer_config.json`` (``added_tokens_decoder``; ``pat_str`` when the
  file has one, else Kimi's pattern);
* the chat template (``tokenizer_config.json``'s ``chat_template``, or a
  ``chat_template.jinja`` file) rendered with jinja2 as transformers does.

``load_tokenizer(path)`` takes a checkpoint directory or one of the files.
"""
from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence, Union

from ._capi import K3Error

PathLike = Union[str, os.PathLike]

# Kimi's split pattern (tokenization_kimi.py): Han runs, words with their
# leading punctuation and English contractions, 1-3 digits, punctuation,
# newlines, spaces.
KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
NUM_RESERVED_SPECIAL_TOKENS = 256


def _token_text(v: Any) -> Optional[str]:
    """tokenizer_config.json spells a token as a string or {"content": ...}."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise K3Error(f"{path}: cannot read: {e}", "IO", 2) from e
    if not isinstance(data, dict):
        raise K3Error(f"{path}: expected a JSON object", "FORMAT", 3)
    return data


class Tokenizer:
    """Text <-> token ids, plus the special tokens and chat template of a
    checkpoint. Use ``load_tokenizer``."""

    def __init__(self, kind: str, impl: Any, config: dict, source: Path,
                 special: dict[str, int], chat_template: Optional[str] = None):
        self.kind = kind          # "tokenizers" or "tiktoken"
        self._impl = impl
        self.config = config
        self.source = source
        self.special_tokens = special   # text -> id
        self._special_ids = set(special.values())
        self.chat_template = chat_template
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))

    # -- vocabulary --------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        if self.kind == "tokenizers":
            return int(self._impl.get_vocab_size(with_added_tokens=True))
        return int(self._impl.n_vocab)

    def token_to_id(self, token: str) -> Optional[int]:
        if token in self.special_tokens:
            return self.special_tokens[token]
        if self.kind == "tokenizers":
            return self._impl.token_to_id(token)
        try:
            ids = self._impl.encode(token, allowed_special="all")
        except Exception:
            return None
        return ids[0] if len(ids) == 1 else None

    @property
    def bos_token_id(self) -> Optional[int]:
        return self.token_to_id(self.bos_token) if self.bos_token else None

    @property
    def eos_token_ids(self) -> list[int]:
        """Ids that end a generation: the eos token, and generation_config.json's
        eos_token_id (an int or a list) when the directory has one."""
        out: list[int] = []
        if self.eos_token:
            t = self.token_to_id(self.eos_token)
            if t is not None:
                out.append(t)
        gen = self.source.parent / "generation_config.json" if self.source.is_file() \
            else self.source / "generation_config.json"
        if gen.is_file():
            e = _read_json(gen).get("eos_token_id")
            for t in (e if isinstance(e, list) else [e]):
                if isinstance(t, int) and t not in out:
                    out.append(t)
        return out

    # -- encode / decode ---------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Ids of `text`; special-token spellings in the text become their ids.
        ``add_special_tokens`` prepends the bos token when there is one."""
        if not isinstance(text, str):
            raise K3Error(f"encode: expected a str, got {type(text).__name__}")
        if self.kind == "tokenizers":
            ids = list(self._impl.encode(text, add_special_tokens=False).ids)
        else:
            ids = list(self._impl.encode(text, allowed_special="all"))
        if add_special_tokens and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids`. Ids the tokenizer does not have (a model's vocabulary
        is often padded past the tokenizer's) decode to nothing."""
        ids = [int(t) for t in ids]
        if skip_special_tokens:
            ids = [t for t in ids if t not in self._special_ids]
        n = self.vocab_size
        if self.kind == "tokenizers":
            ids = [t for t in ids if 0 <= t < n]
            return self._impl.decode(ids, skip_special_tokens=False)
        known = [t for t in ids if 0 <= t < n and self._has(t)]
        return self._impl.decode_bytes(known).decode("utf-8", errors="replace")

    def _has(self, t: int) -> bool:
        try:
            self._impl.decode_single_token_bytes(t)
            return True
        except KeyError:
            return False

    # -- chat ----------------------------------------------------------------
    def apply_chat_template(self, messages: Union[str, Sequence[dict]],
                            add_generation_prompt: bool = True, tokenize: bool = False,
                            **kwargs: Any) -> Union[str, list[int]]:
        """Renders the checkpoint's chat template (jinja2, with transformers'
        variables: messages, bos_token, eos_token, add_generation_prompt).
        A plain string is one user message."""
        if not self.chat_template:
            raise K3Error(f"{self.source}: the tokenizer has no chat template "
                          "(tokenizer_config.json 'chat_template' or chat_template.jinja)")
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        try:
            import jinja2
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError as e:  # pragma: no cover
            raise K3Error("chat templates need jinja2 (pip install jinja2)", "IO", 2) from e

        def raise_exception(msg: str) -> None:
            raise jinja2.exceptions.TemplateError(msg)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        env.filters["tojson"] = lambda x, indent=None, **kw: json.dumps(
            x, ensure_ascii=False, indent=indent)
        try:
            text = env.from_string(self.chat_template).render(
                messages=list(messages), bos_token=self.bos_token or "",
                eos_token=self.eos_token or "", add_generation_prompt=add_generation_prompt,
                **kwargs)
        except jinja2.exceptions.TemplateError as e:
            raise K3Error(f"{self.source}: chat template: {e}") from e
        return self.encode(text) if tokenize else text

    def __repr__(self) -> str:
        return f"Tokenizer({self.kind}, {str(self.source)!r}, vocab_size={self.vocab_size})"


class IncrementalDecoder:
    """Text deltas of a growing list of ids (for streaming): holds back text
    while it ends inside a multi-byte character."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = False):
        self.tok = tokenizer
        self.ids: list[int] = []
        self.text = ""
        self.skip = skip_special_tokens

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        full = self.tok.decode(self.ids, skip_special_tokens=self.skip)
        if full.endswith("\ufffd") or not full.startswith(self.text):
            return ""
        delta, self.text = full[len(self.text):], full
        return delta

    def flush(self) -> str:
        full = self.tok.decode(self.ids, skip_special_tokens=self.skip)
        delta = full[len(self.text):] if full.startswith(self.text) else ""
        self.text = full
        return delta


def _chat_template(config: dict, directory: Path) -> Optional[str]:
    t = config.get("chat_template")
    if isinstance(t, list):  # [{"name": "default", "template": ...}, ...]
        named = {d.get("name"): d.get("template") for d in t if isinstance(d, dict)}
        t = named.get("default") or next(iter(named.values()), None)
    if isinstance(t, str):
        return t
    f = directory / "chat_template.jinja"
    return f.read_text(encoding="utf-8") if f.is_file() else None


def _load_tiktoken(path: Path, config: dict) -> tuple[Any, dict[str, int]]:
    try:
        import tiktoken
    except ImportError as e:  # pragma: no cover
        raise K3Error("tiktoken.model needs tiktoken (pip install tiktoken)", "IO", 2) from e
    ranks: dict[bytes, int] = {}
    try:
        lines = path.read_bytes().splitlines()
    except OSError as e:
        raise K3Error(f"{path}: cannot read: {e}", "IO", 2) from e
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError("expected 'base64-token rank'")
            ranks[base64.b64decode(parts[0], validate=True)] = int(parts[1])
        except ValueError as e:
            raise K3Error(f"{path}:{n}: not a tiktoken ranks line ({e})", "FORMAT", 3) from e
    if not ranks:
        raise K3Error(f"{path}: no tokens", "FORMAT", 3)
    base = max(ranks.values()) + 1
    reserved = int(config.get("num_reserved_special_tokens", NUM_RESERVED_SPECIAL_TOKENS))
    named: dict[int, str] = {}
    for k, v in (config.get("added_tokens_decoder") or {}).items():
        text = _token_text(v)
        if text is not None and str(k).isdigit():
            named[int(k)] = text
    top = max([base + reserved - 1] + list(named))
    special = {named.get(i, f"<|reserved_token_{i}|>"): i for i in range(base, top + 1)}
    pattern = config.get("pat_str") or config.get("pattern") or KIMI_PATTERN
    try:
        enc = tiktoken.Encoding(name=path.parent.name or "k3", pat_str=pattern,
                                mergeable_ranks=ranks, special_tokens=special)
    except Exception as e:
        raise K3Error(f"{path}: cannot build the tiktoken encoding: {e}", "FORMAT", 3) from e
    return enc, special


def load_tokenizer(path: PathLike) -> Tokenizer:
    """A checkpoint directory's tokenizer (tokenizer.json, else
    tiktoken.model), or one of those files; tokenizer_config.json next to it
    supplies the special tokens, the bos/eos tokens and the chat template."""
    p = Path(path)
    if p.is_dir():
        directory = p
        for name in ("tokenizer.json", "tiktoken.model"):
            if (p / name).is_file():
                p = p / name
                break
        else:
            raise K3Error(f"{directory}: no tokenizer.json or tiktoken.model in the directory",
                          "IO", 2)
    elif p.exists():
        directory = p.parent
    else:
        raise K3Error(f"{p}: tokenizer file not found", "IO", 2)
    cfg_file = directory / "tokenizer_config.json"
    config = _read_json(cfg_file) if cfg_file.is_file() else {}
    template = _chat_template(config, directory)
    if p.suffix == ".json":
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError as e:  # pragma: no cover
            raise K3Error("tokenizer.json needs tokenizers (pip install tokenizers)", "IO", 2) from e
        try:
            impl = HFTokenizer.from_file(str(p))
        except Exception as e:
            raise K3Error(f"{p}: not a tokenizers file: {e}", "FORMAT", 3) from e
        special = {t.content: i for i, t in impl.get_added_tokens_decoder().items() if t.special}
        return Tokenizer("tokenizers", impl, config, p, special, template)
    enc, special = _load_tiktoken(p, config)
    return Tokenizer("tiktoken", enc, config, p, special, template)
