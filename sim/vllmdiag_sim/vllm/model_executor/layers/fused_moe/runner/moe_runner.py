"""Mirror of vLLM 0.33 `fused_moe/runner/moe_runner.py`: `MoERunner.forward` -> `_forward_impl`:
route (select_experts), then the modular kernel (dispatch, experts, combine)."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.model_executor.layers.fused_moe.modular_kernel import FusedMoEModularKernel
from vllmdiag_sim.vllm.model_executor.layers.fused_moe.router.fused_moe_router import FusedMoERouter


class MoERunner:
    def __init__(self, kernel: FusedMoEModularKernel) -> None:
        self.router, self.kernel = FusedMoERouter(), kernel

    def _forward_impl(self, hidden_states: float, stuck_ack: str | None) -> Any:
        self.router.select_experts(hidden_states, stuck_ack)
        return self.kernel.apply(hidden_states)

    def forward(self, hidden_states: float, stuck_ack: str | None = None) -> Any:
        return self._forward_impl(hidden_states, stuck_ack)
