"""Mirror of vLLM 0.33 `vllm/v1/worker/dp_utils.py`: the per-step DP sync of MoE models.

Every DP rank's worker all-reduces its batch size with the same TP rank of every other DP rank
(`coordinate_batch_across_dp` -> `_synchronize_dp_ranks` -> `_run_ar`), dummy steps included, so
a DP rank that skips a step leaves the others waiting here (vLLM #28224, PR #28774).
"""

from __future__ import annotations

import socket
from typing import Any

from vllmdiag_sim import collective


def _run_ar(dp_comm: socket.socket, dp_rank: int, seq: int, num_tokens: int) -> Any:
    # torch.distributed.all_reduce over the DP group; the receive is inline so this function is
    # the innermost frame while a peer is missing.
    collective.send_msg(dp_comm, ("op", seq, "all_reduce", dp_rank, num_tokens))
    head = dp_comm.recv(4, socket.MSG_WAITALL)
    return collective.decode_reply(dp_comm, head)


def _synchronize_dp_ranks(dp_comm: socket.socket, dp_rank: int, seq: int, num_tokens: int) -> Any:
    return _run_ar(dp_comm, dp_rank, seq, num_tokens)


def coordinate_batch_across_dp(dp_comm: socket.socket, dp_rank: int, seq: int, num_tokens: int) -> Any:
    return _synchronize_dp_ranks(dp_comm, dp_rank, seq, num_tokens)
