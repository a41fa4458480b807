"""Mirror of `vllm/model_executor/layers/linear.py`: the layers whose forward hits a collective."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.vllm.distributed.communication_op import (
    tensor_model_parallel_all_gather,
    tensor_model_parallel_all_reduce,
)


class RowParallelLinear:
    """Row-parallel output is a partial sum: every rank must join the all-reduce."""

    def forward(self, input_: float) -> Any:
        return tensor_model_parallel_all_reduce(input_ * 0.5)


class ColumnParallelLinear:
    """With `gather_output=True` the shards are all-gathered instead."""

    def forward(self, input_: float) -> Any:
        return tensor_model_parallel_all_gather(input_ * 0.5)
