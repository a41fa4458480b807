"""Mirror of vLLM 0.33 `fused_moe/prepare_finalize/deepep_ht.py`: `DeepEPHTPrepareAndFinalize`
(`--all2all-backend deepep_high_throughput`): prepare -> prepare_async -> _do_dispatch ->
`Buffer.dispatch`; finalize -> _finalize -> `Buffer.combine`."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.deep_ep.buffer import Buffer


class DeepEPHTPrepareAndFinalize:
    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer

    def _do_dispatch(self, a1: float) -> Any:
        return self.buffer.dispatch(a1)

    def prepare_async(self, a1: float) -> Any:
        return self._do_dispatch(a1)

    def prepare(self, a1: float) -> Any:
        return self.prepare_async(a1)

    def _finalize(self, fused_expert_output: float) -> Any:
        return self.buffer.combine(fused_expert_output)

    def finalize(self, fused_expert_output: float) -> Any:
        return self._finalize(fused_expert_output)
