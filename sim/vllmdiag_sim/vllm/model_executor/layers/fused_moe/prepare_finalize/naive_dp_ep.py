"""Mirror of vLLM 0.32 `fused_moe/prepare_finalize/naive_dp_ep.py`: a MoE layer at DP > 1 without DeepEP:
prepare dispatches (all-gather across the DP ranks), finalize combines (reduce-scatter)."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.distributed.device_communicators.all2all import AgRsAll2AllManager


class MoEPrepareAndFinalizeNaiveDPEPModular:
    def __init__(self, all2all_manager: AgRsAll2AllManager) -> None:
        self.all2all_manager = all2all_manager

    def prepare(self, a1: float) -> Any:
        return self.all2all_manager.dispatch(a1)

    def finalize(self, fused_expert_output: float) -> Any:
        return self.all2all_manager.combine(fused_expert_output)
