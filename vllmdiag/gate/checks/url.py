"""ports, and with --url: url_health, url_metrics, url_completion (from the gate_url probe)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from vllmdiag.gate.common import probe_problem
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.contract import GateCheck
from vllmdiag.gate.result import CheckResult, result
from vllmdiag.model import Snapshot

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "::")


def check_ports(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "ports"
    problem = probe_problem(snap, "preflight")
    if problem:
        return result(name, "skip", problem)
    listening: dict[int, list[dict[str, Any]]] = {}
    for row in snap.data("preflight").get("listening") or []:
        listening.setdefault(int(row["port"]), []).append(row)
    url = snap.options.get("gate_url")
    if url:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or ""
        if host not in LOCAL_HOSTS and not host.startswith("127.") and host != snap.node:
            return result(name, "skip", f"{host} is not this node; its listening port cannot be seen here", port=port)
        numbers = {"port": port, "listening": port in listening}
        if port in listening:
            return result(name, "pass", f"port {port} of {url} is listening", **numbers)
        return result(name, "fail", f"nothing listens on port {port} of {url} (vLLM binds early but listens only "
                      "after every engine reported ready: still starting, or stuck in startup)", **numbers)
    busy = {p: _owners(listening[p]) for p in cfg.ports if p in listening}
    numbers = {"ports": list(cfg.ports), "in_use": busy}
    if busy:
        shown = ", ".join(f"{p} ({o})" for p, o in busy.items())
        return result(name, "fail", f"port(s) already in use: {shown}", **numbers)
    return result(name, "pass", f"port(s) {', '.join(map(str, cfg.ports)) or 'none'} free", **numbers)


def _owners(rows: list[dict[str, Any]]) -> str:
    owners = sorted({f"pid {pid} {row.get('comm', '')}".strip() for row in rows for pid in row.get("pids", [])})
    return ", ".join(owners) or "owner not visible"


def _url_data(snap: Snapshot) -> tuple[dict[str, Any], str | None]:
    return snap.data("gate_url"), probe_problem(snap, "gate_url")


def check_url_health(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "url_health"
    data, problem = _url_data(snap)
    if problem:
        return result(name, "fail", problem)
    h = data.get("health") or {}
    numbers = {k: h.get(k) for k in ("status_code", "duration_s", "error")}
    if h.get("status_code") == 200:
        return result(name, "pass", f"/health 200 in {h.get('duration_s')} s (does not prove workers answer)", **numbers)
    return result(name, "fail", f"/health: {h.get('error') or h.get('status_code')} {h.get('body_head', '')}".strip(),
                  **numbers)


def check_url_metrics(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "url_metrics"
    data, problem = _url_data(snap)
    if problem:
        return result(name, "fail", problem)
    m = data.get("metrics") or {}
    counts = m.get("counts") or {}
    numbers = {"status_code": m.get("status_code"), "duration_s": m.get("duration_s"), **counts}
    if m.get("status_code") != 200:
        return result(name, "fail", f"/metrics: {m.get('error') or m.get('status_code')}", **numbers)
    if not counts:
        return result(name, "warn", "/metrics answered without vllm:num_requests_* (not a vLLM server?)", **numbers)
    dropped = m.get("dropped") or []
    note = f" (dropped, not finite or negative: {', '.join(map(str, dropped))})" if dropped else ""
    return result(name, "pass", f"/metrics: running {counts.get('num_requests_running', 0):g}, "
                  f"waiting {counts.get('num_requests_waiting', 0):g}{note}", **numbers)


def check_url_completion(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "url_completion"
    data, problem = _url_data(snap)
    if problem:
        return result(name, "fail", problem)
    c = data.get("completion") or {}
    numbers = {"model": data.get("model"), **{k: c.get(k) for k in ("status_code", "duration_s", "deadline_s",
                                                                   "timed_out", "choices", "error")}}
    if c.get("skipped"):
        return result(name, "fail", f"one-token completion not sent: {c['skipped']}", **numbers)
    if c.get("timed_out"):
        healthy = (data.get("health") or {}).get("status_code") == 200
        return result(name, "fail", f"no answer to a 1-token completion within {c.get('deadline_s')} s"
                      + (" although /health said 200 (vLLM's /health does not probe workers)" if healthy else "")
                      + ": the engine or a worker is stuck; run `vllmdiag triage`", **numbers)
    if c.get("status_code") == 200 and c.get("choices"):
        return result(name, "pass", f"1-token completion from {data.get('model')} in {c.get('duration_s')} s", **numbers)
    return result(name, "fail", f"1-token completion failed: {c.get('error') or c.get('status_code')}", **numbers)


GATE_CHECKS = (
    GateCheck("ports", "node", "network", check_ports),
    GateCheck("url_health", "url", "server", check_url_health),
    GateCheck("url_metrics", "url", "server", check_url_metrics),
    GateCheck("url_completion", "url", "server", check_url_completion),
)
