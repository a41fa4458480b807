"""The ZMTP greeting check: names the peer's socket type, delivers nothing, ends in bounded time."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from vllmdiag.probes._zmtp import check

SLACK_S = 0.4


@pytest.fixture
def zctx() -> Iterator[zmq.Context]:
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def _ipc(tmp_path: Path) -> str:
    return f"ipc://{tmp_path}/{uuid.uuid4()}"


@pytest.mark.parametrize("kind", ["ROUTER", "PULL", "XPUB", "PUB", "DEALER", "REP"])
def test_names_peer_socket_type_over_ipc_and_tcp(zctx: zmq.Context, tmp_path: Path, kind: str) -> None:
    sock = zctx.socket(getattr(zmq, kind))
    addr = _ipc(tmp_path)
    sock.bind(addr)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    for endpoint in (addr, f"tcp://127.0.0.1:{port}"):
        res = check(endpoint, 1.0)
        assert res["status"] == "ok", res
        assert res["peer_socket_type"] == kind
        assert res["mechanism"] == "NULL"
        assert res["version"].startswith("3.")
        assert res["latency_ms"] < 1000


def test_check_delivers_no_message_and_no_subscription(zctx: zmq.Context, tmp_path: Path) -> None:
    """ROUTER, PULL and XPUB_VERBOSE (vLLM's MessageQueue writer) see no message, no subscription,
    and their monitors never report a completed handshake: no pipe was ever attached."""
    targets = []
    for kind in ("ROUTER", "PULL", "XPUB"):
        sock = zctx.socket(getattr(zmq, kind))
        if kind == "XPUB":
            sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        addr = _ipc(tmp_path)
        sock.bind(addr)
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        targets.append((kind, sock, sock.get_monitor_socket(), [addr, f"tcp://127.0.0.1:{port}"]))
    for kind, _, _, endpoints in targets:
        for endpoint in endpoints:
            for _ in range(3):
                assert check(endpoint, 1.0)["peer_socket_type"] == kind
    time.sleep(0.3)
    for kind, sock, monitor, _ in targets:
        assert sock.poll(300) == 0, f"{kind} received something"
        events = []
        while monitor.poll(50):
            events.append(recv_monitor_message(monitor)["event"])
        assert zmq.EVENT_ACCEPTED in events, f"{kind}: the check never connected ({events})"
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED not in events, f"{kind}: a handshake completed"
    # Control: a real SUB does deliver a subscription to the same XPUB, so the poll above would see one.
    xpub = targets[2][1]
    sub = zctx.socket(zmq.SUB)
    sub.connect(targets[2][3][0])
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    assert xpub.poll(2000) and xpub.recv() == b"\x01"


def test_silent_tcp_listener_gets_no_byte_and_times_out() -> None:
    """A listener that accepts but never speaks (HTTP, TCPStore, a black hole): we wait for a ZMTP
    signature, write nothing, and give up on time."""
    srv = socket.socket()
    srv.bind(("127.0.0.2", 0))
    srv.listen(8)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        conn.settimeout(2.0)
        try:
            got.append(conn.recv(100))
        except OSError:
            got.append(b"<error>")
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    start = time.monotonic()
    res = check(f"tcp://127.0.0.2:{srv.getsockname()[1]}", 0.3)
    assert time.monotonic() - start < 0.3 + SLACK_S
    assert res["status"] == "timeout" and res["stage"] == "signature"
    t.join(3)
    srv.close()
    assert got in ([b""], [b"<error>"])  # closed (FIN or RST) without a single byte from us


def test_full_backlog_black_hole_is_bounded() -> None:
    """A listener that never accepts, with its accept queue full: SYNs are dropped, connect hangs."""
    srv = socket.socket()
    srv.bind(("127.0.0.3", 0))
    srv.listen(0)
    addr = srv.getsockname()
    fillers = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(addr)
        fillers.append(c)
    time.sleep(0.1)
    start = time.monotonic()
    res = check(f"tcp://127.0.0.3:{addr[1]}", 0.3)
    assert time.monotonic() - start < 0.3 + SLACK_S
    assert res["status"] == "timeout"
    for c in fillers:
        c.close()
    srv.close()


def test_stale_and_missing_ipc_paths(tmp_path: Path) -> None:
    path = tmp_path / str(uuid.uuid4())
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # like libzmq: the file stays, nobody listens
    start = time.monotonic()
    assert check(f"ipc://{path}", 0.3)["status"] == "refused"
    assert check(f"ipc://{tmp_path}/missing", 0.3)["status"] == "no_listener"
    assert check("tcp://127.0.0.1:1", 0.3)["status"] == "refused"
    assert time.monotonic() - start < 0.5


def test_non_zmtp_speaker_is_not_answered(tmp_path: Path) -> None:
    path = str(tmp_path / "speaker")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = srv.accept()
        conn.sendall(b"SSH-2.0-OpenSSH\r\n")
        conn.settimeout(1.0)
        try:
            got.append(conn.recv(100))
        except OSError:
            got.append(b"")
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert check(f"ipc://{path}", 0.5)["status"] == "not_zmtp"
    t.join(2)
    srv.close()
    assert got == [b""]
