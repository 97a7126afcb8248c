"""bench/make_checkpoint.py writes a seeded random checkpoint in the Hugging
Face layout (config.json, sharded safetensors, model.safetensors.index.json)
that the runtime loads as a directory with no renaming, and whose logits
match the float64 oracle on the same tensors."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
import k3  # noqa: E402
from k3ref import model  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")
CONFIG = ROOT / "examples" / "configs" / "tiny-kimi-linear.json"


def converter():
    spec = importlib.util.spec_from_file_location("make_checkpoint", ROOT / "bench" / "make_checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sharded_checkpoint_loads_and_matches_the_oracle(tmp_path):
    ckpt = tmp_path / "ckpt"
    r = converter().write(CONFIG, ckpt, seed=4, shard_bytes=20_000)
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert r["shards"] == len(files) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert index["metadata"]["total_size"] == r["bytes"]
    assert json.loads((ckpt / "config.json").read_text()) == json.loads(CONFIG.read_text())
    # The same tensor for the same seed, whatever the order.
    again = converter().tensor("model.norm.weight", (48,), 4, 2)
    cfg = model.Config.from_hf(json.loads(CONFIG.read_text()))
    weights = {}
    for f in files:
        weights.update(model.load_safetensors(ckpt / f))
    assert set(weights) == set(model.weight_shapes(cfg))
    np.testing.assert_array_equal(weights["model.norm.weight"], again.astype(np.float64))
    # Stored dtypes: f32 for the KDA decay parameters, bf16 elsewhere.
    stored = {}
    for f in files:
        raw = (ckpt / f).read_bytes()
        header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
        stored.update({n: h["dtype"] for n, h in header.items() if n != "__metadata__"})
    assert stored["model.layers.0.self_attn.A_log"] == "F32"
    assert stored["model.layers.0.self_attn.q_proj.weight"] == "BF16"

    mlir = k3.import_config(CONFIG, tmp_path / "m.mlir")
    art = k3.compile(mlir, tmp_path / "m.k3bin", max_tokens=64, max_seqs=2)
    s = k3.Session(art)
    s.load_weights(ckpt)
    ids = np.arange(3, 20, dtype=np.int32) % cfg.vocab_size
    got = s.run(token_ids=ids, cu_seqlens=np.array([0, len(ids)], np.int32),
                context_lens=np.array([0], np.int32))["logits"]
    ref = model.forward(cfg, weights, ids, cu_seqlens=np.array([0, len(ids)]))[-1]
    err = np.linalg.norm(got.reshape(-1) - ref) / np.linalg.norm(ref)
    assert err < 1e-4, err


def test_transformers_names_load_without_renaming(tmp_path):
    """The same tensors under the names transformers >= 5 saves (experts fused
    into gate_up_proj [E, 2I, D] and down_proj [E, D, I], packed conv1d,
    the router under mlp.gate; the KDA gates keep the hub's names, as
    transformers 5.17 loads them): the runtime finds each weight as a slab of a fused tensor
    and the logits are the same, bit for bit."""
    conv = converter()
    conv.write(CONFIG, tmp_path / "hub", seed=5, shard_bytes=50_000)
    conv.write(CONFIG, tmp_path / "hf", seed=5, shard_bytes=50_000, names="transformers")
    conv.write(CONFIG, tmp_path / "saved", seed=5, shard_bytes=50_000, names="transformers-saved")
    saved = json.loads((tmp_path / "saved" / "model.safetensors.index.json").read_text())["weight_map"]
    assert "model.layers.0.block_sparse_moe.gate_proj.weight" in saved
    names = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())["weight_map"]
    assert "model.layers.1.mlp.experts.gate_up_proj" in names
    assert "model.layers.0.self_attn.conv1d.weight" in names
    assert "model.layers.0.self_attn.f_a_proj.weight" in names
    assert not any(".w1." in n or "q_conv1d" in n or "block_sparse_moe.gate." in n for n in names)
    mlir = k3.import_config(CONFIG, tmp_path / "m.mlir")
    art = k3.compile(mlir, tmp_path / "m.k3bin", max_tokens=64, max_seqs=2)
    ids = np.arange(1, 12, dtype=np.int32)
    logits = {}
    for kind in ("hub", "hf", "saved"):
        s = k3.Session(art)
        s.load_weights(tmp_path / kind)
        logits[kind] = s.run(token_ids=ids, cu_seqlens=np.array([0, len(ids)], np.int32),
                             context_lens=np.array([0], np.int32))["logits"]
    np.testing.assert_array_equal(logits["hf"], logits["hub"])
    np.testing.assert_array_equal(logits["saved"], logits["hub"])


def test_a_fused_tensor_of_the_wrong_shape_is_named(tmp_path):
    conv = converter()
    conv.write(CONFIG, tmp_path / "hf", seed=5, shard_bytes=10**9, names="transformers")
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    shard = tmp_path / "hf" / index["weight_map"]["model.layers.1.mlp.experts.gate_up_proj"]
    tensors = model.load_safetensors(shard, to_float64=False)
    t = tensors["model.layers.1.mlp.experts.gate_up_proj"]
    tensors["model.layers.1.mlp.experts.gate_up_proj"] = t[:, :, :-1]  # D - 1 columns
    model.save_safetensors(shard, tensors)
    art = k3.compile(k3.import_config(CONFIG, tmp_path / "m.mlir"), tmp_path / "m.k3bin",
                     max_tokens=64, max_seqs=2)
    with pytest.raises(k3.K3Error, match=r"experts.0.w1.weight' \(as 'model.layers.1.mlp.experts.gate_up_proj\[0\] \(part 1 of 2\)'\) has shape \[16, 47\]"):
        k3.Session(art).load_weights(tmp_path / "hf")


def test_the_load_is_reported(tmp_path):
    """Session.load_weights returns what it loaded (bytes at the manifest's
    dtypes, files, seconds, GB/s) and reports progress; k3-run prints the
    same as one line on stderr, with no progress bar when stderr is not a
    terminal (issue 17). No timing is asserted."""
    ckpt = tmp_path / "ckpt"
    r = converter().write(CONFIG, ckpt, seed=6, shard_bytes=20_000)
    art = k3.compile(k3.import_config(CONFIG, tmp_path / "m.mlir"), tmp_path / "m.k3bin",
                     max_tokens=64, max_seqs=2)
    sizes = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4}
    want = sum(sizes[w.dtype] * int(np.prod(w.shape)) for w in art.weights)
    calls = []
    s = k3.Session(art)
    stats = s.load_weights(ckpt, progress=lambda done, total: calls.append((done, total)))
    assert (stats.bytes, stats.files) == (want, r["shards"]) and s.last_load is stats
    assert stats.seconds > 0 and stats.gb_per_s > 0
    assert calls and calls[-1] == (want, want)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))
    line = re.compile(r"^weights: [0-9.]+ (B|kB|MB|GB) from (\d+) files in [0-9]+\.[0-9]{2} s "
                      r"\([0-9]+\.[0-9] GB/s\)$", re.M)
    assert line.match(f"weights: {stats}")
    run = subprocess.run([f"{BIN}/k3-run", str(art.path), "--weights", str(ckpt), "--prompt",
                          "1,2,3", "--max-new-tokens", "2"], capture_output=True, text=True,
                         check=True)
    m = line.search(run.stderr)
    assert m, run.stderr
    assert int(m.group(2)) == r["shards"]
    assert m.group(0).split(" in ")[0] == f"weights: {stats}".split(" in ")[0]
    assert "loading weights" not in run.stderr
    # --progress draws the bar anyway, and clears it before the line (bytes:
    # text mode would turn the carriage returns into newlines).
    run = subprocess.run([f"{BIN}/k3-run", str(art.path), "--weights", str(ckpt), "--prompt",
                          "1", "--max-new-tokens", "1", "--progress"], capture_output=True,
                         check=True)
    assert re.search(rb"\rloading weights \[=+\] .* GB/s\)\r\x1b\[Kweights: ", run.stderr), \
        run.stderr
