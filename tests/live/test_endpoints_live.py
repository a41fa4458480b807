"""The endpoints probe on real ZMQ sockets, real /proc, real socket files."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from vllmdiag.context import Context
from vllmdiag.model import ProbeResult
from vllmdiag.probes import endpoints, sockets


def _proc(pid: int, role: str, ppid: int = 1, **extra: Any) -> dict[str, Any]:
    ns = {n: os.readlink(f"/proc/{pid}/ns/{n}") for n in ("net", "mnt")}
    return {"pid": pid, "ppid": ppid, "pgid": os.getpgid(pid), "role": role, "cmdline": ["python"], "ns": ns,
            "zmq_contexts": 1, "environ": {}, **extra}


@pytest.fixture
def zctx() -> Iterator[zmq.Context]:
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


def _collect(tmp_path: Path, procs: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    ctx = Context(rpc_base=tmp_path, options=dict(options))
    ctx.deadline = time.monotonic() + 5
    ctx.record("processes", ProbeResult("ok", 0.0, None, {"processes": procs}))
    socks = sockets.collect(ctx)
    assert isinstance(socks, dict), socks  # the test's own processes: every fd readable
    ctx.record("sockets", ProbeResult("ok", 0.0, None, socks))
    data = endpoints.collect(ctx)
    assert isinstance(data, dict), data
    return data


def test_binders_peers_stale_files_and_zmtp(zctx: zmq.Context, tmp_path: Path) -> None:
    live = tmp_path / str(uuid.uuid4())
    router = zctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{live}")
    dealers = [zctx.socket(zmq.DEALER) for _ in range(2)]
    for d in dealers:
        d.connect(f"ipc://{live}")
    pull = zctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    stale = tmp_path / str(uuid.uuid4())
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    (tmp_path / str(uuid.uuid4())).write_text("not a socket")
    (tmp_path / "not-a-uuid").touch()
    time.sleep(0.2)  # let the dealers' connects land

    data = _collect(tmp_path, [_proc(os.getpid(), "engine_core")])

    ipc = {e["path"]: e for e in data["ipc"]}
    assert ipc[str(live)]["binders"] == [os.getpid()]
    assert ipc[str(live)]["accepted"] == 2  # one accepted socket per connected DEALER
    assert ipc[str(live)]["uuid_name"]
    assert [f["path"] for f in data["stale_files"]] == [str(stale)]
    assert data["stale_total"] == 1 and data["stale_files"][0]["age_s"] >= 0
    assert data["stale_files"][0]["uid"] == os.getuid()  # analysis tells a live server's own path by it
    zmtp = {z["endpoint"]: z for z in data["zmtp"]}
    assert zmtp[f"ipc://{live}"]["peer_socket_type"] == "ROUTER"
    assert zmtp[f"tcp://127.0.0.1:{port}"]["peer_socket_type"] == "PULL"
    me = data["processes"][0]
    assert f"ipc://{live}" in me["listening"] and me["unix_accepted"] >= 2 and me["unix_connected_unnamed"] >= 2
    for sock in (router, pull, *dealers):
        sock.close(linger=0)
    live.unlink()
    stale.unlink()


def test_http_port_of_an_ipc_api_server_is_not_greeted(zctx: zmq.Context, tmp_path: Path) -> None:
    """In local-only mode the API server's TCP listeners are HTTP, not ZMQ: no greeting wait."""
    live = tmp_path / str(uuid.uuid4())
    router = zctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{live}")
    http = socket.socket()
    http.bind(("127.0.0.1", 0))
    http.listen(4)
    start = time.monotonic()
    data = _collect(tmp_path, [_proc(os.getpid(), "api_server", cmdline=["vllm", "serve", "m", "--port", "1"])])
    assert time.monotonic() - start < 0.4
    assert [z["endpoint"] for z in data["zmtp"]] == [f"ipc://{live}"]
    assert data["processes"][0]["http_port"] == 1
    http.close()
    router.close(linger=0)
    live.unlink()


def test_many_silent_listeners_fit_the_zmtp_budget(tmp_path: Path) -> None:
    """A stopped process with many listeners answers no greeting: the probe still ends in its budget."""
    silent = []
    for _ in range(40):
        s = socket.socket()
        s.bind(("127.0.0.5", 0))
        s.listen(4)
        silent.append(s)
    try:
        start = time.monotonic()
        data = _collect(tmp_path, [_proc(os.getpid(), "engine_core")])
        assert time.monotonic() - start < endpoints.ZMTP_BUDGET_S + 0.5
        mine = [z for z in data["zmtp"] if z["endpoint"].startswith("tcp://127.0.0.5:")]
        assert len(mine) == 40 and {z["status"] for z in mine} == {"timeout"}
    finally:
        for s in silent:
            s.close()


def test_workers_tcp_listeners_are_never_dialed(tmp_path: Path) -> None:
    """TCPStore, gloo and NCCL bootstrap sockets live in workers and are not ZMQ: leave them alone."""
    s = socket.socket()
    s.bind(("127.0.0.5", 0))
    s.listen(4)
    s.setblocking(False)
    try:
        data = _collect(tmp_path, [_proc(os.getpid(), "worker")])
        port = s.getsockname()[1]
        assert not [z for z in data["zmtp"] if z["endpoint"] == f"tcp://127.0.0.5:{port}"]
        try:
            s.accept()
            raise AssertionError("the worker's listener was dialed")
        except BlockingIOError:
            pass
    finally:
        s.close()


def test_a_silent_tcp_listener_of_a_process_whose_zmq_answered_is_not_looked_at_twice(
        zctx: zmq.Context, tmp_path: Path) -> None:
    """An EngineCore shares a TCPStore/gloo listener with its workers: it never greets. When the same
    process's libzmq greeted promptly on another socket, the silence is not load, and a second, longer
    look would hold every healthy triage for it (issue 16 speed; issue 15 item 15 keeps the second look
    for processes that did not answer at all)."""
    router = zctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{tmp_path / str(uuid.uuid4())}")
    silent = socket.socket()
    silent.bind(("127.0.0.5", 0))
    silent.listen(4)
    try:
        data = _collect(tmp_path, [_proc(os.getpid(), "engine_core")])
        port = silent.getsockname()[1]
        z = {r["endpoint"]: r for r in data["zmtp"]}
        assert any(r["status"] == "ok" for e, r in z.items() if e.startswith("ipc://"))
        assert z[f"tcp://127.0.0.5:{port}"]["status"] == "timeout"
        assert z[f"tcp://127.0.0.5:{port}"]["attempts"] == 1
        # ... and the first look itself ended once the greeting elsewhere settled it (the round runs
        # side by side), saying why; the silent listener still received no byte from us.
        assert "greeted on another socket" in z[f"tcp://127.0.0.5:{port}"]["cut_short"]
        conn, _ = silent.accept()
        conn.setblocking(False)
        try:
            got = conn.recv(1)  # b"" (closed) or nothing yet
        except (BlockingIOError, ConnectionResetError):  # we hang up with a RST (linger 0)
            got = b""
        conn.close()
        assert got == b""
    finally:
        silent.close()


def test_a_silent_ipc_listener_gets_the_whole_first_look(zctx: zmq.Context, tmp_path: Path) -> None:
    """vLLM's ipc sockets are all ZMQ: a silent one is never cut short because its process greeted
    elsewhere (only TCP, where torch's TCPStore and NCCL listen, is)."""
    router = zctx.socket(zmq.ROUTER)
    router.bind(f"ipc://{tmp_path / str(uuid.uuid4())}")
    path = tmp_path / str(uuid.uuid4())
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(path))
    silent.listen(4)
    try:
        data = _collect(tmp_path, [_proc(os.getpid(), "engine_core")])
        z = {r["endpoint"]: r for r in data["zmtp"]}
        mine = z[f"ipc://{path}"]
        assert any(r["status"] == "ok" for r in z.values())
        assert mine["status"] == "timeout" and "cut_short" not in mine
    finally:
        silent.close()
