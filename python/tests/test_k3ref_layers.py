"""Layer compositions recomputed from the spec formulas, written independently of ops' helpers."""
import numpy as np

from k3ref import model, ops
from k3ref_testutil import rel_err


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def rms(x, w, eps):
    return w * x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps)


def test_gated_mla_matches_spec_section3():
    cfg = model.tiny_k3_config()
    W = model.random_weights(cfg, 21)
    p = "model.layers.3.self_attn."
    w = {n[len(p):-len(".weight")]: v for n, v in W.items() if n.startswith(p)}
    rng = np.random.default_rng(0)
    T, D = 6, cfg.hidden_size
    x = rng.standard_normal((T, D))
    H, nope, rope, vd, r = 2, 8, 4, 8, 16
    q = (rms(x @ w["q_a_proj"].T, w["q_a_layernorm"], 1e-6) @ w["q_b_proj"].T).reshape(T, H, nope + rope)
    ckv = x @ w["kv_a_proj_with_mqa"].T
    kv = (rms(ckv[:, :r], w["kv_a_layernorm"], 1e-6) @ w["kv_b_proj"].T).reshape(T, H, nope + vd)
    kpe = ckv[:, r:]
    o = np.zeros((T, H, vd))
    for h in range(H):
        K = np.concatenate([kv[:, h, :nope], kpe], axis=1)
        s = q[:, h] @ K.T / np.sqrt(nope + rope)
        s = np.where(np.tril(np.ones((T, T))) > 0, s, -np.inf)
        pr = np.exp(s - s.max(1, keepdims=True))
        pr /= pr.sum(1, keepdims=True)
        o[:, h] = pr @ kv[:, h, nope:]
    y = (o.reshape(T, H * vd) * sig(x @ w["g_proj"].T)) @ w["o_proj"].T
    got, _ = ops.gated_mla(x, w, cfg)
    assert rel_err(got, y) < 1e-12


def test_kda_layer_matches_spec_section2():
    cfg = model.tiny_k3_config()
    W = model.random_weights(cfg, 22)
    p = "model.layers.1.self_attn."
    w = {n[len(p):].replace(".weight", ""): v for n, v in W.items() if n.startswith(p)}
    rng = np.random.default_rng(1)
    T, D, H, d = 7, cfg.hidden_size, 2, 16

    def conv_silu(u, wc):          # np.convolve with zero history, per channel
        out = np.zeros_like(u)
        for c in range(u.shape[1]):
            out[:, c] = np.convolve(u[:, c], wc[c, 0, ::-1])[:T]
        return out * sig(out)

    x = rng.standard_normal((T, D))
    q = conv_silu(x @ w["q_proj"].T, w["q_conv1d"]).reshape(T, H, d)
    k = conv_silu(x @ w["k_proj"].T, w["k_conv1d"]).reshape(T, H, d)
    v = conv_silu(x @ w["v_proj"].T, w["v_conv1d"]).reshape(T, H, d)
    f = ((x @ w["f_a_proj"].T) @ w["f_b_proj"].T).reshape(T, H, d)
    g = -5.0 * sig(np.exp(w["A_log"][:H])[None, :, None] * (f + w["dt_bias"].reshape(H, d)))
    beta = sig(x @ w["b_proj"].T)
    qn = q / np.sqrt((q ** 2).sum(-1, keepdims=True) + 1e-6) * d ** -0.5
    kn = k / np.sqrt((k ** 2).sum(-1, keepdims=True) + 1e-6)
    o = np.zeros((T, H, d))
    for h in range(H):
        S = np.zeros((d, d))
        for t in range(T):
            kk = kn[t, h]
            S = (np.eye(d) - beta[t, h] * np.outer(kk, kk)) @ np.diag(np.exp(g[t, h])) @ S \
                + beta[t, h] * np.outer(kk, v[t, h])
            o[t, h] = S.T @ qn[t, h]
    z = (x @ w["g_proj"].T).reshape(T, H, d)
    on = rms(o, w["o_norm"], cfg.rms_norm_eps) * sig(z)
    y = on.reshape(T, H * d) @ w["o_proj"].T
    got, st = ops.kda_layer(x, w, cfg)
    assert rel_err(got, y) < 1e-11
    # decode-state conv windows hold the last K-1 pre-conv inputs
    assert rel_err(st["conv_k"][0], (x @ w["k_proj"].T)[-3:].T) < 1e-15


def test_partial_rms_norm_normalises_the_leading_columns_only():
    """k3.partial_rms_norm's reference: the first len(w) columns as RMSNorm of
    those columns alone (written out here), the others unchanged."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 2, 20)) * 3
    w = rng.standard_normal(16) * 0.5 + 1.0
    y = ops.partial_rms_norm(x, w, 1e-6)
    assert y.shape == x.shape
    assert rel_err(y[..., :16], rms(x[..., :16], w, 1e-6)) < 1e-15
    assert np.array_equal(y[..., 16:], x[..., 16:])
