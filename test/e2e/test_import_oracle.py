"""End to end from a Hugging Face config.json: k3-import emits the model,
k3-opt compiles it, k3-run executes it, the float64 oracle (python/k3ref)
checks the logits.  Also: a sharded safetensors checkpoint under the
checkpoints' own tensor names (bf16 + the F32 tensors, K3's
`language_model.` prefix) loads and gives the same logits.

Run by ctest (the e2e directory; K3_BIN_DIR = the build's bin/), or by hand:
    K3_BIN_DIR=build/bin .venv/bin/python -m pytest test/e2e/test_import_oracle.py
"""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
from k3ref import model  # noqa: E402
from k3ref.storage import F32_WEIGHTS, rel_err, rounded_random_weights as rounded_weights  # noqa: E402,F401
from k3ref.examples import tiny_k3_example_config  # noqa: E402

BIN = os.environ.get("K3_BIN_DIR")
pytestmark = pytest.mark.skipif(not BIN, reason="K3_BIN_DIR (the build's bin/) not set")
CONFIGS = ROOT / "examples" / "configs"

# Weights the checkpoints keep in f32 (K3-SPEC.md §2, §5); the rest are bf16.


def oracle_config(d: dict) -> model.Config:
    """k3ref Config from a config dict, also for transformers-native kimi_linear
    names (layer_types, mlp_layer_types, linear_*; k3ref's from_hf reads only the
    remote-code names)."""
    d = dict(d.get("text_config", d))
    if "layer_types" in d:
        lt = d.pop("layer_types")
        d.setdefault("linear_attn_config", {})
        d["linear_attn_config"].update(
            kda_layers=[i + 1 for i, t in enumerate(lt) if t == "linear_attention"],
            full_attn_layers=[i + 1 for i, t in enumerate(lt) if t == "full_attention"])
    lac = d.setdefault("linear_attn_config", {})
    for flat, key in (("linear_num_heads", "num_heads"), ("linear_head_dim", "head_dim"),
                      ("linear_conv_kernel_dim", "short_conv_kernel_size")):
        if flat in d:
            lac.setdefault(key, d.pop(flat))
    for alias, key in (("num_local_experts", "num_experts"), ("norm_topk_prob", "moe_renormalize")):
        if alias in d:
            d.setdefault(key, d.pop(alias))
    if d.get("attn_res_block_size") == 0:
        d["attn_res_block_size"] = None
    cfg = model.Config.from_hf(d)
    if "mlp_layer_types" in d:
        mt = d["mlp_layer_types"]
        first = mt.index("sparse") if "sparse" in mt else len(mt)
        assert all(t == ("sparse" if i >= first else "dense") for i, t in enumerate(mt))
        cfg.first_k_dense_replace = first
    return cfg


# Odd-sized variations written by the test itself (K3-shaped and Kimi-Linear-shaped).
VARIANTS = {
    # K3-shaped: hidden 40, 3 KDA heads of 8, AttnRes block 3, latent MoE without
    # the latent norm, no shared expert, tied embeddings, SiTU without linear beta.
    "k3-odd": {
        "model_type": "kimi_k3",
        "text_config": {
            "hidden_size": 40, "num_hidden_layers": 7, "vocab_size": 67, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True, "hidden_act": "situ", "activation_situ_beta": 3.0,
            "activation_situ_linear_beta": None, "attn_res_block_size": 3,
            "intermediate_size": 56, "first_k_dense_replace": 2, "num_experts": 7,
            "num_experts_per_token": 3, "num_shared_experts": 0, "moe_intermediate_size": 12,
            "routed_expert_hidden_size": 24, "latent_moe_use_norm": False,
            "routed_scaling_factor": 1.25, "moe_router_activation_func": "sigmoid",
            "moe_renormalize": True, "num_attention_heads": 3, "q_lora_rank": 20,
            "kv_lora_rank": 12, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
            "mla_use_output_gate": True, "mla_use_nope": True, "max_position_embeddings": 80,
            "linear_attn_config": {"kda_layers": [1, 2, 4, 5, 6], "full_attn_layers": [3, 7],
                                   "num_heads": 3, "head_dim": 8, "short_conv_kernel_size": 3,
                                   "gate_lower_bound": -4.0, "use_full_rank_gate": True}}},
}


def config_path(name, tmp):
    if name in VARIANTS:
        p = tmp / f"{name}.json"
        p.write_text(json.dumps(VARIANTS[name]))
        return p
    return CONFIGS / f"{name}.json"


def build(name, tmp, logits="all"):
    """Import and compile a config; returns (config dict, artifact path).
    logits="all" (every token's logits: the oracle checks each) or "last"
    (k3-compile's default: each sequence's last token)."""
    cpath = config_path(name, tmp)
    mlir, art = tmp / f"{name}.mlir", tmp / f"{name}.k3bin"
    subprocess.run([f"{BIN}/k3-import", str(cpath), "-o", str(mlir)], check=True)
    subprocess.run([f"{BIN}/k3-opt", str(mlir),
                    f"--k3-compile=output={art} max-tokens=160 max-seqs=4 logits={logits}",
                    "-o", os.devnull], check=True)
    return json.loads(cpath.read_text()), art


def run(tmp, art, weights, inputs, tag):
    infile, outfile = tmp / f"in_{tag}.safetensors", tmp / f"out_{tag}.safetensors"
    model.save_safetensors(infile, inputs)
    args = [f"{BIN}/k3-run", str(art)]
    for w in weights:
        args += ["--weights", str(w)]
    r = subprocess.run(args + ["--inputs", str(infile), "--dump", str(outfile)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return model.load_safetensors(outfile)


def packed(cfg, lens, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, sum(lens)).astype(np.int32)
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    return {"token_ids": ids, "cu_seqlens": cu, "context_lens": np.zeros(len(lens), np.int32)}


def check(out, cfg, weights, inp, logits="all"):
    ref = model.forward(cfg, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"], logits=logits)
    assert out["logits"].shape == ref.shape
    err = rel_err(out["logits"], ref)
    # Seeds are fixed; with these weights no router choice is a near-tie between
    # f32 and f64 (a flip would show as an error far above 1e-4).
    assert err <= 1e-4, f"normwise relative error {err:.3e}"
    return err


# (config, weight seed)
MODELS = [("tiny-k3", 3), ("tiny-kimi-linear", 5), ("tiny-kimi-linear-hf", 7), ("k3-odd", 11)]
LENS = [[7], [5, 17, 1, 9], [64, 3]]


@pytest.fixture(scope="module", params=MODELS, ids=[m[0] for m in MODELS])
def imported(request, tmp_path_factory):
    name, seed = request.param
    tmp = tmp_path_factory.mktemp(name)
    cdict, art = build(name, tmp)
    cfg = oracle_config(cdict)
    weights = rounded_weights(cfg, seed)
    wfile = tmp / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    return name, tmp, art, cfg, weights, wfile


def test_tiny_k3_config_is_the_example():
    """examples/configs/tiny-k3.json describes examples/tiny_k3.mlir."""
    cfg = oracle_config(json.loads((CONFIGS / "tiny-k3.json").read_text()))
    assert cfg == tiny_k3_example_config()


@pytest.mark.parametrize("lens", LENS, ids=["_".join(map(str, l)) for l in LENS])
def test_imported_matches_oracle(imported, lens):
    name, tmp, art, cfg, weights, wfile = imported
    inp = packed(cfg, lens, seed=len(lens) * 100 + sum(lens))
    out = run(tmp, art, [wfile], inp, "p" + "_".join(map(str, lens)))
    check(out, cfg, weights, inp)


def test_imported_decode_continues_prefill(imported):
    """Greedy generation with carried decode state (KDA conv/recurrent state,
    MLA latent cache) equals the oracle's."""
    name, tmp, art, cfg, weights, wfile = imported
    prompt = [int(x) for x in np.random.default_rng(1).integers(0, cfg.vocab_size, 9)]
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--prompt",
                        ",".join(map(str, prompt)), "--max-new-tokens", "5", "--quiet"],
                       capture_output=True, text=True, check=True)
    got = [int(t) for t in r.stdout.strip().split(",")]
    assert got == model.greedy_generate(cfg, weights, prompt, 5)


def write_sharded(dirpath, tensors, prefix, nshards=2):
    """A sharded checkpoint: model-0000i-of-0000n.safetensors + model.safetensors.index.json,
    checkpoint dtypes (bf16, F32 for the F32 tensors), names with `prefix`."""
    names = sorted(tensors)
    per = (len(names) + nshards - 1) // nshards
    weight_map = {}
    for s in range(nshards):
        fname = f"model-{s + 1:05d}-of-{nshards:05d}.safetensors"
        part = {}
        for n in names[s * per:(s + 1) * per]:
            storage = np.float32 if any(k in n for k in F32_WEIGHTS) else ml_dtypes.bfloat16
            part[prefix + n] = tensors[n].astype(storage)
            weight_map[prefix + n] = fname
        model.save_safetensors(dirpath / fname, part)
    (dirpath / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=1))
    return dirpath / "model.safetensors.index.json"


def test_checkpoint_layouts_of_kimi_linear(tmp_path):
    """Kimi Linear checkpoints store A_log as [1, 1, H, 1] (and transformers'
    port dt_bias as [H, d]); the loader takes them as the [H] and [H * d]
    the model uses, and still refuses a tensor of another size."""
    cdict, art = build("tiny-kimi-linear", tmp_path)
    cfg = oracle_config(cdict)
    weights = rounded_weights(cfg, 23)
    stored = dict(weights)
    H, d = cfg.kda_num_heads, cfg.kda_head_dim
    for n in list(stored):
        if n.endswith("A_log"):
            stored[n] = weights[n].reshape(1, 1, H, 1)
        elif n.endswith("dt_bias"):
            stored[n] = weights[n].reshape(H, d)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    index = write_sharded(ckpt, stored, "")
    inp = packed(cfg, [5, 9], seed=5)
    check(run(tmp_path, art, [index], inp, "layouts"), cfg, weights, inp)
    bad = dict(stored)
    name = next(n for n in bad if n.endswith("A_log"))
    bad[name] = np.zeros((1, 1, H + 1, 1))
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(write_sharded(bad_dir, bad, "")),
                        "--prompt", "1,2", "--quiet"], capture_output=True, text=True)
    assert r.returncode != 0 and name in r.stderr and "expects [" in r.stderr


@pytest.mark.parametrize("name,seed,prefix", [("tiny-k3", 21, "language_model."),
                                              ("tiny-kimi-linear", 22, "")])
def test_sharded_checkpoint(tmp_path, name, seed, prefix):
    """A bf16/F32 sharded checkpoint under the checkpoint names (K3: every name
    under `language_model.`; experts one tensor per expert) loads and runs.
    Compiled with the default logits=last: one row per sequence."""
    cdict, art = build(name, tmp_path, logits="last")
    cfg = oracle_config(cdict)
    weights = rounded_weights(cfg, seed)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    index = write_sharded(ckpt, weights, prefix)
    shards = sorted(ckpt.glob("*.safetensors"))
    assert len(shards) == 2
    # Per-expert tensors, not stacks, are what the checkpoint holds.
    wm = json.loads(index.read_text())["weight_map"]
    assert f"{prefix}model.layers.1.block_sparse_moe.experts.0.w1.weight" in wm
    inp = packed(cfg, [6, 11], seed=4)
    out = run(tmp_path, art, [index], inp, "ckpt")
    assert out["logits"].shape == (2, cfg.vocab_size) and out["next_tokens"].shape == (2,)
    check(out, cfg, weights, inp, logits="last")
    # The same checkpoint through k3-run's generation loop.
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(index), "--prompt", "3,1,4,1,5",
                        "--max-new-tokens", "3", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert [int(t) for t in r.stdout.strip().split(",")] == model.greedy_generate(cfg, weights, [3, 1, 4, 1, 5], 3)


@pytest.mark.parametrize("name,seed", [("tiny-k3", 3), ("tiny-kimi-linear", 5)])
def test_bf16_kda_operands(tmp_path, name, seed):
    """k3-import --kda-operand-dtype bf16: the short convolutions store q, k, v
    in bf16 (what the CUDA tensor-core KDA takes). The oracle rounds them at
    the same place (Config.kda_operand_dtype); what is left is f32 against
    f64 (4e-6 and 1e-5 measured; a value straddling a bf16 rounding boundary
    would cost one bf16 ulp on an element). Then generation through the
    decode entry."""
    cpath = config_path(name, tmp_path)
    cfg = dataclasses.replace(oracle_config(json.loads(cpath.read_text())), kda_operand_dtype="bf16")
    weights = rounded_weights(cfg, seed)
    wfile = tmp_path / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    mlir, art = tmp_path / "m.mlir", tmp_path / "m.k3bin"
    subprocess.run([f"{BIN}/k3-import", str(cpath), "--kda-operand-dtype", "bf16", "-o", str(mlir)], check=True)
    assert "xbf16>, tensor<1x?x" in mlir.read_text()  # k3.kda takes bf16 q, k, v
    subprocess.run([f"{BIN}/k3-opt", str(mlir), f"--k3-compile=output={art} max-tokens=160 max-seqs=4",
                    "-o", os.devnull], check=True)
    inp = packed(cfg, [5, 17, 1, 9], seed=21)
    out = run(tmp_path, art, [wfile], inp, "bf16")
    # The default logits=last: each sequence's last token.
    ref = model.forward(cfg, weights, inp["token_ids"], cu_seqlens=inp["cu_seqlens"], logits="last")
    err = rel_err(out["logits"], ref)
    assert err <= 1e-4, f"normwise relative error {err:.3e}"
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    r = subprocess.run([f"{BIN}/k3-run", str(art), "--weights", str(wfile), "--prompt",
                        ",".join(map(str, prompt)), "--max-new-tokens", "6"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "through 'forward_decode'" in r.stdout


@pytest.mark.parametrize("name,fused", [("tiny-kimi-linear", 8), ("tiny-k3", 0)])
def test_fused_add_rms_norm(tmp_path, name, fused):
    """k3-fuse-add-rms-norm (on by default): Kimi Linear's pre-norm residuals
    (4 layers: 3 input norms after the previous layer's add, 4 post-attention
    norms, and the final norm, which with the last layer's tail follows
    k3.last_tokens) become k3.add_rms_norm; K3's
    Block AttnRes norms read k3.attn_res_mix and stay. Fused and unfused
    artifacts agree, and both match the oracle on every token."""
    cpath = config_path(name, tmp_path)
    mlir = tmp_path / "m.mlir"
    subprocess.run([f"{BIN}/k3-import", str(cpath), "-o", str(mlir)], check=True)
    ir = subprocess.run([f"{BIN}/k3-opt", str(mlir), "--k3-inline-layers", "--cse",
                         "--k3-last-token-logits", "--k3-fuse-add-rms-norm"],
                        capture_output=True, text=True, check=True).stdout
    assert ir.count("k3.add_rms_norm") == fused
    cfg = oracle_config(json.loads(cpath.read_text()))
    weights = rounded_weights(cfg, 9)
    wfile = tmp_path / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    inp = packed(cfg, [5, 17, 1, 9], seed=8)
    outs = []
    for flag in (1, 0):
        art = tmp_path / f"m{flag}.k3bin"
        subprocess.run([f"{BIN}/k3-opt", str(mlir), f"--k3-compile=output={art} max-tokens=160 "
                        f"max-seqs=4 logits=all fuse-add-rms-norm={flag}", "-o", os.devnull], check=True)
        outs.append(run(tmp_path, art, [wfile], inp, f"fuse{flag}"))
        check(outs[-1], cfg, weights, inp)
    assert rel_err(outs[0]["logits"], outs[1]["logits"]) <= 1e-6


def test_last_token_attention_continues_prefills(tmp_path):
    """logits=last on tiny Kimi-Linear, whose one MLA layer is the last:
    k3-last-token-logits runs that layer's attention for each sequence's
    last token alone, in the latent form over the cache with every latent
    of the call appended (k3.last_token_context). The prefill entry then has
    no expanded attention, so it may continue sequences: two packed calls,
    the second continuing each sequence (context_lens > 0, an empty chunk
    among them), give the oracle's last-token logits of the whole
    sequences, and a decode step after them its next ones."""
    import k3  # noqa: E402 (python/, on the path above)
    cdict, art = build("tiny-kimi-linear", tmp_path, logits="last")
    plan = subprocess.run([f"{BIN}/k3-run", str(art), "--plan"], capture_output=True, text=True,
                          check=True).stdout
    prefill_plan = plan.split("entry forward_decode")[0]
    assert "last_token_context" in prefill_plan and "latent_attention" in prefill_plan
    assert "mla_prefill_attention" not in prefill_plan
    cfg = oracle_config(cdict)
    weights = rounded_weights(cfg, 5)
    wfile = tmp_path / "weights.safetensors"
    model.save_safetensors(wfile, {k: v.astype(np.float32) for k, v in weights.items()})
    s = k3.Session(k3.Artifact(art))
    s.load_weights([wfile])
    rng = np.random.default_rng(21)
    first, second = [5, 9, 1], [3, 0, 4]
    seqs = [rng.integers(0, cfg.vocab_size, a + b + 1).astype(np.int32) for a, b in zip(first, second)]

    def call(chunks, ctx):
        cu = np.concatenate([[0], np.cumsum([len(c) for c in chunks])]).astype(np.int32)
        return s.run(token_ids=np.concatenate(chunks).astype(np.int32), cu_seqlens=cu,
                     context_lens=np.asarray(ctx, np.int32))["logits"]

    def oracle(lens):
        ids = np.concatenate([q[:n] for q, n in zip(seqs, lens)])
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        return model.forward(cfg, weights, ids, cu_seqlens=cu, logits="last")

    got = call([q[:a] for q, a in zip(seqs, first)], [0, 0, 0])
    assert rel_err(got, oracle(first)) <= 1e-4
    done = [a + b for a, b in zip(first, second)]
    got = call([q[a:n] for q, a, n in zip(seqs, first, done)], first)
    # The sequence without new tokens has no last token here (a zero row).
    ref = oracle(done)
    rows = [i for i, b in enumerate(second) if b]
    assert rel_err(got[rows], ref[rows]) <= 1e-4
    step = s.run("forward_decode", token_ids=np.array([q[n] for q, n in zip(seqs, done)], np.int32),
                 cu_seqlens=np.arange(len(seqs) + 1, dtype=np.int32),
                 context_lens=np.asarray(done, np.int32))["logits"]
    assert rel_err(step, oracle([n + 1 for n in done])) <= 1e-4
