"""transformers' MoE experts block beside ours (issue 15's second anchor):
`KimiLinearExperts`, the routed experts of transformers'
`KimiLinearForCausalLM`, on bench/moe.py's device tensors (the same x,
routing and weights; its fused [E, 2I, D] gate/up operand is the one the
torch anchor multiplies, so no copy of the experts is made).

Like our row and the torch anchor it takes the routing as given: its
`forward(hidden_states, top_k_index, top_k_weights)` is the block after
the router. One row per experts implementation transformers offers
(`config._experts_implementation`): `eager` (a Python loop over the hit
experts, the model's default) and `grouped_mm` (sort, `torch._grouped_mm`,
index_add). An implementation this transformers lacks is a failed row.
Each row's normwise error against the float64 reference on the sampled
tokens is recorded before it is timed, as for the torch anchor.
"""
from __future__ import annotations

import protocol

IMPLEMENTATIONS = ("eager", "grouped_mm")


def experts_block(w13, w2, impl: str):
    """A KimiLinearExperts whose weights are `w13` ([E, 2I, D], gate rows
    then up rows) and `w2` ([E, D, I]), run by `impl`."""
    import torch
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear import modeling_kimi_linear as hf
    e, two_i, d = w13.shape
    cfg = KimiLinearConfig(hidden_size=d, moe_intermediate_size=two_i // 2, hidden_act="silu")
    cfg._experts_implementation = impl
    # Built on the meta device: the weights are the bench's tensors.
    with torch.device("meta"):
        block = hf.KimiLinearExperts(cfg)
    block.num_experts, block.hidden_dim, block.intermediate_dim = e, d, two_i // 2
    block.gate_up_proj = torch.nn.Parameter(w13, requires_grad=False)
    block.down_proj = torch.nn.Parameter(w2, requires_grad=False)
    return block.eval()


def rows(res, name, c, w13, w2, shape, flop) -> None:
    """transformers' rows on bench/moe.py's case `c`."""
    import torch
    x, idx, wts = c["x"], c["idx"].long(), c["wts"]
    for impl in IMPLEMENTATIONS:
        def row(impl=impl):
            block = experts_block(w13, w2, impl)

            def forward():
                with torch.no_grad():
                    return block(x, idx, wts)
            err = protocol.rel_err(forward()[c["rows"]], c["ref"])
            out = {**protocol.summary(protocol.cuda_event_times(forward)), "err_vs_oracle": err}
            return {**out, "TFLOPs": flop / out["median_ms"] / 1e9}
        res.guard(row, case=name, impl="transformers", variant=f"KimiLinearExperts ({impl})",
                  shape=shape)
