"""Storage precision of checkpoint tensors, for comparing compiled models
with the oracle on exactly the values the runtime loads."""
import ml_dtypes
import numpy as np

from . import model

# Tensors the checkpoint keeps in f32 (K3-SPEC.md §2, §5); the rest are bf16.
F32_WEIGHTS = ("conv1d", "A_log", "dt_bias", "o_norm", "e_score_correction_bias")


def rounded_random_weights(cfg, seed):
    """model.random_weights rounded to their storage precision, as float64."""
    out = {}
    for name, w in model.random_weights(cfg, seed).items():
        storage = np.float32 if any(s in name for s in F32_WEIGHTS) else ml_dtypes.bfloat16
        out[name] = w.astype(storage).astype(np.float64)
    return out


def rel_err(got, ref):
    """Normwise relative error ||got - ref|| / ||ref||."""
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
