"""The anchors' side of bench/ncu_gemms.sh: cuBLAS and torch._grouped_mm
at the prefill's GEMM shapes (Kimi-Linear-48B, T = 8192), each launched
once after its inputs exist, so that Nsight Compute's kernel filter
(`gemm|nvjet|cutlass|grouped`) sees one launch per shape.

    ncu ... python3 bench/ncu_gemms.py
"""

import torch


def routed_offsets(tokens, experts, top_k, gen):
    """Per-expert row ends of `tokens` x `top_k` uniformly routed pairs, as
    torch._grouped_mm takes them (int32, cumulative)."""
    scores = torch.rand(tokens, experts, generator=gen, device="cuda")
    chosen = scores.topk(top_k, dim=1).indices.flatten()
    counts = torch.bincount(chosen, minlength=experts)
    return counts.cumsum(0).to(torch.int32)


def main():
    gen = torch.Generator(device="cuda").manual_seed(0)
    bf16 = dict(device="cuda", dtype=torch.bfloat16)
    tokens, hidden, experts, top_k, inter = 8192, 2304, 256, 8, 1024
    x = torch.randn(tokens, hidden, generator=gen, **bf16)
    w_qkv = torch.randn(4096, hidden, generator=gen, **bf16) * 0.02
    offs = routed_offsets(tokens, experts, top_k, gen)
    xs = torch.randn(tokens * top_k, hidden, generator=gen, **bf16)
    w13t = torch.randn(experts, hidden, 2 * inter, generator=gen, **bf16) * 0.02
    h = torch.randn(tokens * top_k, inter, generator=gen, **bf16)
    w2t = torch.randn(experts, inter, hidden, generator=gen, **bf16) * 0.02
    torch.cuda.synchronize()
    torch.nn.functional.linear(x, w_qkv)  # linear_2's shape (q, k or v)
    torch._grouped_mm(xs, w13t, offs=offs)  # moe_grouped_glu's
    torch._grouped_mm(h, w2t, offs=offs)  # moe_grouped_down's
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
