"""Mirror of `vllm/v1/engine/llm_engine.py`: `LLM.generate()` drives the engine through `step()`."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.v1.engine.core_client import InprocClient


class LLMEngine:
    def __init__(self, engine_core: InprocClient) -> None:
        self.engine_core = engine_core

    def has_unfinished_requests(self) -> bool:
        return self.engine_core.has_work()

    def step(self) -> list[dict[str, Any]]:
        return self.engine_core.get_output()
