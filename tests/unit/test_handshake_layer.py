"""Handshake layer on snapshots shaped like vLLM 0.33 (socket table 3.2) and on the simulator."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from vllmdiag.analysis.bisect import analyze as analyze_report
from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.layers.handshake import startup as handshake
from vllmdiag.model import ProbeResult, Snapshot

API, ENGINE, WORKER = 100, 101, 102
ROUTER, PULL, XPUB = "ipc:///tmp/1b4e28ba-2fa1-4d2b-883f-0016d3cca427", "ipc:///tmp/6fa459ea-ee8a-4ca4-894e-db77e160355e", \
    "ipc:///tmp/16fd2706-8baf-433b-82eb-8c7fada847da"
FORKED = [API, ENGINE, WORKER]  # fork-started children inherit the API server's listening fds


def _procs(api_age: float = 50.0, extra: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    base = {"state": "S", "environ": {}, "zmq_contexts": 1}
    return [{**base, "pid": API, "ppid": 1, "pgid": API, "role": "api_server", "cmdline": ["vllm", "serve", "m"],
             "age_s": api_age, "start_time": 1000.0},
            {**base, "pid": ENGINE, "ppid": API, "pgid": API, "role": "engine_core", "titled": True, "title": "VLLM::EngineCore"},
            {**base, "pid": WORKER, "ppid": ENGINE, "pgid": API, "role": "worker", "titled": True, "title": "VLLM::Worker_TP0",
             "ranks": {"tp": 0}}, *(extra or [])]


def _snap(listeners: Sequence[tuple[str, list[int], int, str | None, str]], *, http: bool = True, api_age: float = 50.0,
          stale: list[dict[str, Any]] | None = None, extra: list[dict[str, Any]] | None = None) -> Snapshot:
    """listeners: (endpoint, holders, accepted, ZMTP peer type or None, ZMTP status)."""
    ipc = [{"path": e[6:], "endpoint": e, "binders": h, "accepted": a, "uuid_name": True} for e, h, a, _, _ in listeners]
    zmtp = [{"endpoint": e, "listener": e, "status": st, "peer_socket_type": t, "pids": h,
             "stage": "done" if st == "ok" else "signature", "reason": None} for e, h, _, t, st in listeners if st != "skipped"]
    procs = _procs(api_age, extra)
    ep = {"ipc": ipc, "tcp_listen": [], "zmtp": zmtp, "stale_files": stale or [], "stale_total": len(stale or []),
          "rpc_dirs": ["/tmp"], "processes": [{"pid": p["pid"], "http_port": 8000 if p["pid"] == API else None} for p in procs]}
    tcp = [{"local": "0.0.0.0:8000", "remote": "0.0.0.0:0", "state": "LISTEN", "pids": [API], "netns": "n"}] if http else []
    probes: dict[str, dict[str, Any]] = {"processes": {"processes": procs}, "endpoints": ep, "sockets": {"tcp": tcp, "unix": []},
              "http": {"api_servers": [{"pid": API, "unlisted_socket_inodes": [] if http else [4242]}]}}
    return Snapshot(node="n", collected_at="", vllmdiag_version="", duration_s=0.0,
                    probes={k: ProbeResult("ok", 0.0, None, v) for k, v in probes.items()})


def _findings(snap: Snapshot) -> dict[str, Any]:
    return {f.code: f for f in handshake.analyze(Facts.of(snap))}


HEALTHY = [(ROUTER, FORKED, 1, "ROUTER", "ok"), (PULL, FORKED, 1, "PULL", "ok"), (XPUB, [ENGINE, WORKER], 1, "XPUB", "ok")]


def test_healthy_deployment_with_stale_files_stays_healthy() -> None:
    stale = [{"name": "x", "path": "/tmp/x", "age_s": 7200.0, "mtime": 1.0}]
    snap = _snap(HEALTHY, stale=stale)
    found = _findings(snap)
    assert list(found) == ["handshake.stale_socket_files"] and found["handshake.stale_socket_files"].severity == "info"
    assert analyze_report([snap]).verdict.status == "healthy"


def test_input_router_gone_blames_the_api_server_and_folds_the_orphaned_listener() -> None:
    snap = _snap([(ROUTER, [ENGINE, WORKER], 0, None, "timeout"), (PULL, FORKED, 1, "PULL", "ok")])
    found = _findings(snap)
    gone = found["handshake.engine_endpoint_gone"]
    assert gone.severity == "critical" and [c.pid for c in gone.culprits] == [API]
    assert gone.evidence["missing"] == ["ROUTER"]
    assert gone.evidence["orphaned_listeners"][0]["endpoint"] == ROUTER
    assert "handshake.endpoint_unreachable" not in found
    verdict = analyze_report([snap]).verdict
    assert (verdict.status, verdict.layer, verdict.culprits[0].pid) == ("blocked", "handshake", API)


def test_gone_endpoint_cites_stale_files_created_since_the_api_server_started() -> None:
    stale = [{"name": "new", "path": "/tmp/new", "age_s": 5.0, "mtime": 2000.0},
             {"name": "old", "path": "/tmp/old", "age_s": 9e4, "mtime": 10.0}]
    gone = _findings(_snap([(PULL, FORKED, 1, "PULL", "ok")], stale=stale))["handshake.engine_endpoint_gone"]
    assert gone.evidence["stale_since_start"] == ["/tmp/new"]


def test_listeners_we_could_not_greet_are_not_called_gone() -> None:
    assert "handshake.engine_endpoint_gone" not in _findings(_snap([(ROUTER, FORKED, 1, None, "skipped"),
                                                                    (PULL, FORKED, 1, None, "skipped")]))
    assert "handshake.engine_endpoint_gone" in _findings(_snap([]))


def test_engine_dealer_never_registered_after_startup() -> None:
    found = _findings(_snap([(ROUTER, FORKED, 0, "ROUTER", "ok"), (PULL, FORKED, 1, "PULL", "ok")]))
    f = found["handshake.engine_not_registered"]
    assert f.severity == "critical" and [c.pid for c in f.culprits] == [ENGINE]


def test_startup_in_progress_is_info_and_stuck_startup_is_critical() -> None:
    listeners = [(ROUTER, FORKED, 0, "ROUTER", "ok"), (PULL, FORKED, 0, "PULL", "ok")]
    young = _findings(_snap(listeners, http=False, api_age=30))
    assert set(young) == {"handshake.http_not_listening"} and young["handshake.http_not_listening"].severity == "info"
    old = _findings(_snap(listeners, http=False, api_age=700))["handshake.http_not_listening"]
    assert old.severity == "critical" and [c.pid for c in old.culprits] == [ENGINE]
    assert old.evidence["bound_unlisted_sockets"] == [4242] and old.evidence["engines_registered"] is False


def test_coordinator_without_endpoint() -> None:
    coord = {"pid": 103, "ppid": API, "pgid": API, "role": "dp_coordinator", "state": "S", "titled": True,
             "title": "VLLM::DPCoordinator", "environ": {}}
    f = _findings(_snap(HEALTHY, extra=[coord]))["handshake.coordinator_endpoint_missing"]
    assert f.severity == "critical" and f.culprits[0].pid == 103


def test_a_lone_timeout_is_only_info_and_the_deployment_stays_healthy() -> None:
    """Issue 15 item 15: a greeting that timed out (twice) may be a loaded host, never a finding by itself."""
    snap = _snap([*HEALTHY[:2], (XPUB, [ENGINE, WORKER], 1, None, "timeout")])
    f = _findings(snap)["handshake.endpoint_unreachable"]
    assert f.severity == "info" and f.culprits[0].pid == ENGINE  # the holder whose parent does not hold it
    assert analyze_report([snap]).verdict.status == "healthy"


def test_a_refused_listener_of_a_running_process_is_a_warning() -> None:
    f = _findings(_snap([*HEALTHY[:2], (XPUB, [ENGINE, WORKER], 1, None, "refused")]))["handshake.endpoint_unreachable"]
    assert f.severity == "warning" and f.culprits[0].pid == ENGINE


def test_endpoint_view_renders_listeners_and_zmtp_status(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from vllmdiag.render import text as text_view
    from vllmdiag.render.screen import render_report

    report = analyze_report([_snap([(ROUTER, [ENGINE, WORKER], 0, None, "timeout"), (PULL, FORKED, 1, "PULL", "ok")])])
    out = io.StringIO()
    render_report(report, Console(file=out, width=200))
    text = out.getvalue()  # default view: the problem endpoint with what its status means; healthy ones counted
    assert "timeout" in text and "does not serve it" in text and "1 answer the ZMTP greeting" in text
    monkeypatch.setattr(text_view, "VERBOSE", True)  # -v: every listener in the table
    out = io.StringIO()
    render_report(report, Console(file=out, width=200))
    text = out.getvalue()
    assert "ZMQ endpoints" in text and "timeout" in text and "PULL" in text and "handshake.engine_endpoint_gone" in text
