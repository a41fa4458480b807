"""Mirror of `pynccl_wrapper.py`: `NCCLLibrary.ncclAllReduce` / `ncclAllGather`.

The blocking receive is inline in each function so a rank waiting for its peers shows
`ncclAllReduce (pynccl_wrapper.py)` as its innermost Python frame, like real vLLM.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from vllmdiag_sim import collective, runtime

_WEDGE: list[str] = []  # an ack name: the next all_reduce never completes (a wedged NCCL kernel)


def wedge(ack: str) -> None:
    _WEDGE[:] = [ack]


class NCCLLibrary:
    def __init__(self, sock: socket.socket, rank: int) -> None:
        self.sock, self.rank, self.seq = sock, rank, 0

    def ncclCommInitRank(self) -> None:  # noqa: N802 (vLLM's name)
        # init-odd-rank: this rank never finishes creating its communicator (vLLM #58290) while its
        # peers go on to the next init step. The launcher names the rank in the environment.
        if os.environ.get(runtime.ENV_INIT_HANG) == str(self.rank):
            runtime.ack(f"init-odd-rank-{self.rank}")
            while True:
                time.sleep(0.05)

    def ncclAllReduce(self, sendbuff: float) -> Any:  # noqa: N802 (vLLM's name)
        if _WEDGE:
            runtime.ack(_WEDGE[0])
            while True:  # every rank waits here; the kernel never finishes (real-hang-patterns row 3)
                time.sleep(0.05)
        self.seq += 1
        collective.send_msg(self.sock, ("op", self.seq, "all_reduce", self.rank, sendbuff))
        head = self.sock.recv(4, socket.MSG_WAITALL)
        return collective.decode_reply(self.sock, head)

    def ncclAllGather(self, sendbuff: float) -> Any:  # noqa: N802 (vLLM's name)
        self.seq += 1
        collective.send_msg(self.sock, ("op", self.seq, "all_gather", self.rank, sendbuff))
        head = self.sock.recv(4, socket.MSG_WAITALL)
        return collective.decode_reply(self.sock, head)
