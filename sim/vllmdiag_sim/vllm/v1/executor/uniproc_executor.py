"""Mirror of `vllm/v1/executor/uniproc_executor.py`: TP=1 runs the model inside EngineCore."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.v1.worker.gpu_worker import Worker


class UniProcExecutor:
    def __init__(self) -> None:
        self.driver_worker = Worker(0, 1)
        self.driver_worker.init_device(None)

    def collective_rpc(self, method: str, timeout: float | None = None, args: tuple[Any, ...] = (),
                       kwargs: dict[str, Any] | None = None, non_block: bool = False,
                       unique_reply_rank: int | None = None) -> list[Any]:
        return [getattr(self.driver_worker, method)(*args, **(kwargs or {}))]

    def execute_model(self, scheduler_output: dict[str, Any]) -> list[Any]:
        return self.collective_rpc("execute_model", args=(scheduler_output,))
