"""Per-kernel CUDA-event profile of two KDA artifacts on the same inputs
(bench/kda_forward.py's prefill case), to see which kernel moved between
two builds:  python3 bench/kda_profile_pair.py NEW.k3bin OLD.k3bin T H"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "python"))
import torch  # noqa: E402
import k3  # noqa: E402
import kda_forward as f  # noqa: E402

new, old, T, H = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
x = f.prefill_inputs(torch, [T], H, "random", torch.device("cuda:0"))
x["dt_bias"] = x["dt_bias"].reshape(-1).contiguous()  # the artifact's [H K]
for label, path in (("new", new), ("old", old)):
    s = k3.Session(path, device="cuda:0")
    for _ in range(3):
        s.run("forward", outputs="dlpack", **x)
    s.profiling = True
    s.reset_profile()
    for _ in range(20):
        s.run("forward", outputs="dlpack", **x)
    for row in s.profile():
        print(label, row)
    s.close()
