"""Mirror of `vllm/distributed/parallel_state.py`: `GroupCoordinator` collectives."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.distributed.device_communicators.pynccl import PyNcclCommunicator


class GroupCoordinator:
    def __init__(self, rank_in_group: int, world_size: int, comm: PyNcclCommunicator | None) -> None:
        self.rank_in_group, self.world_size, self.pynccl_comm = rank_in_group, world_size, comm

    def all_reduce(self, input_: float) -> Any:
        # vLLM bypasses the collective entirely for a group of one.
        if self.world_size == 1 or self.pynccl_comm is None:
            return input_
        return self._all_reduce_out_place(input_)

    def _all_reduce_out_place(self, input_: float) -> Any:
        assert self.pynccl_comm is not None
        return self.pynccl_comm.all_reduce(input_)

    def all_gather(self, input_: float) -> Any:
        if self.world_size == 1 or self.pynccl_comm is None:
            return [input_]
        return self.pynccl_comm.all_gather(input_)


_TP: GroupCoordinator | None = None


def init_model_parallel_group(group: GroupCoordinator) -> None:
    global _TP
    _TP = group


def get_tp_group() -> GroupCoordinator:
    assert _TP is not None, "tensor model parallel group is not initialized"
    return _TP
