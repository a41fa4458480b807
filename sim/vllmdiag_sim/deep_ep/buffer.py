"""Mirror of `deep_ep/buffer.py`: `Buffer.dispatch` / `Buffer.combine` of DeepEP's high-throughput mode.

DeepEP's intranode dispatch spins on the CPU until every EP rank's token counts arrived (the source of
"DeepEP error: timeout (dispatch CPU)", vLLM #21306), so a rank whose EP peer never comes stays in
`dispatch`. Here the EP group meets at one rendezvous (`vllmdiag_sim.collective.Hub`, every DP x TP
rank) keyed by (sequence, "dispatch" | "combine"); the wait is inline so these functions are the
innermost Python frames, as in a real hang.
"""

from __future__ import annotations

import socket
from typing import Any

from vllmdiag_sim import collective


class Buffer:
    def __init__(self, sock: socket.socket, rank: int, group_size: int) -> None:
        self.sock, self.rank, self.group_size, self.seq = sock, rank, group_size, 0

    def dispatch(self, x: float) -> Any:
        self.seq += 1
        collective.send_msg(self.sock, ("op", self.seq, "dispatch", self.rank, x))
        head = self.sock.recv(4, socket.MSG_WAITALL)
        return collective.decode_reply(self.sock, head)

    def combine(self, x: float) -> Any:
        collective.send_msg(self.sock, ("op", self.seq, "combine", self.rank, x))
        head = self.sock.recv(4, socket.MSG_WAITALL)
        return collective.decode_reply(self.sock, head)
