"""Mirror of `vllm/v1/worker/gpu_worker.py`: the object `_execute_worker_rpc` dispatches to."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim import collective
from vllmdiag_sim.vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
from vllmdiag_sim.vllm.distributed.device_communicators.pynccl_wrapper import NCCLLibrary
from vllmdiag_sim.vllm.distributed.parallel_state import GroupCoordinator, init_model_parallel_group
from vllmdiag_sim.vllm.v1.worker.gpu_model_runner import GPUModelRunner


class Worker:
    def __init__(self, rank: int, tp_size: int) -> None:
        self.rank, self.tp_size = rank, tp_size
        self.model_runner = GPUModelRunner(rank)
        self.tp_group: GroupCoordinator | None = None

    def init_device(self, hub_port: int | None) -> None:
        """Joins the TP group's rendezvous (where a real worker would create NCCL comms)."""
        comm = None
        if self.tp_size > 1 and hub_port is not None:
            comm = PyNcclCommunicator(NCCLLibrary(collective.connect(hub_port, self.rank), self.rank))
        self.tp_group = GroupCoordinator(self.rank, self.tp_size, comm)
        init_model_parallel_group(self.tp_group)

    def init_dp_group(self, dp_comm: Any, dp_rank: int) -> None:
        self.model_runner.dp_comm, self.model_runner.dp_rank = dp_comm, dp_rank

    def execute_model(self, scheduler_output: dict[str, Any]) -> dict[str, Any]:
        return self.model_runner.execute_model(scheduler_output)

    def sample_tokens(self, grammar_output: dict[str, Any] | None) -> dict[str, Any]:
        return self.model_runner.sample_tokens(grammar_output)

    def check_health(self) -> None:
        return None
