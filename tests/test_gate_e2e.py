"""The gate end to end: real namespaces, a real leaked segment, a real wedged HTTP server, the real CLI."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vllmdiag.context import Context
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.contract import names
from vllmdiag.gate.run import run_gate

CAN_UNSHARE = os.geteuid() == 0 and shutil.which("unshare") is not None
root_only = pytest.mark.skipif(not CAN_UNSHARE, reason="needs root and unshare (private /dev/shm tmpfs)")


def gate_in_namespace(tmp_path: Path, shm_size: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`vllmdiag gate` as a clean node: own pid, net and mount namespace with its own tmpfs /dev/shm."""
    rpc = tmp_path / "rpc"
    rpc.mkdir(exist_ok=True)
    cmd = shlex.join([sys.executable, "-m", "vllmdiag", "gate", *args])
    script = f"mount -t tmpfs -o size={shm_size} tmpfs /dev/shm && exec {cmd}"
    env = {**os.environ, "VLLM_RPC_BASE_PATH": str(rpc)}
    return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--net", "--mount", "--propagation", "private",
                           "sh", "-c", script], capture_output=True, text=True, timeout=60, env=env)


@root_only
def test_clean_node_passes_and_junit_has_one_testcase_per_check(tmp_path: Path) -> None:
    junit = tmp_path / "gate.xml"
    prom = tmp_path / "gate.prom"
    cfg = tmp_path / "gate.yaml"
    cfg.write_text("ports: [8000, 29500]\n")
    proc = gate_in_namespace(tmp_path, "2g", "--tp", "2", "--config", str(cfg), "--json", "--junit", str(junit),
                             "--prom", str(prom))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    out = json.loads(proc.stdout)
    checks = {c["name"]: c for c in out["gate"]["checks"]}
    assert checks["shm_capacity"]["status"] == "pass" and checks["shm_leaks"]["status"] == "pass"
    assert checks["gpu_health"]["status"] in ("skip", "warn", "pass")
    assert set(checks) == set(names("node", "url")) - {"url_health", "url_metrics", "url_completion"}
    suites = ET.parse(junit).getroot()
    assert suites.tag == "testsuites"
    (suite,) = suites.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == list(checks)
    assert suite.get("tests") == str(len(cases)) and suite.get("failures") == "0"
    assert int(suite.get("skipped") or 0) == sum(1 for c in cases if c.find("skipped") is not None)
    text = prom.read_text()
    assert 'vllmdiag_gate_check{node="' in text and 'check="shm_capacity",status="pass",required="true"} 1' in text
    assert "vllmdiag_gate_passed{" in text and "vllmdiag_gate_last_run_timestamp_seconds{" in text
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@root_only
def test_too_small_dev_shm_fails_shm_capacity(tmp_path: Path) -> None:
    proc = gate_in_namespace(tmp_path, "64m", "--tp", "8", "--json")
    assert proc.returncode == 1, proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["gate"]["checks"]}
    shm = checks["shm_capacity"]
    assert shm["status"] == "fail" and shm["required"]
    assert shm["numbers"]["size_bytes"] == 64 << 20 and shm["numbers"]["need_bytes"] > 2 << 30


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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllmdiag", "gate", *args], capture_output=True, text=True, timeout=60)


def test_bad_usage_and_config_exit_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "gate.yaml"
    bad.write_text("limits:\n  nofile_min: many\n")
    for args in (["--config", str(bad)], ["--tp", "0"], ["--url", "ftp://x"], ["--config", str(tmp_path / "none.yaml")]):
        proc = _cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("vllmdiag: "), proc.stderr
    assert "limits.nofile_min" in _cli("--config", str(bad)).stderr


FAKE_NVML = Path(__file__).parent / "fake_nvml"


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
