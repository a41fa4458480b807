"""A slow greeting is looked at again, longer, never a finding by itself (issue 15, item 15).

A real listener on a unix socket answers its ZMTP greeting only after 0.6 s (what a healthy libzmq
I/O thread looked like at load 5 on 2 cores); the endpoints probe's first look (0.25 s) misses it,
the second, longer look must get the answer. The same checks run with a CPU hog beside them.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.context import Context
from vllmdiag.probes import _zmtp
from vllmdiag.probes.endpoints import check_all

SIG = b"\xff" + b"\0" * 8 + b"\x7f"
REST = b"\x03\x01" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31


def _ready(socket_type: str) -> bytes:
    name, value = b"Socket-Type", socket_type.encode()
    body = b"\x05READY" + bytes([len(name)]) + name + struct.pack(">I", len(value)) + value
    return b"\x04" + bytes([len(body)]) + body


@pytest.fixture
def slow_listener(tmp_path: Path) -> Iterator[tuple[str, list[float]]]:
    """ipc endpoint whose peer greets only after 0.6 s; yields (endpoint, accept times)."""
    path = tmp_path / "slow.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()
    accepted: list[float] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(time.monotonic())
            threading.Thread(target=_greet_late, args=(conn,), daemon=True).start()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"ipc://{path}", accepted
    stop.set()
    t.join(5)
    srv.close()


def _greet_late(conn: socket.socket) -> None:
    with conn:
        try:
            time.sleep(0.6)
            conn.sendall(SIG)
            conn.settimeout(3)
            got = b""
            while len(got) < 64:
                chunk = conn.recv(64 - len(got))
                if not chunk:
                    return
                got += chunk
            conn.sendall(REST + _ready("ROUTER"))
            conn.recv(1)  # the checker hangs up before sending READY
        except OSError:
            return


def test_the_listener_really_is_slower_than_the_first_look(slow_listener: tuple[str, list[float]]) -> None:
    endpoint, _ = slow_listener
    assert _zmtp.check(endpoint, 0.25)["status"] == "timeout"  # what produced the false findings


def _check(endpoint: str) -> dict[str, Any]:
    ctx = Context(deadline=time.monotonic() + 5.0)
    (result,) = check_all(ctx, [(endpoint, "", [12345], endpoint)])
    return result


def test_a_slow_listener_is_looked_at_again_and_answers(slow_listener: tuple[str, list[float]],
                                                       reliability: Any) -> None:
    endpoint, accepted = slow_listener
    start = time.monotonic()
    r = _check(endpoint)
    reliability.case(hang=time.monotonic() - start > 3)
    assert r["status"] == "ok" and r["peer_socket_type"] == "ROUTER", r
    assert r["attempts"] == 2 and r["first_attempt"]["status"] == "timeout"
    assert len(accepted) == 2


def test_a_slow_listener_answers_with_a_cpu_hog_beside_it(slow_listener: tuple[str, list[float]], cpu_hog: Any,
                                                          reliability: Any) -> None:
    endpoint, _ = slow_listener
    results = [_check(endpoint) for _ in range(3)]
    reliability.case()
    assert all(r["status"] == "ok" for r in results), results


def test_listeners_of_stopped_processes_are_not_looked_at_twice(slow_listener: tuple[str, list[float]]) -> None:
    """A stopped holder cannot answer; the process layer names it, so no second wait is spent on it."""
    endpoint, accepted = slow_listener
    ctx = Context(deadline=time.monotonic() + 5.0)
    (r,) = check_all(ctx, [(endpoint, "", [777], endpoint)], stopped=frozenset({777}))
    assert r["status"] == "timeout" and r["attempts"] == 1 and len(accepted) == 1


def test_the_second_look_stays_within_the_budget(slow_listener: tuple[str, list[float]]) -> None:
    endpoint, _ = slow_listener
    ctx = Context(deadline=time.monotonic() + 0.6)  # no room for a longer second look
    start = time.monotonic()
    (r,) = check_all(ctx, [(endpoint, "", [1], endpoint)])
    assert time.monotonic() - start < 1.0 and r["status"] == "timeout"


def test_a_prompt_answer_of_another_process_never_cuts_a_slow_look_short(slow_listener: tuple[str, list[float]],
                                                                        tmp_path: Path) -> None:
    """The early end of a silent look needs *its own* process to have greeted elsewhere: a slow
    listener beside a prompt one of another pid is still waited for, and looked at again."""
    import zmq

    endpoint, _ = slow_listener
    zctx = zmq.Context()
    router = zctx.socket(zmq.ROUTER)
    prompt = f"ipc://{tmp_path / 'prompt.sock'}"
    router.bind(prompt)
    try:
        ctx = Context(deadline=time.monotonic() + 5.0)
        slow, fast = check_all(ctx, [(endpoint, "", [4242], endpoint), (prompt, "", [4343], prompt)])
    finally:
        zctx.destroy(linger=0)
    assert fast["status"] == "ok"
    assert slow["status"] == "ok" and slow["attempts"] == 2 and "cut_short" not in slow["first_attempt"]
