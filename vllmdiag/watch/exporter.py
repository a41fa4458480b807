"""Prometheus text exposition of the watcher's state, on a tiny http.server (no dependency).

prometheus_client would add a package to every node for a dozen gauges; the text format (0.0.4)
is a few lines. Names follow Prometheus conventions (units in the name, ``_total`` counters) and
every per-deployment series carries the labels ``node`` and ``deployment`` for Grafana.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HELP = {
    "vllmdiag_deployment_stalled": ("gauge", "1 while the deployment is stalled with work in flight (confirmed by a triage)"),
    "vllmdiag_deployment_state": ("gauge", "1 for the deployment's current state (idle, running, suspect, stalled)"),
    "vllmdiag_seconds_since_progress": ("gauge", "seconds since it last moved while it had work (0: idle or moving)"),
    "vllmdiag_stalls_total": ("counter", "stalls confirmed and saved for this deployment"),
    "vllmdiag_last_verdict_info": ("gauge", "1, labelled with the last triage's status, layer and culprit"),
    "vllmdiag_last_culprit_rank": ("gauge", "rank of the last triage's first culprit (-1: none or not a rank)"),
    "vllmdiag_watch_cpu_seconds_total": ("counter", "CPU seconds (user+system) used by the watcher process itself"),
    "vllmdiag_watch_children_cpu_seconds_total": ("counter", "CPU seconds of its finished children (py-spy, NVML, hooks)"),
    "vllmdiag_watch_pass_duration_seconds": ("gauge", "wall time of the last cheap pass"),
    "vllmdiag_watch_passes_total": ("counter", "cheap passes run"),
    "vllmdiag_watch_triages_total": ("counter", "full triages run"),
    "vllmdiag_watch_errors_total": ("counter", "passes or triages that failed (the watcher logs why and goes on)"),
    "vllmdiag_watch_deployments": ("gauge", "deployments seen in the last pass"),
    "vllmdiag_watch_stuck_threads": ("gauge", "probe threads stuck in the kernel (passes then run in a killable child)"),
}
Sample = tuple[str, dict[str, str], float]


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(samples: list[Sample]) -> str:
    lines: list[str] = []
    done: set[str] = set()
    for name, labels, value in sorted(samples, key=lambda s: s[0]):
        if name not in done:
            kind, text = HELP[name]
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            done.add(name)
        lab = ",".join(f'{k}="{escape(str(v))}"' for k, v in labels.items())
        lines.append(f"{name}{{{lab}}} {_num(value)}" if lab else f"{name} {_num(value)}")
    return "\n".join(lines) + "\n"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Exporter:
    """Serves ``/metrics`` from a daemon thread; ``collect`` is called per scrape (under no lock of ours)."""

    def __init__(self, addr: str, port: int, collect: Callable[[], list[Sample]]) -> None:
        handler = _handler(collect)
        self.server = _Server((addr, port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 1.0},
                                       name="watch-exporter", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        if ":" in address[0]:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


def _handler(collect: Callable[[], list[Sample]]) -> Any:
    class Handler(BaseHTTPRequestHandler):
        timeout = 5  # a client that connects and says nothing is dropped
        server_version = "vllmdiag-watch"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("?")[0] != "/metrics":
                self._send(404, b"not found: try /metrics\n", "text/plain")
                return
            self._send(200, render(collect()).encode(), CONTENT_TYPE)

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return  # scrapes every 15 s would flood the watcher's log

    return Handler
