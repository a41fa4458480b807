"""The http probe against a real local HTTP server process; the metrics parser on Prometheus text."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from test_http_probe import api_proc, collect_http  # noqa: F401 - shared with the pure half

from vllmdiag.probe import Partial
from vllmdiag.probes import http

# A stand-in for vLLM's OpenAI server: /health, /metrics, /v1/models, /v1/completions, an endless /stream.
SERVER = r"""
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
METRICS = ('# HELP vllm:num_requests_running Number of requests in model execution batches.\n'
           '# TYPE vllm:num_requests_running gauge\n'
           'vllm:num_requests_running{engine="0",model_name="m"} ' + os.environ.get("RUNNING", "0") + '\n'
           'vllm:num_requests_waiting{engine="0",model_name="m"} ' + os.environ.get("WAITING", "0") + '\n'
           'vllm:generation_tokens_total{engine="0",model_name="m"} 42.0\n'
           'vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9\n'
           'vllm:prompt_tokens_total{engine="0",model_name="m"} 7.0\n')
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def _send(self, code, body, ctype="text/plain"):
        self.send_response(code); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        if self.path == "/health": self._send(int(os.environ.get("HEALTH", "200")), b"")
        elif self.path == "/metrics": self._send(200, METRICS.encode())
        elif self.path == "/v1/models": self._send(200, json.dumps({"data": [{"id": "m"}]}).encode(), "application/json")
        elif self.path == "/stream":
            self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.end_headers()
            try:
                while True:
                    self.wfile.write(b"data: " + b"x" * 1024 + b"\n\n"); self.wfile.flush(); time.sleep(0.002)
            except OSError:
                return
        else: self._send(404, b"")
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        req = json.loads(body)
        assert req["max_tokens"] == 1
        self._send(200, json.dumps({"choices": [{"text": "x"}], "model": req.get("model")}).encode(), "application/json")
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"""


@pytest.fixture
def server() -> Iterator[tuple[subprocess.Popen[str], int]]:
    yield from start_server({})


def start_server(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], int]]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env}, start_new_session=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    try:
        yield proc, port
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_health_metrics_twice_and_probe_request(server: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = server
    start = time.monotonic()
    data = collect_http([api_proc(proc.pid, port)], probe_request=True)
    assert time.monotonic() - start < 2.0
    assert isinstance(data, dict), data
    [srv] = data["servers"]
    assert srv["address"] == f"127.0.0.1:{port}" and srv["pids"] == [proc.pid]
    assert srv["health"]["status"] == 200
    assert len(srv["metrics"]) == 2 and data["sample_gap_s"] >= http.MIN_GAP_S - 0.01
    m = srv["metrics"][1]
    assert (m["running"], m["waiting"], m["generation_tokens"], m["prompt_tokens"]) == (0.0, 0.0, 42.0, 7.0)
    assert srv["probe_request"]["status"] == 200 and srv["probe_request"]["model"] == "m"
    [api] = data["api_servers"]
    assert api["tcp_listen"] == [f"127.0.0.1:{port}"] and api["cfg_port"] == port


def test_probe_request_is_off_by_default(server: tuple[subprocess.Popen[str], int]) -> None:
    proc, port = server
    data = collect_http([api_proc(proc.pid, port)])
    assert isinstance(data, dict), data
    assert "probe_request" not in data["servers"][0]


def test_bound_but_not_listening_port_is_recorded_as_an_unlisted_socket() -> None:
    """vLLM binds the HTTP port long before listen(); such a socket is in no /proc/net table."""
    child = subprocess.Popen([sys.executable, "-c", "import socket,time; s=socket.socket(); s.bind(('127.0.0.1',0)); "
                              "print(s.fileno(), flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        fd = int(child.stdout.readline())
        inode = int(os.readlink(f"/proc/{child.pid}/fd/{fd}")[8:-1])
        data = collect_http([api_proc(child.pid, 8000)])
        assert isinstance(data, dict), data
        assert data["servers"] == []
        assert inode in data["api_servers"][0]["unlisted_socket_inodes"]
    finally:
        child.kill()
        child.wait()


def test_get_refused_and_timeout_are_results() -> None:
    assert http.get("127.0.0.1", 1, "/health", 0.5)["error"] == "refused"
    srv = socket.socket()
    srv.bind(("127.0.0.4", 0))
    srv.listen(4)
    held: list[socket.socket] = []
    t = threading.Thread(target=lambda: held.append(srv.accept()[0]), daemon=True)
    t.start()
    start = time.monotonic()
    res = http.get("127.0.0.4", srv.getsockname()[1], "/health", 0.3)
    assert res["error"] == "timeout" and time.monotonic() - start < 0.8
    t.join(1)
    for s in (*held, srv):
        s.close()


def test_hostile_metrics_values_are_dropped_and_said_in_the_probe_reason() -> None:
    """issue 25 item 7: NaN and 1e400 from /metrics are dropped, and the probe's reason says so."""
    for proc, port in start_server({"RUNNING": "NaN", "WAITING": "1e400"}):
        res = collect_http([api_proc(proc.pid, port)])
        assert isinstance(res, Partial) and "dropped" in res.reason and "NaN" in res.reason, res
        m = res.data["servers"][0]["metrics"][0]
        assert m["running"] is None and m["waiting"] is None and m["generation_tokens"] == 42.0
