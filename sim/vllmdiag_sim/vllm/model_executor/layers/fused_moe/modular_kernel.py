"""Mirror of vLLM 0.33 `fused_moe/modular_kernel.py`: `FusedMoEModularKernel.apply` = prepare (the
all2all dispatch), the experts, finalize (the all2all combine)."""

from __future__ import annotations

from typing import Any, Protocol


class PrepareAndFinalize(Protocol):
    def prepare(self, a1: float) -> Any: ...

    def finalize(self, fused_expert_output: float) -> Any: ...


class FusedMoEModularKernel:
    def __init__(self, prepare_finalize: PrepareAndFinalize) -> None:
        self.prepare_finalize = prepare_finalize

    def _prepare(self, hidden_states: float) -> Any:
        return self.prepare_finalize.prepare(hidden_states)

    def _fused_experts(self, dispatched: Any) -> float:
        return float(sum(dispatched)) if isinstance(dispatched, list) else float(dispatched)

    def _finalize(self, fused_out: float) -> Any:
        return self.prepare_finalize.finalize(fused_out)

    def apply(self, hidden_states: float) -> Any:
        return self._finalize(self._fused_experts(self._prepare(hidden_states)))
