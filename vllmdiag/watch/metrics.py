"""The watcher's state as Prometheus samples (pure but for getrusage): what the exporter serves."""

from __future__ import annotations

import resource
import time
from typing import Any

from vllmdiag.watch.exporter import Sample
from vllmdiag.watch.state import STATES, Tracked


def watcher_samples(node: str, deps: list[Tracked], counts: dict[str, Any]) -> list[Sample]:
    now = time.monotonic()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    lab = {"node": node}
    out: list[Sample] = [
        ("vllmdiag_watch_cpu_seconds_total", lab, round(own.ru_utime + own.ru_stime, 3)),
        ("vllmdiag_watch_children_cpu_seconds_total", lab, round(kids.ru_utime + kids.ru_stime, 3)),
        ("vllmdiag_watch_pass_duration_seconds", lab, round(float(counts["pass_s"]), 4)),
        ("vllmdiag_watch_passes_total", lab, counts["passes"]),
        ("vllmdiag_watch_triages_total", lab, counts["triages"]),
        ("vllmdiag_watch_errors_total", lab, counts["errors"]),
        ("vllmdiag_watch_deployments", lab, len(deps)),
        ("vllmdiag_watch_stuck_threads", lab, counts["stuck"]),
    ]
    for t in deps:
        out += _deployment_samples(node, t, now)
    return out


def _deployment_samples(node: str, t: Tracked, now: float) -> list[Sample]:
    labels = {"node": node, "deployment": t.deployment_id}
    culprit = (t.verdict.get("culprits") or [{}])[0]
    rank = culprit.get("rank")
    out: list[Sample] = [
        ("vllmdiag_deployment_stalled", labels, 1 if t.state == "stalled" else 0),
        ("vllmdiag_seconds_since_progress", labels, round(t.since_progress(now), 3)),
        ("vllmdiag_stalls_total", labels, t.stalls),
        ("vllmdiag_deployment_blind", labels, 1 if t.state == "unknown" else 0),
        ("vllmdiag_last_culprit_rank", labels, rank if isinstance(rank, int) and not isinstance(rank, bool) else -1),
    ]
    out += [("vllmdiag_deployment_state", {**labels, "state": s}, 1 if t.state == s else 0) for s in STATES]
    if t.verdict:
        out.append(("vllmdiag_last_verdict_info", {**labels, "status": str(t.verdict.get("status")),
                                                   "layer": str(t.verdict.get("layer") or ""),
                                                   "culprit_role": str(culprit.get("role") or ""),
                                                   "culprit_pid": str(culprit.get("pid") or "")}, 1))
    return out
