"""Client layer: a real client that stops reading a real HTTP stream is named; metrics rules; the simulator."""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.layers.client import requests as client
from vllmdiag.model import ProbeResult, Snapshot


def snapshot(procs: list[dict[str, Any]], http_data: dict[str, Any]) -> Snapshot:
    return Snapshot(node="t", collected_at="", vllmdiag_version="", duration_s=0.0,
                    probes={"processes": ProbeResult("ok", 0.0, None, {"processes": procs}),
                            "http": ProbeResult("ok", 0.0, None, http_data)})


def analyze(snap: Snapshot) -> list[Any]:
    return client.analyze(Facts.of(snap))


def _server_data(m0: dict[str, float], m1: dict[str, float], **extra: Any) -> dict[str, Any]:
    return {"sample_gap_s": 0.5, "servers": [{"address": "127.0.0.1:8000", "port": 8000, "pids": [100],
                                              "connections": [], "health": {"status": 200},
                                              "metrics": [{"status": 200, **m0}, {"status": 200, **m1}], **extra}]}


PROCS = [{"pid": 100, "ppid": 1, "pgid": 100, "role": "api_server", "state": "S", "cmdline": ["vllm", "serve"]},
         {"pid": 101, "ppid": 100, "pgid": 100, "role": "engine_core", "state": "S", "titled": True,
          "title": "VLLM::EngineCore"}]
IDLE = {"running": 0.0, "waiting": 3.0, "generation_tokens": 10.0, "prompt_tokens": 5.0}


def test_requests_waiting_while_engine_idle_blames_the_engine() -> None:
    [f] = analyze(snapshot(PROCS, _server_data(IDLE, IDLE)))
    assert f.code == "client.requests_stuck_waiting" and f.severity == "critical"
    assert [c.pid for c in f.culprits] == [101]


def test_progressing_or_quiet_metrics_are_not_findings() -> None:
    moving = {**IDLE, "generation_tokens": 11.0}
    assert analyze(snapshot(PROCS, _server_data(IDLE, moving))) == []
    quiet = {"running": 0.0, "waiting": 0.0, "generation_tokens": 1.0, "prompt_tokens": 1.0}
    assert analyze(snapshot(PROCS, _server_data(quiet, quiet))) == []
    busy = {**quiet, "running": 2.0}
    [f] = analyze(snapshot(PROCS, _server_data(busy, busy)))
    assert f.code == "client.no_token_progress" and f.severity == "info"


def test_health_503_and_failed_probe_request_are_critical() -> None:
    quiet = {"running": 0.0, "waiting": 0.0, "generation_tokens": 1.0, "prompt_tokens": 1.0}
    data = _server_data(quiet, quiet, health={"status": 503}, probe_request={"status": None, "error": "timeout"})
    codes = {f.code: f for f in analyze(snapshot(PROCS, data))}
    assert codes["client.health_failed"].severity == "critical"
    assert codes["client.probe_request_failed"].culprits[0].pid == 101


def test_draining_or_small_queues_are_not_blamed() -> None:
    conns = [{"local": "127.0.0.1:8000", "remote": "127.0.0.1:5000", "send_q": [90000, 100], "peer_recv_q": [9, 9]},
             {"local": "127.0.0.1:8000", "remote": "127.0.0.1:5001", "send_q": [300, 400], "peer_recv_q": [0, 0]},
             {"local": "127.0.0.1:8000", "remote": "10.0.0.9:5002", "send_q": [300, 400], "peer_recv_q": [None, None]}]
    quiet = {"running": 0.0, "waiting": 0.0, "generation_tokens": 1.0, "prompt_tokens": 1.0}
    data = _server_data(quiet, quiet, connections=conns)
    assert analyze(snapshot(PROCS, data)) == []
