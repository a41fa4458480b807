"""The opt-in nccl_ras probe against a tiny local server speaking NCCL's RAS text protocol."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from vllmdiag.context import Context
from vllmdiag.probe import Skip
from vllmdiag.probes import nccl_ras

REPORT = """NCCL version 2.26.2 compiled with CUDA 12.8
CUDA runtime version 12080, driver version 12080

Job summary
===========

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         1         4         4         4   RUNNING  INCOMPLETE

Errors
======

#0-0 (27e7d1c1a6b5e301) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 2 -- GPU 2 managed by process 4321 on node gpu07

Warnings
========

"""


def serve(answer: bool, seen: list[str]) -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def run() -> None:
        conn, _ = srv.accept()
        with conn:
            f = conn.makefile("rb")
            for reply in (b"SERVER PROTOCOL 2\n", b"OK\n", None):
                line = f.readline().decode().strip()
                seen.append(line)
                if not answer:
                    time.sleep(5)
                    return
                if reply:
                    conn.sendall(reply)
            conn.sendall(REPORT.encode())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    yield port
    srv.close()


@pytest.fixture
def seen() -> list[str]:
    return []


def test_one_status_query_is_parsed(seen: list[str]) -> None:
    for port in serve(True, seen):
        out = nccl_ras.collect(Context(options={"nccl_ras_port": port}))
    assert seen == ["CLIENT PROTOCOL 2", "TIMEOUT 3", "STATUS"]
    assert out["communicators"] == [{"group": 0, "comms": 1, "nodes": 1, "ranks_per_node": "4", "ranks_per_comm": 4,
                                     "ranks_in_group": 4, "status": "RUNNING", "errors": "INCOMPLETE"}]
    issue = out["issues"][0]
    assert (issue["kind"], issue["comm"], issue["ranks"]) == ("INCOMPLETE", "0-0", [
        {"rank": 2, "status": None, "pid": 4321, "node": "gpu07"}])


def test_silent_server_and_no_server_end_in_bounded_time(seen: list[str]) -> None:
    for port in serve(False, seen):
        t0 = time.monotonic()
        with pytest.raises(Skip, match="did not answer"):
            nccl_ras.collect(Context(options={"nccl_ras_port": port}, deadline=time.monotonic() + 1.0))
        assert time.monotonic() - t0 < 2.5
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(Skip, match="no NCCL RAS service"):
        nccl_ras.collect(Context(options={"nccl_ras_port": port}))
