"""Mirror of `vllm/config/parallel.py`: the few parallel settings the sim honours."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_port: int = 0
    distributed_executor_backend: str = "mp"  # mp | ray
    frontend: bool = True  # False: an offline LLM() script, no HTTP client to start steps
    dp_hub_ports: tuple[int, ...] = ()  # DP > 1: one DP-group rendezvous per TP rank (the DP sync)

    @property
    def local_world_size(self) -> int:
        return self.tensor_parallel_size // self.nnodes

    @property
    def first_local_rank(self) -> int:
        return self.node_rank * self.local_world_size

    @property
    def is_leader(self) -> bool:
        return self.node_rank == 0

    @property
    def uses_multiproc_executor(self) -> bool:
        # vLLM runs TP=1 in-process (UniProcExecutor) unless DP needs a worker per engine.
        return (self.tensor_parallel_size > 1 or self.data_parallel_size > 1 or self.nnodes > 1
                or self.distributed_executor_backend == "ray")

    def worker_suffix(self, dp_rank: int, tp_rank: int) -> str:
        parts = []
        if self.data_parallel_size > 1:
            parts.append(f"DP{dp_rank}")
        if self.tensor_parallel_size > 1:
            parts.append(f"TP{tp_rank}")
        return "_".join(parts)

    def engine_name(self, dp_rank: int) -> str:
        return f"EngineCore_DP{dp_rank}" if self.data_parallel_size > 1 else "EngineCore"
