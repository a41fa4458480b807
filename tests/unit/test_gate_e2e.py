"""The gate end to end: real namespaces, a real leaked segment, a real wedged HTTP server, the real CLI."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vllmdiag.context import Context
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.run import run_gate


def test_leaked_psm_segment_fails_shm_leaks(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    leaked = shm / "psm_0badc0de"
    leaked.write_bytes(b"\0" * 8192)
    os.truncate(leaked, 167772190)  # the real TP=2 rpc ring's size (16 MiB x 10, 2 readers), sparse
    foreign = shm / "psm_0000f00d"  # a psm_ of no ring's size: some other program's SharedMemory
    foreign.write_bytes(b"\0" * 8192)
    old = time.time() - 3600
    os.utime(leaked, (old, old))
    os.utime(foreign, (old, old))
    try:
        node = run_gate(GateConfig(ports=()), ctx=Context(dev_shm=shm))
        res = {c.name: c for c in node.checks}["shm_leaks"]
        assert res.status == "fail" and res.required and node.exit_code == 1
        assert [s["path"] for s in res.numbers["segments"]] == [str(leaked)] and "psm_0badc0de" in res.reason
    finally:
        leaked.unlink()
        foreign.unlink()
    node = run_gate(GateConfig(ports=()), ctx=Context(dev_shm=shm))
    res = {c.name: c for c in node.checks}["shm_leaks"]
    assert str(leaked) not in [s["path"] for s in res.numbers["segments"]]


class _Api(BaseHTTPRequestHandler):
    release = threading.Event()
    answer_completions = False

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/health":
            self._send(200, "")
        elif self.path == "/metrics":
            self._send(200, 'vllm:num_requests_running{model_name="m"} 0.0\nvllm:num_requests_waiting{model_name="m"} 2.0\n',
                       "text/plain")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "m"}]}))
        else:
            self._send(404, "{}")

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.answer_completions:
            self.release.wait(30)  # a wedged engine: the request is accepted and never answered
            return
        self._send(200, json.dumps({"choices": [{"text": "!"}]}))


@pytest.fixture()
def api() -> Iterator[tuple[str, type[_Api]]]:
    class Handler(_Api):  # fresh class attributes per test
        release = threading.Event()
        answer_completions = False

    handler: type[_Api] = Handler
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_wedged_deployment_fails_one_token_check_within_deadline(api: tuple[str, type[_Api]], tmp_path: Path) -> None:
    url, _ = api
    cfg = GateConfig(ports=(), completion_deadline_s=1.0, health_timeout_s=1.0)
    start = time.monotonic()
    node = run_gate(cfg, url, ctx=Context(dev_shm=tmp_path))
    elapsed = time.monotonic() - start
    checks = {c.name: c for c in node.checks}
    assert checks["url_health"].status == "pass" and checks["url_metrics"].status == "pass"
    assert checks["url_metrics"].numbers["num_requests_waiting"] == 2.0
    assert checks["url_completion"].status == "fail" and checks["url_completion"].numbers["timed_out"]
    assert "does not probe workers" in checks["url_completion"].reason
    assert checks["ports"].status == "pass"  # with --url: the API port must be listening, and it is
    assert node.exit_code == 1 and elapsed < 4.0


def test_answering_deployment_passes_url_checks(api: tuple[str, type[_Api]], tmp_path: Path) -> None:
    url, handler = api
    handler.answer_completions = True
    node = run_gate(GateConfig(ports=(), completion_deadline_s=2.0), url, ctx=Context(dev_shm=tmp_path))
    checks = {c.name: c for c in node.checks}
    assert checks["url_completion"].status == "pass", checks["url_completion"].reason
    assert checks["url_completion"].numbers["choices"] == 1


FAKE_NVML = Path(__file__).parent.parent / "fake_nvml"


@pytest.mark.skipif(not (FAKE_NVML / "pynvml.py").exists(), reason="the nvml probe's fake module is not there")
def test_fake_nvml_with_ecc_errors_fails_gpu_health(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VLLMDIAG_FAKE_NVML", str(FAKE_NVML))
    monkeypatch.setenv("FAKE_NVML_CONFIG", json.dumps({"gpus": [{"ecc_unc": 0}, {"ecc_unc": 4}]}))
    node = run_gate(GateConfig(ports=(), require_nvml=True), ctx=Context(dev_shm=tmp_path))
    gpu = {c.name: c for c in node.checks}["gpu_health"]
    assert node.snapshot is not None
    assert node.snapshot.status("nvml") == "ok", node.snapshot.probes.get("nvml")
    assert gpu.status == "fail" and gpu.required and "GPU1: 4 uncorrected ECC" in gpu.reason, gpu.reason
    assert "GPU0" not in gpu.reason and node.exit_code == 1
    monkeypatch.setenv("FAKE_NVML_CONFIG", json.dumps({"gpus": [{"ecc_unc": 0}]}))
    healthy = {c.name: c for c in run_gate(GateConfig(ports=()), ctx=Context(dev_shm=tmp_path)).checks}["gpu_health"]
    assert healthy.status == "pass" and "uncorrected" not in healthy.reason, healthy.reason
