"""Client layer: a real client that stops reading a real HTTP stream is named; metrics rules; the simulator."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from test_http_probe import api_proc, collect_http, start_server

from vllmdiag.analysis.bisect import analyze as analyze_report
from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.layers.client import requests as client
from vllmdiag.api import triage
from vllmdiag.model import ProbeResult, Snapshot
from vllmdiag.render import client_view

from sim_fixtures import sim_state  # noqa: F401

CLIENT = r"""
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n")
print(s.getsockname()[1], flush=True)
if sys.argv[2] == "read":
    while s.recv(65536):
        pass
time.sleep(60)
"""


def snapshot(procs: list[dict[str, Any]], http_data: dict[str, Any]) -> Snapshot:
    return Snapshot(node="t", collected_at="", vllmdiag_version="", duration_s=0.0,
                    probes={"processes": ProbeResult("ok", 0.0, None, {"processes": procs}),
                            "http": ProbeResult("ok", 0.0, None, http_data)})


def analyze(snap: Snapshot) -> list[Any]:
    return client.analyze(Facts.of(snap))


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], int]]:
    yield from start_server({})


def _client(port: int, mode: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def test_client_that_stops_reading_is_named_with_its_pid(server: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = server
    stalled, stalled_port = _client(port, "stall")
    reader, reader_port = _client(port, "read")
    try:
        time.sleep(0.5)  # the stalled client's window closes; the server's send buffer fills
        procs = [api_proc(proc.pid, port)]
        data = collect_http(procs)
        assert isinstance(data, dict), data
        conns = {c["remote"]: c for c in data["servers"][0]["connections"]}
        stuck = conns[f"127.0.0.1:{stalled_port}"]
        assert min(stuck["send_q"]) >= client.STALL_BYTES and stuck["peer"]["pid"] == stalled.pid
        findings = analyze(snapshot(procs, data))
        assert [f.code for f in findings] == ["client.stalled_reader"]
        [c] = findings[0].culprits
        assert c.pid == stalled.pid and c.role == "http_client" and f"127.0.0.1:{stalled_port}" in c.title
        assert f"127.0.0.1:{reader_port}" in conns  # the live reader is seen but not blamed
        out = io.StringIO()
        client_view.render(analyze_report([snapshot(procs, data)]), Console(file=out, width=200))
        assert f"127.0.0.1:{stalled_port}" in out.getvalue() and str(stalled.pid) in out.getvalue()
    finally:
        for p in (stalled, reader):
            p.kill()
            p.wait()


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


sim = pytest.importorskip("vllmdiag_sim.deployment")


@pytest.mark.slow
def test_sim_client_stalled_names_the_client(sim_state: Path) -> None:  # noqa: F811
    with sim.Deployment.up(tp=2, fault="client-stalled") as dep:
        client_pid = dep.pids_by_role["client"][0]
        report = triage(pids=[dep.root_pid]).report
        assert report.verdict.status == "blocked" and report.verdict.layer == "client", report.verdict.summary
        assert report.verdict.culprits[0].pid == client_pid and report.verdict.culprits[0].role == "http_client"


@pytest.mark.slow
def test_sim_healthy_under_load_has_no_client_finding(sim_state: Path) -> None:  # noqa: F811
    with sim.Deployment.up(tp=2, fault="healthy-load") as dep:
        report = triage(pids=[dep.root_pid]).report
        assert not [f for f in report.findings if f.layer in ("client", "handshake") and f.severity != "info"]
        assert report.verdict.status == "healthy", report.verdict.summary


def test_sim_stopped_api_server_is_named_without_asking_it(sim_state: Path) -> None:  # noqa: F811
    """A SIGSTOPped API server cannot answer a GET: the http probe does not wait one out per request
    (a real server took 4.9 s to triage that way); the process layer names it, the server entry says why
    it was not asked."""
    with sim.Deployment.up(tp=2) as dep:
        os.kill(dep.root_pid, signal.SIGSTOP)
        try:
            report = triage(pids=[dep.root_pid], confirm_s=0).report
        finally:
            os.kill(dep.root_pid, signal.SIGCONT)
        v = report.verdict
        assert (v.status, v.layer, v.culprits[0].pid, v.culprits[0].role) == ("blocked", "process", dep.root_pid,
                                                                            "api_server"), v.summary
        servers = report.snapshots[0].data("http")["servers"]
        assert servers and all("stopped" in s["not_asked"] and not s.get("metrics") and "health" not in s
                               for s in servers), servers
        out = io.StringIO()
        client_view.render(report, Console(file=out, width=200))
        assert "not asked: the API server" in out.getvalue()
