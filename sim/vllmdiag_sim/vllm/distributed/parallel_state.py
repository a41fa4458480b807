"""Mirror of `vllm/distributed/parallel_state.py`: `GroupCoordinator` collectives, and the PP group's
point-to-point exchange of intermediate tensors (`isend_tensor_dict` / `irecv_tensor_dict`)."""

from __future__ import annotations

import socket
from typing import Any

from vllmdiag_sim.torch.distributed import distributed_c10d
from vllmdiag_sim.vllm.distributed.device_communicators.pynccl import PyNcclCommunicator


class GroupCoordinator:
    def __init__(self, rank_in_group: int, world_size: int, comm: PyNcclCommunicator | None,
                 links: dict[int, socket.socket] | None = None,
                 dp_group: distributed_c10d.StatelessProcessGroup | None = None) -> None:
        self.rank_in_group, self.world_size, self.pynccl_comm = rank_in_group, world_size, comm
        self.links = links or {}  # PP group: peer rank in group -> the cpu-group channel to it
        self.device_group = dp_group  # the DP group of a MoE layer's dispatch (torch.distributed on CPU)

    @property
    def is_first_rank(self) -> bool:
        return self.rank_in_group == 0

    @property
    def is_last_rank(self) -> bool:
        return self.rank_in_group == self.world_size - 1

    # ---- point to point (the PP group) ----------------------------------------------------------
    def isend_object(self, obj: Any, dst: int) -> distributed_c10d.Work:
        return distributed_c10d.isend(obj, dst=dst, group=self.links[dst])

    def recv_object(self, src: int) -> Any:
        return distributed_c10d.recv(src=src, group=self.links[src])

    def isend_tensor_dict(self, tensor_dict: dict[str, Any], dst: int | None = None,
                          all_gather_group: GroupCoordinator | None = None) -> list[distributed_c10d.Work]:
        # vLLM 0.33: metadata first (isend_object on the cpu group), then one isend per tensor.
        if self.world_size <= 1:
            return []
        dst = (self.rank_in_group + 1) % self.world_size if dst is None else dst
        return [self.isend_object(list(tensor_dict.items()), dst)]

    def irecv_tensor_dict(self, src: int | None = None, all_gather_group: GroupCoordinator | None = None
                          ) -> tuple[dict[str, Any] | None, list[Any], list[Any]]:
        # The metadata recv blocks (recv_object); the tensors' irecv handles are waited later.
        if self.world_size <= 1:
            return None, [], []
        src = (self.rank_in_group - 1) % self.world_size if src is None else src
        recv_metadata_list = self.recv_object(src)
        return dict(recv_metadata_list), [], []

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


    def all_gatherv(self, input_: float) -> Any:
        """vLLM 0.32 `GroupCoordinator.all_gatherv` on the CPU platform: torch.distributed.all_gather."""
        assert self.device_group is not None
        out: list[Any] = []
        distributed_c10d.all_gather(out, input_, group=self.device_group)
        return out

    def reduce_scatterv(self, input_: float) -> Any:
        assert self.device_group is not None
        tensor = [input_]
        distributed_c10d.all_reduce(tensor, group=self.device_group)  # the sim's stand-in: a sum, like the reduce
        return tensor[0]


_TP: GroupCoordinator | None = None
_PP: GroupCoordinator | None = None


def init_model_parallel_group(group: GroupCoordinator) -> None:
    global _TP
    _TP = group


def get_tp_group() -> GroupCoordinator:
    assert _TP is not None, "tensor model parallel group is not initialized"
    return _TP


def init_pp_group(group: GroupCoordinator) -> None:
    global _PP
    _PP = group


def get_pp_group() -> GroupCoordinator:
    assert _PP is not None, "pipeline model parallel group is not initialized"
    return _PP
