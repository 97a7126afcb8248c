"""The text path (python/k3/tokenizer.py, Session.generate with text):
tokenizers built in the test (a BPE trained with `tokenizers`, a tiktoken
ranks file with Kimi-style special tokens), chat templates, text in -> text
out on the tiny model, streaming, stop strings, EOS, checkpoint directories
(config.json + safetensors + tokenizer), and the errors of issue 22.

    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_text.py
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).parent))
import k3  # noqa: E402
import text_fixtures as fx  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("text")


@pytest.fixture(scope="module")
def ckpt(work):
    return fx.write_checkpoint(work / "tiny-ckpt")


@pytest.fixture(scope="module")
def sess(ckpt, work):
    os.environ["K3_CACHE_DIR"] = str(work / "cache")
    return k3.load(ckpt, max_tokens=64, max_seqs=4, progress=False)


# -- tokenizers ---------------------------------------------------------------
def test_bpe_tokenizer(work):
    tok = k3.load_tokenizer(fx.write_bpe(work / "bpe"))
    assert tok.kind == "tokenizers" and tok.vocab_size <= 200
    text = "the cat reads text"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.eos_token_ids == [tok.token_to_id("</s>")]
    assert tok.encode(text, add_special_tokens=True)[0] == tok.bos_token_id
    assert tok.decode(ids + [tok.eos_token_ids[0]], skip_special_tokens=True) == text
    assert tok.decode(ids + [10_000]) == text  # ids past the tokenizer's vocabulary: nothing
    chat = tok.apply_chat_template("hello world")
    assert chat == "<|im_start|>user\nhello world<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=True)[0] == \
        tok.token_to_id("<|im_start|>")


def test_tiktoken_tokenizer(work):
    d = fx.write_tiktoken(work / "tk")
    tok = k3.load_tokenizer(d / "tiktoken.model")
    assert tok.kind == "tiktoken"
    n = len((d / "tiktoken.model").read_text().splitlines())
    # Kimi's layout: specials right after the ranks, reserved ones named.
    assert tok.special_tokens["[BOS]"] == n and tok.special_tokens["[EOS]"] == n + 1
    assert tok.special_tokens[f"<|reserved_token_{n + 15}|>"] == n + 15
    assert tok.vocab_size == n + 16
    text = "hello the token world!\nok"
    ids = tok.encode(text)
    assert tok.decode(ids) == text and len(ids) < len(text)  # merges applied
    assert tok.encode("hi<|im_end|>")[-1] == n + 2
    assert tok.eos_token_ids == [n + 1]
    # The split pattern comes from tokenizer_config.json when it has one.
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["pat_str"] = r"\S+|\s+"
    d2 = work / "tk2"
    d2.mkdir()
    (d2 / "tiktoken.model").write_text((d / "tiktoken.model").read_text())
    (d2 / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert k3.load_tokenizer(d2).decode(k3.load_tokenizer(d2).encode(text)) == text


def test_incremental_decoder_holds_partial_utf8(work):
    tok = k3.load_tokenizer(fx.write_tiktoken(work / "tk3"))
    dec = k3.IncrementalDecoder(tok)
    ids = tok.encode("ok the token")
    assert "".join(dec.push(t) for t in ids) + dec.flush() == "ok the token"


def test_tokenizer_errors(work):
    with pytest.raises(k3.K3Error, match="tokenizer file not found"):
        k3.load_tokenizer(work / "nope" / "tokenizer.json")
    (work / "empty").mkdir()
    with pytest.raises(k3.K3Error, match="no tokenizer.json or tiktoken.model"):
        k3.load_tokenizer(work / "empty")
    bad = work / "bad"
    bad.mkdir()
    (bad / "tiktoken.model").write_text("not-base64!! x\n")
    with pytest.raises(k3.K3Error, match="not a tiktoken ranks line"):
        k3.load_tokenizer(bad)
    nochat = work / "nochat"
    fx.write_bpe(nochat)
    (nochat / "tokenizer_config.json").write_text("{}")
    with pytest.raises(k3.K3Error, match="no chat template"):
        k3.load_tokenizer(nochat).apply_chat_template("hi")


# -- text in, text out --------------------------------------------------------
def test_text_in_text_out(sess):
    tok = sess.tokenizer
    prompt = "the quick brown fox"
    ids = sess.generate(tok.encode(prompt), 24, ignore_eos=True)
    text = sess.generate(prompt, 24, ignore_eos=True)
    assert isinstance(text, str)
    assert text == tok.decode(ids, skip_special_tokens=True)
    assert "".join(sess.generate(prompt, 24, ignore_eos=True, stream=True)) == text
    # Sampling with a seed, batches of text.
    a = sess.generate([prompt, "hello"], 12, temperature=0.8, seed=1, ignore_eos=True)
    assert a == sess.generate([prompt, "hello"], 12, temperature=0.8, seed=1, ignore_eos=True)
    assert len(a) == 2 and all(isinstance(x, str) for x in a)
    chat = sess.generate("hello", 8, chat=True)
    assert isinstance(chat, str)


def test_eos_and_stop_strings(sess):
    tok = sess.tokenizer
    prompt = "hello world"
    ids = sess.generate(tok.encode(prompt), 40, ignore_eos=True)
    eos = tok.eos_token_ids[0]
    out = sess.generate(tok.encode(prompt), 40, stop_token_ids=[ids[3]], ignore_eos=True)
    assert out == ids[:ids.index(ids[3]) + 1]
    if eos in ids:  # the tokenizer's eos stops generation by default
        assert sess.generate(tok.encode(prompt), 40) == ids[:ids.index(eos) + 1]
    full = sess.generate(prompt, 40, ignore_eos=True)
    if len(full) >= 6:
        stop = full[len(full) // 2:len(full) // 2 + 3]
        cut = sess.generate(prompt, 40, stop=stop, ignore_eos=True)
        assert cut == full[:full.index(stop)]
        assert sess.last_generation.finish_reasons == ["stop_string"]
        assert "".join(sess.generate(prompt, 40, stop=[stop], ignore_eos=True,
                                     stream=True)) == cut


def test_checkpoint_directory(ckpt, work, sess):
    # k3-import DIR reads DIR/config.json and names the model after DIR.
    out = work / "imported.mlir"
    subprocess.run([f"{BIN}/k3-import", str(ckpt), "-o", str(out)], check=True)
    assert 'k3.model = "tiny-ckpt"' in out.read_text()
    r = subprocess.run([f"{BIN}/k3-import", str(work / "empty"), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "checkpoint directory has no config.json" in r.stderr
    # The runtime finds the weights in the directory (single file, or index).
    art = sess.artifact
    s2 = k3.Session(art)
    s2.load_weights(ckpt)
    prompt = [1, 2, 3]
    assert s2.generate(prompt, 6) == sess.generate(prompt, 6)
    sharded = work / "sharded"
    sharded.mkdir()
    from safetensors.numpy import load_file, save_file
    tensors = load_file(str(ckpt / "model.safetensors"))
    names = sorted(tensors)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        f = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(sharded / f))
        weight_map.update({n: f for n in part})
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    s3 = k3.Session(art)
    s3.load_weights(sharded)
    assert s3.generate(prompt, 6) == sess.generate(prompt, 6)
    r = subprocess.run([f"{BIN}/k3-run", str(art.path), "--weights", str(sharded), "--prompt",
                        "1,2,3", "--max-new-tokens", "6", "--quiet"], capture_output=True,
                       text=True, check=True)
    assert r.stdout.strip() == ",".join(map(str, sess.generate(prompt, 6)))
    with pytest.raises(k3.K3Error, match="no model.safetensors.index.json and no"):
        s3.load_weights(work / "empty")
    # compile(DIR) is cached: the same artifact path the second time.
    again = k3.compile(ckpt, max_tokens=64, max_seqs=4, progress=False)
    assert again.path == art.path


# -- errors (issue 22) --------------------------------------------------------
def test_errors(sess, ckpt, work):
    with pytest.raises(k3.K3Error, match="out of range for vocab_size 256"):
        sess.generate([1, 999], 2)
    long_text = " ".join(fx.SENTENCES * 3)
    with pytest.raises(k3.K3Error, match="but the artifact was compiled for max_tokens 64"):
        sess.generate(long_text, 2)
    nt = k3.Session(sess.artifact)
    nt.random_weights(1)
    with pytest.raises(k3.K3Error, match="need a tokenizer"):
        nt.generate("hello", 2)
    with pytest.raises(k3.K3Error, match="no such model file or checkpoint directory"):
        k3.load(work / "missing-dir")
    out = sess.run(token_ids=np.array([1, 2], np.int32), cu_seqlens=np.array([0, 2], np.int32),
                   context_lens=np.array([0], np.int32))
    assert out["logits"].shape == (1, 256)  # logits=last: one row per sequence
    with pytest.raises(k3.K3Error, match="dtype f32, expected i32"):
        sess.run(token_ids=np.array([1.0, 2.0], np.float32), cu_seqlens=np.array([0, 2], np.int32),
                 context_lens=np.array([0], np.int32))


def test_progress_line_only_on_a_terminal(capsys, monkeypatch):
    import time
    from k3._progress import Progress, enabled
    monkeypatch.delenv("K3_PROGRESS", raising=False)
    assert not enabled()  # pytest's stderr is not a terminal
    with Progress("compiling tiny"):
        time.sleep(0.15)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("K3_PROGRESS", "1")
    with Progress("compiling tiny"):
        time.sleep(0.25)
    err = capsys.readouterr().err
    assert "\rcompiling tiny [" in err and " s" in err and err.endswith("\r\033[K")
