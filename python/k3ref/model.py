"""Whole-model float64 reference for Kimi K3 and Kimi Linear (K3-SPEC §1, §7, §8).

Weights are a ``dict[str, ndarray]`` keyed by *model-side* checkpoint names
(no ``language_model.`` prefix), e.g. ``model.layers.3.self_attn.kv_b_proj.weight``.
See ``docs/oracle.md`` for the full naming table.

MoE tensors: the canonical prefix is ``model.layers.{i}.block_sparse_moe.``
(the upstream ``modeling_kimi_linear.py`` name for both Kimi Linear and K3);
``model.layers.{i}.mlp.`` is accepted as an alias for the same tensors.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import mxfp4, ops

f64 = np.float64


# ----------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------

@dataclass
class Config:
    """Decoder configuration; field names follow K3-SPEC §1 / the HF config.json.

    ``kda_layers`` / ``full_attn_layers`` are **1-based** (K3-SPEC §1):
    layer i (0-based) is KDA iff (i+1) ∈ kda_layers.
    """
    hidden_size: int = 64
    num_hidden_layers: int = 8
    vocab_size: int = 64
    rms_norm_eps: float = 1e-5
    hidden_act: str = "situ"
    activation_situ_beta: Optional[float] = 4.0
    activation_situ_linear_beta: Optional[float] = 25.0
    attn_res_block_size: Optional[int] = None
    intermediate_size: int = 128
    first_k_dense_replace: int = 1
    moe_layer_freq: int = 1
    num_experts: Optional[int] = None
    num_experts_per_token: int = 2
    num_shared_experts: int = 0
    moe_intermediate_size: int = 32
    routed_expert_hidden_size: Optional[int] = None
    latent_moe_use_norm: bool = False
    routed_scaling_factor: float = 1.0
    moe_router_activation_func: str = "sigmoid"
    moe_renormalize: bool = True
    # Group-limited routing (ops.group_limit): 1 / 1 is the plain top-k.
    num_expert_group: int = 1
    topk_group: int = 1
    num_attention_heads: int = 2
    q_lora_rank: Optional[int] = None
    kv_lora_rank: int = 16
    qk_nope_head_dim: int = 8
    qk_rope_head_dim: int = 4
    v_head_dim: int = 8
    mla_use_output_gate: bool = False
    kda_layers: list = field(default_factory=list)
    full_attn_layers: list = field(default_factory=list)
    kda_num_heads: int = 2
    kda_head_dim: int = 16
    short_conv_kernel_size: int = 4
    gate_lower_bound: Optional[float] = None
    use_full_rank_gate: bool = False
    # Storage of the KDA operands q, k, v after the short convolutions
    # ("bf16": rounded there, as k3-import --kda-operand-dtype bf16 compiles
    # it); None keeps them exact.
    kda_operand_dtype: Optional[str] = None
    # The precision policy (docs/precision.md): "bf16" rounds every
    # activation passed between kernels to bf16 where the compiled model
    # stores it (k3-compile activation-dtype=bf16); None / "f32" keeps
    # them exact. Logits, router scores, decode state stay exact.
    activation_dtype: Optional[str] = None
    # The KDA recurrent state kept between calls: "bf16" rounds it to bf16
    # at the end of every call (k3-compile kda-state-dtype=bf16); None /
    # "f32" keeps it exact.
    kda_state_dtype: Optional[str] = None
    tie_word_embeddings: bool = False

    # -- layer classification ------------------------------------------------
    def is_kda(self, i: int) -> bool:
        return (i + 1) in self.kda_layers

    def is_moe(self, i: int) -> bool:
        return (bool(self.num_experts) and i >= self.first_k_dense_replace
                and i % self.moe_layer_freq == 0)

    @classmethod
    def from_hf(cls, d: dict) -> "Config":
        """Build from a HF config dict: a K3 top-level config (uses ``text_config``),
        a K3 ``text_config`` itself, or a Kimi-Linear ``config.json``."""
        if "text_config" in d and isinstance(d["text_config"], dict):
            d = d["text_config"]
        lac = d.get("linear_attn_config") or {}
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "num_experts" not in d and "n_routed_experts" in d:
            kw["num_experts"] = d["n_routed_experts"]
        if "num_experts_per_token" not in d and "num_experts_per_tok" in d:
            kw["num_experts_per_token"] = d["num_experts_per_tok"]
        if "num_expert_group" not in d and "n_group" in d:
            kw["num_expert_group"] = d["n_group"]
        if "num_shared_experts" not in d and "n_shared_experts" in d:
            kw["num_shared_experts"] = d["n_shared_experts"]
        if kw.get("num_shared_experts") is None:
            kw["num_shared_experts"] = 0
        kw["kda_layers"] = list(lac.get("kda_layers") or [])
        kw["full_attn_layers"] = list(lac.get("full_attn_layers") or [])
        if "num_heads" in lac:
            kw["kda_num_heads"] = lac["num_heads"]
        if "head_dim" in lac:
            kw["kda_head_dim"] = lac["head_dim"]
        if "short_conv_kernel_size" in lac:
            kw["short_conv_kernel_size"] = lac["short_conv_kernel_size"]
        kw["gate_lower_bound"] = lac.get("gate_lower_bound")
        kw["use_full_rank_gate"] = bool(lac.get("use_full_rank_gate", False))
        for k in ("activation_situ_beta", "activation_situ_linear_beta"):
            kw.setdefault(k, None)
        if kw.get("hidden_act") == "situ" and kw.get("activation_situ_beta") is None:
            kw["activation_situ_beta"] = 1.0  # HF `_get_situ_activation_params`: beta or 1.0
        return cls(**kw)


# ----------------------------------------------------------------------------
# weight names
# ----------------------------------------------------------------------------

KDA_NAMES = ["q_proj.weight", "k_proj.weight", "v_proj.weight", "q_conv1d.weight",
             "k_conv1d.weight", "v_conv1d.weight", "f_a_proj.weight", "f_b_proj.weight",
             "A_log", "dt_bias", "b_proj.weight", "o_norm.weight", "o_proj.weight"]
MOE_PREFIXES = ("block_sparse_moe", "mlp")


def _get(weights, name):
    if name in weights:
        return weights[name]
    if ".block_sparse_moe." in name:
        alt = name.replace(".block_sparse_moe.", ".mlp.")
        if alt in weights:
            return weights[alt]
    lm = "language_model." + name
    if lm in weights:
        return weights[lm]
    raise KeyError(name)


def _has(weights, name):
    try:
        _get(weights, name)
        return True
    except KeyError:
        return False


def _short(weights, prefix, names):
    """Collect ``prefix + n`` into a dict keyed by n with any trailing '.weight' removed."""
    out = {}
    for n in names:
        if _has(weights, prefix + n):
            key = n[:-len(".weight")] if n.endswith(".weight") else n
            out[key] = _get(weights, prefix + n)
    return out


def _kda_w(weights, cfg, i):
    p = f"model.layers.{i}.self_attn."
    names = KDA_NAMES + (["g_proj.weight"] if cfg.use_full_rank_gate
                         else ["g_a_proj.weight", "g_b_proj.weight"])
    w = _short(weights, p, names)
    missing = [n for n in names if (n[:-7] if n.endswith(".weight") else n) not in w]
    if missing:
        raise KeyError(f"layer {i} KDA missing {missing}")
    return w


def _mla_w(weights, cfg, i):
    p = f"model.layers.{i}.self_attn."
    names = ["kv_a_proj_with_mqa.weight", "kv_a_layernorm.weight", "kv_b_proj.weight",
             "o_proj.weight"]
    names += (["q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"]
              if cfg.q_lora_rank is not None else ["q_proj.weight"])
    if cfg.mla_use_output_gate:
        names.append("g_proj.weight")
    return {k: v for k, v in _short(weights, p, names).items()}


def _moe_w(weights, cfg, i):
    p = f"model.layers.{i}.block_sparse_moe."
    w = {}
    for n in ["gate.weight", "gate.e_score_correction_bias", "routed_expert_down_proj.weight",
              "routed_expert_up_proj.weight", "routed_expert_norm.weight",
              "shared_experts.gate_proj.weight", "shared_experts.up_proj.weight",
              "shared_experts.down_proj.weight"]:
        if _has(weights, p + n):
            w[n] = _get(weights, p + n)
    E = cfg.num_experts
    for m in ("w1", "w2", "w3"):
        w[m] = [_get(weights, f"{p}experts.{e}.{m}.weight") for e in range(E)]
    return w


# ----------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------

def _mlp(cfg, weights, i, x, forced_routing, dumps):
    if cfg.is_moe(i):
        w = _moe_w(weights, cfg, i)
        forced = None if forced_routing is None else forced_routing.get(i)
        y, idx, wts = ops.moe_block(x, w, cfg, forced)
        if dumps is not None:
            dumps[f"layers.{i}.router_indices"] = idx
            dumps[f"layers.{i}.router_weights"] = wts
        return y
    p = f"model.layers.{i}.mlp."
    return ops.act(ops.glu_mlp(x, _get(weights, p + "gate_proj.weight"),
                               _get(weights, p + "up_proj.weight"),
                               _get(weights, p + "down_proj.weight"), cfg.hidden_act,
                               cfg.activation_situ_beta, cfg.activation_situ_linear_beta))


def _attn(cfg, weights, i, x, cu_seqlens, lstate, kda_core, dumps):
    if cfg.is_kda(i):
        d = {} if dumps is not None else None
        y, ns = ops.kda_layer(x, _kda_w(weights, cfg, i), cfg, cu_seqlens, lstate, kda_core, d)
        if dumps is not None:
            for k, v in d.items():
                dumps[f"layers.{i}.kda.{k}"] = v
        return y, ns
    cache = None if lstate is None else lstate.get("latent")
    y, nc = ops.gated_mla(x, _mla_w(weights, cfg, i), cfg, cu_seqlens, cache)
    return y, {"latent": nc}


def forward(cfg: Config, weights: dict, ids, cu_seqlens=None, state=None,
            return_state: bool = False, dumps: Optional[dict] = None,
            kda_core: str = "recurrent", forced_routing: Optional[dict] = None,
            logits: str = "all"):
    """Decoder forward (K3-SPEC §7).

    ids: ``[T]`` packed token ids; cu_seqlens ``[N+1]`` or None.
    state: None (fresh sequences) or the decode state returned by a previous
    call for the *same* N sequences: ``{layer_idx: {...}}`` with, for KDA
    layers, ``conv_q/conv_k/conv_v [N, C, K-1]`` (last K-1 pre-conv inputs)
    and ``recurrent [N, H, K, V]``; for MLA layers ``latent``: list of N
    arrays ``[L_n, kv_lora_rank + qk_rope_head_dim]``.
    dumps: if a dict, filled with intermediates (``embed``, ``layers.{i}.attn_in``,
    ``layers.{i}.attn_out``, ``layers.{i}.mlp_in``, ``layers.{i}.mlp_out``,
    ``layers.{i}.router_indices``, ``final_hidden``, ...).
    forced_routing: optional ``{layer_idx: indices [T, k]}``.
    logits: ``"all"`` gives ``[T, vocab]``; ``"last"`` only each sequence's
    last token, ``[N, vocab]`` (what k3-compile's ``logits=last`` computes:
    the rows are selected before the final norm and the head).
    Returns logits, or ``(logits, new_state)`` with return_state.
    """
    if logits not in ("all", "last"):
        raise ValueError(f"logits must be 'all' or 'last', got {logits!r}")
    policy = getattr(cfg, "activation_dtype", None) or "f32"
    if policy not in ("f32", "bf16"):
        raise ValueError(f"activation_dtype must be 'f32' or 'bf16', got {policy!r}")
    saved = ops._ACT_BF16
    ops._ACT_BF16 = policy == "bf16"
    try:
        return _forward(cfg, weights, ids, cu_seqlens, state, return_state, dumps, kda_core,
                        forced_routing, logits)
    finally:
        ops._ACT_BF16 = saved


def _forward(cfg, weights, ids, cu_seqlens, state, return_state, dumps, kda_core,
             forced_routing, logits):
    R = ops.act
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    T = ids.shape[0]
    eps = cfg.rms_norm_eps
    state = state or {}
    new_state = {}
    h = R(ops.embedding(ids, _get(weights, "model.embed_tokens.weight")))
    if dumps is not None:
        dumps["embed"] = h
    use_ar = cfg.attn_res_block_size is not None
    ar = ops.AttnResState(h, cfg.attn_res_block_size) if use_ar else None
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        if use_ar:
            x = ar.pre_attn(i, _get(weights, p + "self_attention_res_norm.weight"),
                            _get(weights, p + "self_attention_res_proj.weight"), eps)
        else:
            x = h
        xin = R(ops.rms_norm(x, _get(weights, p + "input_layernorm.weight"), eps))
        a, new_state[i] = _attn(cfg, weights, i, xin, cu_seqlens, state.get(i), kda_core, dumps)
        if use_ar:
            ar.add(a)
            y = ar.mix(_get(weights, p + "mlp_res_norm.weight"), _get(weights, p + "mlp_res_proj.weight"), eps)
        else:
            h = R(h + a)
            y = h
        yin = R(ops.rms_norm(y, _get(weights, p + "post_attention_layernorm.weight"), eps))
        m = _mlp(cfg, weights, i, yin, forced_routing, dumps)
        if use_ar:
            ar.add(m)
        else:
            h = R(h + m)
        if dumps is not None:
            dumps[f"layers.{i}.attn_in"] = xin
            dumps[f"layers.{i}.attn_out"] = a
            dumps[f"layers.{i}.mlp_in"] = yin
            dumps[f"layers.{i}.mlp_out"] = m
            dumps[f"layers.{i}.hidden"] = ar.partial if use_ar else h
    if use_ar:
        if dumps is not None:
            dumps["attn_res_blocks"] = list(ar.blocks)
        h = ar.mix(_get(weights, "model.output_attn_res_norm.weight"),
                   _get(weights, "model.output_attn_res_proj.weight"), eps)
    if logits == "last":
        h = ops.last_tokens(h, cu_seqlens if cu_seqlens is not None else [0, T])
    hn = R(ops.rms_norm(h, _get(weights, "model.norm.weight"), eps))
    if dumps is not None:
        dumps["final_hidden"] = hn
    head = (_get(weights, "model.embed_tokens.weight") if cfg.tie_word_embeddings
            else _get(weights, "lm_head.weight"))
    out = ops.linear(hn, head)
    return (out, new_state) if return_state else out


def greedy_generate(cfg, weights, prompt_ids, n_new, kda_core="recurrent"):
    """Prefill one prompt then decode ``n_new`` tokens greedily with carried state."""
    logits, st = forward(cfg, weights, prompt_ids, state=None, return_state=True, kda_core=kda_core)
    out = []
    nxt = int(ops.argmax_sample(logits[-1]))
    for _ in range(n_new):
        out.append(nxt)
        logits, st = forward(cfg, weights, [nxt], state=st, return_state=True, kda_core=kda_core)
        nxt = int(ops.argmax_sample(logits[-1]))
    return out


# ----------------------------------------------------------------------------
# random weights
# ----------------------------------------------------------------------------

def weight_shapes(cfg: Config) -> dict:
    """All model-side tensor names and shapes (canonical names) for ``cfg``."""
    D = cfg.hidden_size
    S = {"model.embed_tokens.weight": (cfg.vocab_size, D), "model.norm.weight": (D,)}
    if not cfg.tie_word_embeddings:
        S["lm_head.weight"] = (cfg.vocab_size, D)
    if cfg.attn_res_block_size is not None:
        S["model.output_attn_res_norm.weight"] = (D,)
        S["model.output_attn_res_proj.weight"] = (1, D)
    H, d, Kc = cfg.kda_num_heads, cfg.kda_head_dim, cfg.short_conv_kernel_size
    P = H * d
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        S[p + "input_layernorm.weight"] = (D,)
        S[p + "post_attention_layernorm.weight"] = (D,)
        if cfg.attn_res_block_size is not None:
            for n in ("self_attention_res", "mlp_res"):
                S[p + n + "_norm.weight"] = (D,)
                S[p + n + "_proj.weight"] = (1, D)
        a = p + "self_attn."
        if cfg.is_kda(i):
            for n in ("q", "k", "v"):
                S[a + n + "_proj.weight"] = (P, D)
                S[a + n + "_conv1d.weight"] = (P, 1, Kc)
            S[a + "f_a_proj.weight"] = (d, D)
            S[a + "f_b_proj.weight"] = (P, d)
            S[a + "A_log"] = (max(H, d) if cfg.gate_lower_bound is not None else H,)
            S[a + "dt_bias"] = (P,)
            S[a + "b_proj.weight"] = (H, D)
            if cfg.use_full_rank_gate:
                S[a + "g_proj.weight"] = (P, D)
            else:
                S[a + "g_a_proj.weight"] = (d, D)
                S[a + "g_b_proj.weight"] = (P, d)
            S[a + "o_norm.weight"] = (d,)
            S[a + "o_proj.weight"] = (D, P)
        else:
            Hm = cfg.num_attention_heads
            qd = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
            if cfg.q_lora_rank is not None:
                S[a + "q_a_proj.weight"] = (cfg.q_lora_rank, D)
                S[a + "q_a_layernorm.weight"] = (cfg.q_lora_rank,)
                S[a + "q_b_proj.weight"] = (Hm * qd, cfg.q_lora_rank)
            else:
                S[a + "q_proj.weight"] = (Hm * qd, D)
            S[a + "kv_a_proj_with_mqa.weight"] = (cfg.kv_lora_rank + cfg.qk_rope_head_dim, D)
            S[a + "kv_a_layernorm.weight"] = (cfg.kv_lora_rank,)
            S[a + "kv_b_proj.weight"] = (Hm * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank)
            if cfg.mla_use_output_gate:
                S[a + "g_proj.weight"] = (Hm * cfg.v_head_dim, D)
            S[a + "o_proj.weight"] = (D, Hm * cfg.v_head_dim)
        if cfg.is_moe(i):
            m = p + "block_sparse_moe."
            Dm = cfg.routed_expert_hidden_size or D
            I = cfg.moe_intermediate_size
            S[m + "gate.weight"] = (cfg.num_experts, D)
            S[m + "gate.e_score_correction_bias"] = (cfg.num_experts,)
            if cfg.routed_expert_hidden_size is not None:
                S[m + "routed_expert_down_proj.weight"] = (Dm, D)
                S[m + "routed_expert_up_proj.weight"] = (D, Dm)
                if cfg.latent_moe_use_norm:
                    S[m + "routed_expert_norm.weight"] = (Dm,)
            for e in range(cfg.num_experts):
                S[f"{m}experts.{e}.w1.weight"] = (I, Dm)
                S[f"{m}experts.{e}.w3.weight"] = (I, Dm)
                S[f"{m}experts.{e}.w2.weight"] = (Dm, I)
            if cfg.num_shared_experts:
                Is = I * cfg.num_shared_experts
                S[m + "shared_experts.gate_proj.weight"] = (Is, D)
                S[m + "shared_experts.up_proj.weight"] = (Is, D)
                S[m + "shared_experts.down_proj.weight"] = (D, Is)
        else:
            S[p + "mlp.gate_proj.weight"] = (cfg.intermediate_size, D)
            S[p + "mlp.up_proj.weight"] = (cfg.intermediate_size, D)
            S[p + "mlp.down_proj.weight"] = (D, cfg.intermediate_size)
    return S


def random_tensor(name: str, shp, rng, kda_heads: int, dtype=np.float64) -> np.ndarray:
    """One weight of random_weights' recipe, drawn from ``rng`` in ``dtype``
    (float64 there; bench/make_checkpoint.py draws float32, tensor by
    tensor)."""
    def normal(shape):
        return rng.standard_normal(shape, dtype=dtype)

    if name.endswith("A_log"):
        a = np.zeros(shp, dtype)
        a[:kda_heads] = np.log(rng.uniform(0.5, 2.0, size=kda_heads))
        return a
    if name.endswith("dt_bias"):
        return 0.5 * normal(shp)
    if name.endswith("e_score_correction_bias"):
        return 0.05 * normal(shp)
    if "conv1d" in name:
        return normal(shp) / np.sqrt(2.0)
    if name.endswith("_res_proj.weight"):
        return normal(shp) / np.sqrt(shp[-1]) * 2.0
    if len(shp) == 1 or "norm" in name:
        return 1.0 + 0.1 * normal(shp)
    if name == "model.embed_tokens.weight":
        return normal(shp)
    return normal(shp) / np.sqrt(shp[-1])


def random_weights(cfg: Config, seed: int = 0) -> dict:
    """Well-scaled random weights (float64) under the canonical names.

    Linear weights ~ N(0, 1/in); norm weights 1 + 0.1·N; AttnRes pseudo-queries
    ~ N(0, 1/D) (so mixing is non-uniform); conv taps ~ N(0, 1/2); A_log ~
    log U(0.5, 2) (zero padding past H when the shape is padded); dt_bias ~
    0.5·N; router bias ~ 0.05·N.  Kept in float64.
    """
    rng = np.random.default_rng(seed)
    return {name: random_tensor(name, shp, rng, cfg.kda_num_heads)
            for name, shp in weight_shapes(cfg).items()}


# ----------------------------------------------------------------------------
# safetensors (own minimal codec, so BF16 works through ml_dtypes)
# ----------------------------------------------------------------------------

_DT = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
       "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def _bf16():
    import ml_dtypes
    return np.dtype(ml_dtypes.bfloat16)


def _dtype_name(dt):
    dt = np.dtype(dt)
    if dt == _bf16():
        return "BF16"
    for k, v in _DT.items():
        if np.dtype(v) == dt:
            return k
    raise ValueError(f"unsupported dtype {dt}")


def save_safetensors(path, tensors: dict, dtype=None, metadata: Optional[dict] = None):
    """Write a .safetensors file.  ``dtype``: None (keep), 'bf16', 'f32', 'f64' or a numpy dtype
    applied to floating tensors.  BF16 is written through ml_dtypes.  Integer tensors are
    written unchanged (uint8 as "U8": the MXFP4 ``weight_packed``/``weight_scale`` pairs of
    ``k3ref.mxfp4.quantize_experts``)."""
    conv = {"bf16": _bf16(), "f32": np.float32, "f64": np.float64, None: None}.get(dtype, dtype)
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        if conv is not None and (np.issubdtype(arr.dtype, np.floating) or arr.dtype == _bf16()):
            arr = arr.astype(conv)
        arr = np.ascontiguousarray(arr)
        b = arr.tobytes()
        header[name] = {"dtype": _dtype_name(arr.dtype), "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def load_safetensors(path, to_float64: bool = True, strip_prefix: str = "language_model."):
    """Read a .safetensors file (BF16 supported).  Floating tensors become float64 unless
    ``to_float64`` is False; ``strip_prefix`` is removed from names that carry it.

    With ``to_float64``, an MXFP4 pair ``X.weight_packed`` + ``X.weight_scale`` (both U8,
    docs/mxfp4.md) is dequantized into ``X.weight`` (float64, ``k3ref.mxfp4.dequantize``)
    and the pair itself is left out of the result."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = _bf16() if info["dtype"] == "BF16" else np.dtype(_DT[info["dtype"]])
        s, e = info["data_offsets"]
        arr = np.frombuffer(data[s:e], dtype=dt).reshape(info["shape"])
        if to_float64 and (dt == _bf16() or np.issubdtype(dt, np.floating)):
            arr = arr.astype(np.float64)
        else:
            arr = arr.copy()
        if strip_prefix and name.startswith(strip_prefix):
            name = name[len(strip_prefix):]
        out[name] = arr
    if to_float64:
        for name in [n for n in out if n.endswith(".weight_packed")]:
            base = name[:-len(".weight_packed")]
            sname = base + ".weight_scale"
            if sname in out and out[name].dtype == np.uint8 and out[sname].dtype == np.uint8:
                if base + ".weight" in out:
                    raise ValueError(f"{path}: both {base}.weight and its MXFP4 pair are present")
                out[base + ".weight"] = mxfp4.dequantize(out.pop(name), out.pop(sname))
    return out


# ----------------------------------------------------------------------------
# tiny configs used by the tests (and handy for other engineers)
# ----------------------------------------------------------------------------

def tiny_k3_config(**over) -> Config:
    """K3-shaped toy: hidden 64, 8 layers = 2 × (3 KDA + 1 MLA), latent MoE with a shared
    expert, SiTU, lower-bounded gate, full-rank gate, gated MLA with q_lora, AttnRes block 4."""
    c = Config(hidden_size=64, num_hidden_layers=8, vocab_size=97, rms_norm_eps=1e-5,
               hidden_act="situ", activation_situ_beta=4.0, activation_situ_linear_beta=25.0,
               attn_res_block_size=4, intermediate_size=96, first_k_dense_replace=1,
               num_experts=8, num_experts_per_token=2, num_shared_experts=1,
               moe_intermediate_size=16, routed_expert_hidden_size=32, latent_moe_use_norm=True,
               routed_scaling_factor=1.0, moe_router_activation_func="sigmoid",
               moe_renormalize=True, num_attention_heads=2, q_lora_rank=24, kv_lora_rank=16,
               qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, mla_use_output_gate=True,
               kda_layers=[1, 2, 3, 5, 6, 7], full_attn_layers=[4, 8], kda_num_heads=2,
               kda_head_dim=16, short_conv_kernel_size=4, gate_lower_bound=-5.0,
               use_full_rank_gate=True, tie_word_embeddings=False)
    return dataclasses.replace(c, **over)


def tiny_kimi_linear_config(**over) -> Config:
    """Kimi-Linear-shaped toy: 4 layers (3 KDA + 1 MLA), plain residual, full-width experts,
    SiLU, softplus gate, low-rank output gate, MLA without q_lora and without output gate."""
    c = Config(hidden_size=48, num_hidden_layers=4, vocab_size=61, rms_norm_eps=1e-5,
               hidden_act="silu", activation_situ_beta=None, activation_situ_linear_beta=None,
               attn_res_block_size=None, intermediate_size=80, first_k_dense_replace=1,
               num_experts=6, num_experts_per_token=2, num_shared_experts=1,
               moe_intermediate_size=16, routed_expert_hidden_size=None, latent_moe_use_norm=False,
               routed_scaling_factor=2.446, moe_router_activation_func="sigmoid",
               moe_renormalize=True, num_attention_heads=2, q_lora_rank=None, kv_lora_rank=16,
               qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, mla_use_output_gate=False,
               kda_layers=[1, 2, 3], full_attn_layers=[4], kda_num_heads=2, kda_head_dim=16,
               short_conv_kernel_size=4, gate_lower_bound=None, use_full_rank_gate=False,
               tie_word_embeddings=False)
    return dataclasses.replace(c, **over)
