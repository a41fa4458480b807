"""Mirror of `vllm/distributed/communication_op.py`."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.distributed.parallel_state import get_tp_group


def tensor_model_parallel_all_reduce(input_: float) -> Any:
    return get_tp_group().all_reduce(input_)


def tensor_model_parallel_all_gather(input_: float) -> Any:
    return get_tp_group().all_gather(input_)
