"""Mirror of `pynccl.py`: `PyNcclCommunicator.all_reduce` / `all_gather`."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.distributed.device_communicators.pynccl_wrapper import NCCLLibrary


class PyNcclCommunicator:
    def __init__(self, nccl: NCCLLibrary) -> None:
        self.nccl = nccl
        self._init_comm()

    def _init_comm(self) -> None:
        self.nccl.ncclCommInitRank()

    def all_reduce(self, in_tensor: float) -> Any:
        return self.nccl.ncclAllReduce(in_tensor)

    def all_gather(self, input_: float) -> Any:
        return self.nccl.ncclAllGather(input_)
