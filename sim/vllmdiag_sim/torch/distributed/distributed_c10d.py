"""Mirror of `torch/distributed/distributed_c10d.py`: `isend` and the blocking `recv` of a PP stage,
and the `all_reduce` the EngineCores of a MoE DP deployment run on their (gloo) DP group.

vLLM 0.33 sends a stage's intermediate tensors with `isend` (non-blocking) and the next stage
receives their metadata with a blocking `recv` on the CPU (gloo) group first
(`GroupCoordinator.recv_object`). Here the "group" is a socket pair between the two stages' ranks
of one TP index; the receive is inline so `recv` is the innermost Python frame while the upstream
stage never sends, as in a real hang.
"""

from __future__ import annotations

import pickle
import socket
import struct
from dataclasses import dataclass
from typing import Any

from vllmdiag_sim import collective

_LEN = struct.Struct(">I")


class Work:
    """What `isend` returns: the send is already in the socket buffer, so `wait` has nothing to do."""

    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def isend(obj: Any, dst: int, group: socket.socket) -> Work:
    data = pickle.dumps(obj)
    group.sendall(_LEN.pack(len(data)) + data)  # a few hundred bytes: never blocks on a live peer
    return Work()


def recv(src: int, group: socket.socket) -> Any:
    head = group.recv(_LEN.size, socket.MSG_WAITALL)
    if len(head) < _LEN.size:
        raise ConnectionError(f"pipeline peer rank {src} closed the connection")
    return pickle.loads(group.recv(_LEN.unpack(head)[0], socket.MSG_WAITALL))


@dataclass
class StatelessProcessGroup:
    """A rank's connection to its group's rendezvous (`vllmdiag_sim.collective.Hub`)."""

    sock: socket.socket
    rank: int
    seq: int = 0


def all_gather(tensor_list: list[Any], tensor: Any, group: StatelessProcessGroup) -> None:
    group.seq += 1
    collective.send_msg(group.sock, ("op", group.seq, "all_gather", group.rank, tensor))
    head = group.sock.recv(4, socket.MSG_WAITALL)  # inline: the innermost frame while a DP rank is missing
    tensor_list[:] = collective.decode_reply(group.sock, head)


def all_reduce(tensor: list[Any], group: StatelessProcessGroup) -> None:
    group.seq += 1
    collective.send_msg(group.sock, ("op", group.seq, "all_reduce", group.rank, tensor[0]))
    head = group.sock.recv(4, socket.MSG_WAITALL)  # inline: the innermost frame while a DP rank is missing
    tensor[0] = collective.decode_reply(group.sock, head)
