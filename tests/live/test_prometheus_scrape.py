"""Debian's prometheus and prometheus-node-exporter read what `vllmdiag watch` serves (issue 34 item 3).

A real Prometheus (loopback, its own temporary TSDB, scraping every second, with the shipped alert
rules) scrapes the watcher's exporter while a real node_exporter serves the watcher's --textfile; a
simulated TP=2 deployment hangs and Prometheus' own query API shows vllmdiag_deployment_stalled go
0 -> 1, node_exporter's /metrics carries the same from the textfile, and the shipped rule fires.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_watch_probes import listening

from ports import free_port
from sim_fixtures import sim_state  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent.parent
PROMETHEUS, NODE_EXPORTER = shutil.which("prometheus"), shutil.which("prometheus-node-exporter")
sim = pytest.importorskip("vllmdiag_sim.deployment")
pytestmark = [
    pytest.mark.skipif(PROMETHEUS is None or NODE_EXPORTER is None,
                       reason="apt-get install prometheus prometheus-node-exporter"),
    pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root"),
]
NODE = "promnode"


@contextmanager
def _process(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def _until(what: str, cond: Any, timeout_s: float, logs: list[Path]) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except OSError as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.25)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logs if p.exists())
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})\n{tails}")


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    doc = json.loads(_get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


@pytest.mark.timeout(300)
def test_prometheus_and_node_exporter_see_a_hang_through_the_watcher(sim_state: Path, tmp_path: Path) -> None:  # noqa: F811
    textdir, tsdb = tmp_path / "textfile", tmp_path / "tsdb"
    textdir.mkdir()
    wlog, plog, nlog = tmp_path / "watch.log", tmp_path / "prometheus.log", tmp_path / "node_exporter.log"
    logs = [wlog, plog, nlog]
    argv = [sys.executable, "-m", "vllmdiag", "watch", "--out", str(tmp_path / "out"), "--interval", "1",
            "--confirm", "2", "--metrics-port", "0", "--node", NODE, "--textfile", str(textdir),
            "--select", f"VLLM_RPC_BASE_PATH={os.environ['VLLM_RPC_BASE_PATH']}"]
    with open(wlog, "wb") as err:
        watcher = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        host, port = listening(wlog, watcher)
        nport, pport = free_port("127.0.0.1"), free_port("127.0.0.1")
        shutil.copy(ROOT / "examples" / "prometheus" / "vllmdiag-rules.yml", tmp_path / "vllmdiag-rules.yml")
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}\n"
            "rule_files: [vllmdiag-rules.yml]\n"
            "scrape_configs:\n"
            f"  - {{job_name: vllmdiag-watch, static_configs: [{{targets: ['{host}:{port}']}}]}}\n"
            f"  - {{job_name: node, static_configs: [{{targets: ['127.0.0.1:{nport}']}}]}}\n")
        node_argv = [str(NODE_EXPORTER), "--web.listen-address", f"127.0.0.1:{nport}", "--collector.disable-defaults",
                     "--collector.textfile", "--collector.textfile.directory", str(textdir)]
        prom_argv = [str(PROMETHEUS), "--config.file", str(tmp_path / "prometheus.yml"), "--storage.tsdb.path", str(tsdb),
                     "--web.listen-address", f"127.0.0.1:{pport}", "--storage.tsdb.retention.time", "1h"]
        prom = f"http://127.0.0.1:{pport}"
        with _process(node_argv, nlog), _process(prom_argv, plog), sim.Deployment.up(tp=2, fault="healthy-load") as dep:
            dep_id = f"{NODE}:{dep.root_pid}"
            sel = f'vllmdiag_deployment_stalled{{job="vllmdiag-watch",deployment="{dep_id}"}}'
            zero = _until("Prometheus to hold the stall gauge at 0", lambda: _query(prom, sel), 90, logs)
            assert [r["value"][1] for r in zero] == ["0"] and zero[0]["metric"]["job"] == "vllmdiag-watch"
            up = _query(prom, 'up{job="vllmdiag-watch"}')
            assert [r["value"][1] for r in up] == ["1"]
            via_node = _until("node_exporter to serve the textfile",
                              lambda: _textfile_value(nport, dep_id), 30, logs)
            assert via_node == "0"
            dep.inject("straggler", 1)
            one = _until("Prometheus to see the stall", lambda: [r for r in _query(prom, sel) if r["value"][1] == "1"],
                         90, logs)
            assert one[0]["metric"]["node"] == NODE
            # the same through node_exporter's textfile collector, scraped by the same Prometheus
            both = _until("the textfile's stall through Prometheus", lambda: _query(
                prom, f'vllmdiag_deployment_stalled{{job="node",deployment="{dep_id}"}} == 1'), 30, logs)
            assert both
            assert _textfile_value(nport, dep_id) == "1"
            assert 'node_textfile_scrape_error 0' in _get(f"http://127.0.0.1:{nport}/metrics")
            firing = _until("the shipped rule to fire", lambda: [
                a for a in json.loads(_get(f"{prom}/api/v1/alerts"))["data"]["alerts"]
                if a["labels"]["alertname"] == "VllmdiagDeploymentStalled" and a["state"] == "firing"
                and a["labels"].get("deployment") == dep_id], 30, logs)
            assert firing[0]["labels"]["severity"] == "critical"
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=60) == 0
        assert not [p for p in textdir.iterdir() if p.name.endswith(".tmp")], "no temporary file left"
        assert "Traceback" not in wlog.read_text()
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()


def _textfile_value(port: int, dep_id: str) -> str | None:
    for line in _get(f"http://127.0.0.1:{port}/metrics").splitlines():
        if line.startswith("vllmdiag_deployment_stalled{") and f'deployment="{dep_id}"' in line:
            return line.rsplit(" ", 1)[1]
    return None
