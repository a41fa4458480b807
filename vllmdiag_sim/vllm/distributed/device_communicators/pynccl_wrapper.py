"""Mirror of `pynccl_wrapper.py`: `NCCLLibrary.ncclAllReduce` / `ncclAllGather`.

The blocking receive is inline in each function so a rank waiting for its peers shows
`ncclAllReduce (pynccl_wrapper.py)` as its innermost Python frame, like real vLLM.
"""

from __future__ import annotations

import socket
from typing import Any

from vllmdiag_sim import collective


class NCCLLibrary:
    def __init__(self, sock: socket.socket, rank: int) -> None:
        self.sock, self.rank, self.seq = sock, rank, 0

    def ncclAllReduce(self, sendbuff: float) -> Any:  # noqa: N802 (vLLM's name)
        self.seq += 1
        collective.send_msg(self.sock, ("op", self.seq, "all_reduce", self.rank, sendbuff))
        head = self.sock.recv(4, socket.MSG_WAITALL)
        return collective.decode_reply(self.sock, head)

    def ncclAllGather(self, sendbuff: float) -> Any:  # noqa: N802 (vLLM's name)
        self.seq += 1
        collective.send_msg(self.sock, ("op", self.seq, "all_gather", self.rank, sendbuff))
        head = self.sock.recv(4, socket.MSG_WAITALL)
        return collective.decode_reply(self.sock, head)
