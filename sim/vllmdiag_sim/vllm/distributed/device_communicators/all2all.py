"""Mirror of vLLM 0.32 `device_communicators/all2all.py`: `AgRsAll2AllManager`, the all-gather / reduce-scatter
MoE all2all (the only one the CPU platform has): dispatch gathers every DP rank's tokens, combine reduces them
back. A DP rank that never reaches its MoE layer leaves its peers in the dispatch's all_gather."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.distributed.parallel_state import GroupCoordinator


class AgRsAll2AllManager:
    def __init__(self, dp_group: GroupCoordinator) -> None:
        self.dp_group = dp_group

    def dispatch(self, hidden_states: float) -> Any:
        return self.dp_group.all_gatherv(hidden_states)

    def combine(self, hidden_states: float) -> Any:
        return self.dp_group.reduce_scatterv(hidden_states)
