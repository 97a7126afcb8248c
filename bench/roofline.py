"""Roofline of KDA forward on an H200 for the shapes of ANCHORS.md.

Prints a markdown table: FLOPs (the Kimi Linear count), bytes (each input
read once, each output written once), the compute and memory floors, the
serial chain (state-update steps one (sequence, head) must take in order)
for the recurrence, FlashKDA's chunk of 16, a chunk of 64, and a chunk of 64
with S sequence segments, and where the anchors sit. No GPU needed.

    python3 bench/roofline.py > docs/roofline-table.md
"""
import math

COPY_BPS = 4.25e12        # measured device-to-device copy (ANCHORS.md)
BF16_FLOPS = 687e12       # measured cuBLAS bf16 GEMM 8192^3 (ANCHORS.md)
D = 128
# (name, sequences lengths, heads, fla ms, FlashKDA ms) from ANCHORS.md
SHAPES = [
    ("B1 T8192 H96", [8192], 96, 2.62, 1.40),
    ("B1 T8192 H64", [8192], 64, 1.75, 1.19),
    ("B1 T32768 H96", [32768], 96, 10.44, 5.46),
    ("B1 T2048 H96", [2048], 96, 1.49, 0.38),
    ("B8 T4096 H32", [4096] * 8, 32, 3.31, 1.54),
    ("8 x 1024 packed, H96", [1024] * 8, 96, 2.64, 1.20),
    ("32 x 512 packed, H32", [512] * 32, 32, 2.03, 0.84),
    ("2 x 16384 packed, H64", [16384] * 2, 64, 6.83, 3.32),
]


def row(name, lens, H, fla, fk, segments=8):
    T, N = sum(lens), len(lens)
    flops = H * sum(6 * t * D * D + 3 * t * 64 * D + t * 64 * 64 for t in lens)
    bytes_ = T * H * 1282 + 2 * N * H * D * D * 4
    mem_ms = bytes_ / COPY_BPS * 1e3
    flop_ms = flops / BF16_FLOPS * 1e3
    longest = max(lens)
    chain = {"recurrent": longest, "C16": math.ceil(longest / 16),
             "C64": math.ceil(longest / 64),
             f"C64 S{segments}": math.ceil(longest / (64 * segments)) + segments}
    fk_step_us = fk * 1e3 / chain["C16"]
    return (f"| {name} | {flops / 1e9:.0f} | {bytes_ / 1e6:.0f} | {flop_ms:.3f} | {mem_ms:.3f} | "
            f"{N * H} | {chain['recurrent']} | {chain['C16']} | {chain['C64']} | {chain[f'C64 S{segments}']} | "
            f"{fla:.2f} | {fk:.2f} ({fk / max(mem_ms, flop_ms):.1f}× floor, {fk_step_us:.1f} µs/step) |")


if __name__ == "__main__":
    print("| shape | GFLOP | MB moved | compute floor ms | memory floor ms | CTAs at 1 per (seq, head) | "
          "chain: recurrence | chain: C=16 | chain: C=64 | chain: C=64, 8 segments + scan | fla ms | FlashKDA ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in SHAPES:
        print(row(*s))
