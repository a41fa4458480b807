"""The pure tests of tests/live/test_endpoints_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag.probes import endpoints


def test_scope_keeps_the_tree_and_pgid_of_the_wanted_pids() -> None:
    procs = [{"pid": 10, "ppid": 1, "pgid": 10}, {"pid": 11, "ppid": 10, "pgid": 10}, {"pid": 12, "ppid": 11, "pgid": 10},
             {"pid": 13, "ppid": 1, "pgid": 10}, {"pid": 20, "ppid": 1, "pgid": 20}, {"pid": 21, "ppid": 20, "pgid": 20}]
    assert [p["pid"] for p in endpoints.scope(procs, [10])] == [10, 11, 12, 13]  # 13: orphan, same pgid
    assert [p["pid"] for p in endpoints.scope(procs, [21])] == [20, 21]
    assert len(endpoints.scope(procs, None)) == 6


def test_ipc_endpoints_count_accepted_sockets_per_path() -> None:
    unix = [{"path": "/tmp/a", "listening": True, "state": "unconnected", "pids": [1, 2]},
            {"path": "/tmp/a", "listening": False, "state": "connected", "pids": [1]},
            {"path": "", "listening": False, "state": "connected", "pids": [3]},
            {"path": "\0abstract", "listening": True, "state": "unconnected", "pids": [4]}]
    eps = {e["path"]: e for e in endpoints.ipc_endpoints(unix)}
    assert eps["/tmp/a"]["accepted"] == 1 and eps["/tmp/a"]["binders"] == [1, 2]
    assert eps["\0abstract"]["endpoint"] == "ipc://@abstract"
