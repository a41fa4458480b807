"""Client layer: is output produced but not consumed, and does the HTTP side answer? (pure)

Reads the ``http`` probe: each API server connection's Send-Q at two moments, /health, /metrics at
two moments, the optional one-token request. A reader that stops (a hung client, a proxy that stopped
draining) leaves the server's Send-Q full and not shrinking between samples, while a live reader on
loopback drains it in microseconds.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment
from vllmdiag.analysis.views.kv_wait import waits_for_kv
from vllmdiag.model import Culprit, Finding, Snapshot
from vllmdiag.vocab.stack_classes import (
    COLLECTIVE,
    COMPILING,
    ENGINE_BLOCKED_FULL_RING,
    ENGINE_WAITING_WORKERS,
    EXECUTING,
    SYNC_POINT,
)

LAYER = "client"
CODES = ("client.stalled_reader", "client.requests_stuck_waiting", "client.no_token_progress", "client.health_failed",
         "client.probe_request_failed")
STALL_BYTES = 16384
MIN_GAP_S = 0.15  # the probe aims at 0.2 s; allow for scheduling jitter


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    http = snapshot.data("http")
    out: list[Finding] = []
    for dep in deployments:
        for server in http.get("servers", []):
            if set(server.get("pids", [])) & dep.pids:
                gap = float(http.get("sample_gap_s") or 0.0)
                out += _stalled(snapshot, dep, server, gap) + _metrics(facts, dep, server, gap)
                out += _health(snapshot, dep, server)
    return out


def _stalled(snap: Snapshot, dep: Deployment, server: dict[str, Any], gap: float) -> list[Finding]:
    out = []
    for c in server.get("connections", []):
        s0, s1 = (c.get("send_q") or [None, None])[:2]
        p0, p1 = (c.get("peer_recv_q") or [None, None])[:2]
        if s0 is None or s1 is None or not 0 < s0 <= s1:
            continue  # nothing queued, or it drained between the samples
        # On loopback a Send-Q that stays non-zero means a closed receive window: the peer holds unread
        # bytes (its Recv-Q) and takes no more. Without the peer's view only a large queue is proof.
        if min(s0, s1) < STALL_BYTES and not (p0 and p1):
            continue
        peer = c.get("peer") or {}
        pid = peer.get("pid")
        who = f"{peer.get('comm') or 'client'} pid {pid} at {c['remote']}" if pid else f"client at {c['remote']}"
        reason = f"stopped reading its HTTP stream: server Send-Q {s0} -> {s1} bytes over {gap:.2f} s"
        if peer.get("recv_q") is not None:
            reason += f", its own Recv-Q {peer['recv_q']} bytes unread"
        blame = Culprit(node=snap.node, pid=pid, role="http_client", rank=None,
                        title=f"{peer.get('comm') or 'HTTP client'} {c['remote']}", reason=reason)
        out.append(finding("client.stalled_reader", LAYER, "critical", snap, dep,
                           f"The {who} stopped reading: the API server's Send-Q on {c['local']} is {s1} bytes and not "
                           f"draining ({s0} -> {s1} over {gap:.2f} s).",
                           [p for p in [pid, *server.get("pids", [])] if p],
                           {"local": c["local"], "remote": c["remote"], "send_q": [s0, s1], "peer_recv_q": [p0, p1],
                            "peer": peer, "gap_s": gap, "port": server.get("port")}, [blame]))
    return out


def _metrics(facts: Facts, dep: Deployment, server: dict[str, Any], gap: float) -> list[Finding]:
    snap = facts.snapshot
    samples = [m for m in server.get("metrics", []) if m.get("status") == 200]
    if len(samples) < 2 or gap < MIN_GAP_S:
        return []
    m0, m1 = samples[0], samples[-1]
    if any(m.get(k) is None for m in (m0, m1) for k in ("running", "waiting", "generation_tokens")):
        return []
    tokens = [(m.get("generation_tokens") or 0) + (m.get("prompt_tokens") or 0) for m in (m0, m1)]
    moved = tokens[1] != tokens[0]
    evidence = {"first": _brief(m0), "last": _brief(m1), "gap_s": gap, "port": server.get("port")}
    engines = [e for e in dep.engines if e.get("state") not in ("Z", "X")]
    if m0["waiting"] > 0 and m1["waiting"] > 0 and m0["running"] == 0 and m1["running"] == 0 and not moved:
        # An EngineCore whose stack waits on its workers (or on a full ring) is not "scheduling
        # nothing": it is stuck below, and the layer that stops the flow names that culprit.
        busy_below = _engines_waiting_below(facts, engines)
        # A P/D decode instance whose requests wait for remote KV schedules nothing by design: the queue
        # layer names the producer (queue/kv_connector); blaming the local engine here would be the wrong culprit.
        kv_wait = waits_for_kv(facts, dep)
        return [finding("client.requests_stuck_waiting", LAYER, "info" if busy_below or kv_wait else "critical", snap, dep,
                        f"{m1['waiting']:.0f} request(s) wait while none runs and no token was produced in {gap:.2f} s: "
                        + ("they wait for KV from the prefill instance." if kv_wait else "the engine schedules nothing."),
                        [e["pid"] for e in engines], {**evidence, "kv_wait": kv_wait},
                        [] if kv_wait else [culprit(snap, e, "requests wait but it schedules none") for e in engines])]
    if m0["running"] > 0 and m1["running"] > 0 and not moved:
        return [finding("client.no_token_progress", LAYER, "info", snap, dep,
                        f"{m1['running']:.0f} request(s) running but no token counted in {gap:.2f} s "
                        "(a long prefill step, or a stall the other layers explain).", [], evidence, [])]
    return []


def _engines_waiting_below(facts: Facts, engines: list[dict[str, Any]]) -> bool:
    snap, classes = facts.snapshot, facts.classes
    waiting = (ENGINE_WAITING_WORKERS, ENGINE_BLOCKED_FULL_RING,
               # TP=1 (UniProcExecutor): the EngineCore runs the model step itself (vllm-internals 5.4)
               SYNC_POINT, COLLECTIVE, EXECUTING, COMPILING)
    if bool(engines) and all((c := classes.get(e["pid"])) is not None and c.name in waiting for e in engines):
        return True
    # A request whose grammar is not compiled yet waits by design (WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR):
    # whether that is a compile or a stall is queue_grammar's call, from the grammar thread's frame over time.
    from vllmdiag.analysis.views.grammar_looks import engines_in_grammar

    return engines_in_grammar(snap, engines)


def _health(snap: Snapshot, dep: Deployment, server: dict[str, Any]) -> list[Finding]:
    out = []
    engines = [e for e in dep.engines if e.get("state") not in ("Z", "X")]
    api = dep.by_pid(server.get("pids", [0])[0]) or {"pid": server.get("pids", [None])[0]}
    health = server.get("health") or {}
    if health and health.get("status") != 200:
        status, err = health.get("status"), health.get("error")
        dead = isinstance(status, int) and status >= 500
        out.append(finding("client.health_failed", LAYER, "critical" if dead else "warning", snap, dep,
                           f"GET /health on port {server.get('port')} answered {status or err}"
                           + (": the engine is marked dead/errored." if dead else ": the API server did not answer in time."),
                           [api["pid"]] if api.get("pid") else [], {"health": health, "port": server.get("port")},
                           [culprit(snap, e, "the API server reports the engine unhealthy") for e in engines] if dead
                           else [culprit(snap, api, f"/health {err or status}")]))
    probe = server.get("probe_request")
    if probe and (probe.get("status") != 200 or probe.get("error")):
        out.append(finding("client.probe_request_failed", LAYER, "critical", snap, dep,
                           f"A one-token completion on port {server.get('port')} failed: "
                           f"{probe.get('error') or probe.get('status')} after {probe.get('latency_ms')} ms.",
                           [e["pid"] for e in engines], {"probe_request": probe, "port": server.get("port")},
                           [culprit(snap, e, "produced no token for a one-token request") for e in engines]))
    return out


def _brief(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m.get(k) for k in ("at_s", "running", "waiting", "generation_tokens", "prompt_tokens")}
