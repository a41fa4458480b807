"""Process layer: an engine paused by vLLM's fault tolerance is alive and waiting, not hung (pure).

With ``--enable-fault-tolerance`` (vLLM #44428, DP+EP) an exception in the busy loop no longer kills the
engine: ``run_with_fault_tolerance`` aborts its requests, marks it UNHEALTHY and waits
``engine_recovery_timeout_sec`` for ``POST /fault_tolerance/apply`` (status at ``GET /fault_tolerance/status``).
Nothing moves and nothing is in flight, which would otherwise read idle (healthy): it serves nothing, so it is
said as paused (degraded, a warning with no culprit), never as a hang, and the watcher's /livez never fails on it.
"""

from __future__ import annotations

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import finding
from vllmdiag.analysis.views.deployments import display_title
from vllmdiag.model import Finding
from vllmdiag.vocab.stack_classes import ENGINE_PAUSED

LAYER = "process"
CODES = ("process.engine_paused",)


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    classes = facts.classes
    out = []
    for dep in deployments:
        paused = [e for e in dep.engines if (c := classes.get(e["pid"])) is not None and c.name == ENGINE_PAUSED]
        if not paused:
            continue
        who = ", ".join(f"{display_title(e)} (pid {e['pid']})" for e in paused)
        where = classes[paused[0]["pid"]].where
        out.append(finding("process.engine_paused", LAYER, "warning", snapshot, dep,
                           f"Paused by vLLM's fault tolerance, not hung: {who} left its busy loop after an error and "
                           f"waits for a recovery instruction ({where}); it serves nothing until then.",
                           [e["pid"] for e in paused], {"paused": [e["pid"] for e in paused], "where": where,
                                                        "paused_engine": True}, []))
    return out
