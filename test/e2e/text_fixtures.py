"""Builders for the text-path tests (no downloads): a BPE tokenizer trained
with `tokenizers` on a few sentences, a tiktoken ranks file written here with
Kimi-style special tokens, and a checkpoint directory of the tiny model
(examples/configs/tiny-k3.json = examples/tiny_k3.mlir) with random weights.
Used by test_text.py and test_pip_install.py; as a script it writes a
checkpoint directory for trying the text path by hand:
    python test/e2e/text_fixtures.py OUT_DIR   -> OUT_DIR/ckpt
"""
import base64
import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, hello k3",
    "a small model reads text and writes text",
    "the cat sat on the mat and the dog sat on the log",
    "kimi reads long documents with linear attention",
    "tokens go in, tokens come out, and text is made of tokens",
    "sampling picks the next token from the probabilities",
]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


def write_bpe(d: Path, vocab_size: int = 200) -> Path:
    """tokenizer.json (BPE, Metaspace) + tokenizer_config.json in `d`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    d.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=["<unk>", "<s>", "</s>", "<|im_start|>",
                                                  "<|im_end|>"])
    tok.train_from_iterator(SENTENCES * 4, trainer)
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": CHAT_TEMPLATE}))
    return d


def write_tiktoken(d: Path) -> Path:
    """A Kimi-style tiktoken.model (printable ASCII bytes, newline, a few
    merges) and tokenizer_config.json with added_tokens_decoder specials."""
    d.mkdir(parents=True, exist_ok=True)
    toks = [bytes([b]) for b in range(32, 127)] + [b"\n"]
    for m in (b"th", b"he", b"the", b" t", b" the", b"ll", b"llo", b"hello", b"to", b"ok",
              b"en", b"en", b"ken", b"oken", b"token", b" token", b"s"):
        if m not in toks:
            toks.append(m)
    (d / "tiktoken.model").write_text(
        "".join(f"{base64.b64encode(x).decode()} {i}\n" for i, x in enumerate(toks)))
    n = len(toks)
    (d / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "[BOS]", "eos_token": "[EOS]", "num_reserved_special_tokens": 16,
        "added_tokens_decoder": {str(n): {"content": "[BOS]", "special": True},
                                 str(n + 1): {"content": "[EOS]", "special": True},
                                 str(n + 2): {"content": "<|im_end|>", "special": True},
                                 str(n + 3): {"content": "<|im_user|>", "special": True}},
        "chat_template": CHAT_TEMPLATE}))
    return d


def write_checkpoint(d: Path, seed: int = 5, tokenizer: str = "bpe") -> Path:
    """A checkpoint directory of the tiny model: config.json,
    model.safetensors (random weights, f32), a tokenizer."""
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "examples/configs/tiny-k3.json", d / "config.json")
    _write_weights(d / "model.safetensors", seed)
    (write_bpe if tokenizer == "bpe" else write_tiktoken)(d)
    return d


def _write_weights(path: Path, seed: int) -> None:
    """The oracle's random weights (python/k3ref), as f32 safetensors."""
    sys.path.insert(0, str(ROOT / "python"))
    from k3ref import model
    from k3ref.examples import tiny_k3_example_config
    w = model.random_weights(tiny_k3_example_config(), seed)
    model.save_safetensors(path, {k: v.astype(np.float32) for k, v in w.items()})


if __name__ == "__main__":
    out = Path(sys.argv[1])
    print(write_checkpoint(out / "ckpt"))
