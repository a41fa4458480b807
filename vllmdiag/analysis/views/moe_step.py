"""Which MoE all2all step (dispatch or combine) a stack stands in, if any (pure; gpu.py, gpu_groups.py).

A rank there waits in its expert-parallel group's collective, not its TP group's: the TP comparison
leaves it to the EP comparison (gpu_groups.ep_rank_odd)."""

from __future__ import annotations

from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.vocab.stack_classes import COLLECTIVE

EP_OPS = ("moe_dispatch", "moe_combine")  # stack_rules.yaml ops of the MoE all2all

# The MoE all2all step each frame stands for. DeepEP's buffer frames carry it as the rules' op; vLLM
# 0.33's default backend (allgather_reducescatter, which "naive" and "pplx" now fall back to) runs an
# all_gatherv / reduce_scatterv underneath, so its innermost op says nothing of MoE: the matched
# dispatch/combine frame does.
EP_STEP = {"dispatch": "moe_dispatch", "low_latency_dispatch": "moe_dispatch", "_do_dispatch": "moe_dispatch",
           "dispatch_router_logits": "moe_dispatch", "prepare": "moe_dispatch", "prepare_async": "moe_dispatch",
           "combine": "moe_combine", "low_latency_combine": "moe_combine", "combine_into_output": "moe_combine",
           "finalize": "moe_combine", "_finalize": "moe_combine", "finalize_async": "moe_combine"}


def ep_op(c: StackClass | None) -> str | None:
    if c is None or c.name != COLLECTIVE:
        return None
    if c.op in EP_OPS:
        return c.op
    funcs = [kf.split(" ", 1)[0].rsplit(".", 1)[-1] for kf in c.key_frames]
    return next((EP_STEP[f] for f in funcs if f in EP_STEP), None)
