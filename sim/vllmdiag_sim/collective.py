"""A real cross-process collective for simulated TP ranks, over TCP loopback.

Every rank connects to one hub (the sim's stand-in for NCCL's rendezvous) and sends its
contribution tagged `(seq, op)`; the hub answers all ranks only when every rank sent the same
`(seq, op)`. A rank that never arrives, or arrives with another op (all_gather vs all_reduce),
leaves the others blocked in their receive, which is how a NCCL hang looks from the host.
TCP on 127.0.0.1 crosses PID and mount namespaces that share a network namespace, so a TP
group can span two simulated nodes.
"""

from __future__ import annotations

import pickle
import selectors
import socket
import struct
import threading
from typing import Any

_LEN = struct.Struct(">I")
MAX_MSG = 1 << 20  # a rank's contribution is a few numbers


def send_msg(sock: socket.socket, obj: Any) -> None:
    data = pickle.dumps(obj)
    sock.sendall(_LEN.pack(len(data)) + data)


def recv_msg(sock: socket.socket) -> Any:
    return decode_reply(sock, sock.recv(_LEN.size, socket.MSG_WAITALL))


def decode_reply(sock: socket.socket, head: bytes) -> Any:
    """Finish reading one message whose 4-byte length header the caller already received."""
    if len(head) < _LEN.size:
        raise ConnectionError("collective peer closed the connection")
    size = _LEN.unpack(head)[0]
    if size > MAX_MSG:
        raise ValueError(f"collective message of {size} bytes: not a peer")
    return pickle.loads(sock.recv(size, socket.MSG_WAITALL))


def listen(port: int = 0) -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    return srv


def combine(op: str, values: dict[int, Any]) -> Any:
    ordered = [values[r] for r in sorted(values)]
    return sum(ordered) if op == "all_reduce" else ordered


class Hub:
    """Serves one TP group of `world_size` ranks from a daemon thread."""

    def __init__(self, srv: socket.socket, world_size: int) -> None:
        self.srv, self.world_size = srv, world_size
        self.sel = selectors.DefaultSelector()
        self.sel.register(srv, selectors.EVENT_READ)
        self.pending: dict[tuple[int, str], dict[int, Any]] = {}
        self.conns: dict[int, socket.socket] = {}

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve, name="TCPStoreServer", daemon=True)
        thread.start()
        return thread

    def serve(self) -> None:
        while True:
            for key, _ in self.sel.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self.srv:
                    conn, _ = self.srv.accept()
                    self.sel.register(conn, selectors.EVENT_READ)
                    continue
                try:
                    self.handle(sock, recv_msg(sock))
                except (ConnectionError, OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError,
                        IndexError, KeyError, MemoryError, OverflowError):
                    # A peer that does not speak the protocol is dropped, as torch's TCPStore drops a
                    # client with an unknown query: the group's other connections live on.
                    self.sel.unregister(sock)
                    sock.close()

    def handle(self, sock: socket.socket, msg: tuple[Any, ...]) -> None:
        if msg[0] == "hello":
            self.conns[int(msg[1])] = sock
            return
        _, seq, op, rank, value = msg
        got = self.pending.setdefault((seq, op), {})
        got[rank] = value
        if len(got) < self.world_size:
            return
        del self.pending[(seq, op)]
        result = combine(op, got)
        for r in got:
            try:
                send_msg(self.conns[r], result)
            except OSError:
                pass


def connect(port: int, rank: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    send_msg(sock, ("hello", rank))
    return sock
