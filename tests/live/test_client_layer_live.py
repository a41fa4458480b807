"""The live tests of tests/unit/test_client_layer.py, which says what they check: these start something."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from test_client_layer import analyze, snapshot  # noqa: F401 - shared with the pure half
from test_http_probe import api_proc, collect_http
from test_http_probe_live import start_server

from vllmdiag.analysis.bisect import analyze as analyze_report
from vllmdiag.analysis.layers.client import requests as client
from vllmdiag.api import triage
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
