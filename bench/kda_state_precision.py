"""How much the bf16 KDA state (k3-compile kda-state-dtype=bf16) costs in
accuracy, on the f64 oracle alone (CPU; no GPU needed):

1. The KDA core, decode-like: one token a call, the state rounded to bf16
   at every call's end (what the runtime stores), against the exact
   recurrence, over 1024 steps of H = 4 heads, K = V = 128, q and k
   L2-normalised, beta = sigmoid(randn), three gate regimes: the anchors'
   recipe (the lower-bounded gate at -5 with random inputs, decays spread
   over [e^-5, 1)), "slow" (decays in [0.99, 1): long memory, the
   worst case for accumulated rounding) and "none" (g = 0: no forgetting).
   Recorded: the normwise relative error of the state and of the outputs
   at steps 1, 16, 64, 256 and 1024.
2. Whole models, teacher-forced (a fixed random prompt of 16 tokens, then
   256 one-token decode calls): the logits of the oracle with the state
   rounded at each call's end against the exact-state oracle, for the tiny
   K3 and the tiny Kimi-Linear (examples/), random bf16-representable
   weights.

    .venv/bin/python bench/kda_state_precision.py     # writes bench/results/kda-state-precision-cpu-<date>.json
"""
import dataclasses
import datetime
import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))
from k3ref import model, ops  # noqa: E402
from k3ref.storage import rel_err, rounded_random_weights  # noqa: E402
from k3ref.examples import tiny_k3_example_config  # noqa: E402
import protocol  # noqa: E402

STEPS = [1, 16, 64, 256, 1024]
H, D = 4, 128


def bf16(x):
    return x.astype(ml_dtypes.bfloat16).astype(np.float64)


def core_study(regime, seed=0):
    rng = np.random.default_rng(seed)
    n = STEPS[-1]
    q = rng.standard_normal((n, H, D))
    k = rng.standard_normal((n, H, D))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((n, H, D))
    beta = 1 / (1 + np.exp(-rng.standard_normal((n, H))))
    if regime == "anchors":
        g = -5.0 / (1 + np.exp(-(rng.standard_normal((n, H, D)))))  # -5 sigmoid(x)
    elif regime == "slow":
        g = np.log(rng.uniform(0.99, 1.0, (n, H, D)))
    else:
        g = np.zeros((n, H, D))
    exact = np.zeros((H, D, D))
    stored = np.zeros((H, D, D))
    rows = []
    o_exact, o_stored = [], []
    for t in range(n):
        for S in (exact, stored):
            S *= np.exp(g[t])[:, :, None]
            u = beta[t][:, None] * (v[t] - np.einsum("hkv,hk->hv", S, k[t]))
            S += k[t][:, :, None] * u[:, None, :]
        stored[:] = bf16(stored)  # the call ends: the runtime stores bf16
        o_exact.append(np.einsum("hkv,hk->hv", exact, q[t]))
        o_stored.append(np.einsum("hkv,hk->hv", stored, q[t]))
        if t + 1 in STEPS:
            rows.append({"step": t + 1, "state_rel_err": rel_err(stored, exact),
                         "output_rel_err": rel_err(np.array(o_stored), np.array(o_exact)),
                         "output_rel_err_last": rel_err(o_stored[-1], o_exact[-1])})
    return rows


def model_study(name, cfg, prompt=16, steps=256, seed=7):
    weights = rounded_random_weights(cfg, seed=3)
    ids = np.random.default_rng(seed).integers(0, cfg.vocab_size, prompt + steps).astype(np.int32)
    out = {}
    for mode, c in (("exact", cfg), ("bf16", dataclasses.replace(cfg, kda_state_dtype="bf16"))):
        with ops.mla_latent_form():
            logits, st = model.forward(c, weights, ids[:prompt], return_state=True)
            rows = [logits[-1]]
            for i in range(prompt, prompt + steps):
                logits, st = model.forward(c, weights, ids[i:i + 1], state=st, return_state=True)
                rows.append(logits[-1])
        out[mode] = np.stack(rows)
    per_step = [rel_err(out["bf16"][i], out["exact"][i]) for i in range(len(out["exact"]))]
    return {"model": name, "prompt": prompt, "decode_steps": steps,
            "logits_rel_err_all": rel_err(out["bf16"], out["exact"]),
            "logits_rel_err_max_step": max(per_step),
            "logits_rel_err_at": {str(s): per_step[s] for s in (1, 16, 64, 256) if s < len(per_step)},
            "argmax_agreement": float(np.mean(out["bf16"].argmax(-1) == out["exact"].argmax(-1)))}


def main():
    from test_import_oracle import oracle_config  # noqa: E402 (test/e2e)
    doc = {"benchmark": "kda-state-precision",
           "environment": {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                           "commit": protocol.commit(), "device": "CPU (float64 oracle, python/k3ref)"},
           "what": "bf16 storage of the KDA state between calls against the exact state",
           "core": {r: core_study(r) for r in ("anchors", "slow", "none")},
           "models": []}
    doc["models"].append(model_study("tiny-k3", tiny_k3_example_config()))
    kl = oracle_config(json.loads((ROOT / "examples/configs/tiny-kimi-linear.json").read_text()))
    doc["models"].append(model_study("tiny-kimi-linear", kl))
    stamp = doc["environment"]["date"].replace(":", "").replace("-", "")
    path = ROOT / "bench" / "results" / f"kda-state-precision-cpu-{stamp}.json"
    path.write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "test" / "e2e"))
    main()
