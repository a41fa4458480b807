"""Queue layer, EngineCore side: is the busy loop stuck outside its waits? (pure; needs stacks)

An EngineCore whose MainThread sits in ``run_busy_loop`` outside ``_process_input_queue`` and
outside ``get_response`` is scheduling or stuck; with every worker idle in ``dequeue`` nothing
downstream is holding it. A second sample by the stacks probe (``resample``) separates a loop
that is stuck from one caught scheduling; pending requests (http probe, when present) say that
someone is waiting for it (vllm-internals 5.4). One look with work seen moving (tokens, ring flags)
is a loop caught in passing, not stuck: no finding.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment, role_of
from vllmdiag.analysis.views.second_look_classes import held
from vllmdiag.model import Finding, Snapshot
from vllmdiag.vocab.stack_classes import ENGINE_BUSY, IDLE

LAYER = "queue"
CODES = ("queue.engine_loop_stuck",)


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    classes = facts.classes
    if not classes:
        return []
    again = facts.again
    out = []
    for dep in deployments:
        workers = [classes.get(w["pid"]) for w in dep.workers]
        if not workers or not all(c is not None and c.name == IDLE for c in workers):
            continue
        pending = pending_requests(snapshot, dep)
        moved: bool | None = None  # whether the deployment (every rank group) was seen moving; asked only when it matters
        for eng in dep.engines:
            c = classes.get(eng["pid"])
            if c is None or c.name != ENGINE_BUSY:
                continue
            holds = held(eng["pid"], c, again)
            if holds is False or pending == 0:
                continue  # caught scheduling, or nothing waits for it
            if holds is None and moved is None:
                moved = facts.progress(dep).moved
            if holds is None and moved:
                # One look, and work was seen moving: a loop caught pickling a step for its workers
                # (enqueue, shm_broadcast.py) while they wait in dequeue for it. CI, 2026-12-02: the loaded
                # real TP=1 server read degraded so, its resample crowded out (issue 24: moving is healthy).
                continue
            severity = "critical" if holds else "warning"
            msg = (f"EngineCore (pid {eng['pid']}) is stuck in its busy loop at {c.where} while all "
                   f"{len(workers)} worker(s) idle" + (f" and {pending} request(s) wait" if pending else "") + "."
                   + ("" if holds else " (one sample)"))
            out.append(finding("queue.engine_loop_stuck", LAYER, severity, snapshot, dep, msg, [eng["pid"]],
                               {"where": c.where, "key_frames": c.key_frames, "thread": c.thread,
                                "pending_requests": pending, "workers_idle": len(workers), "confirmed_by_resample": holds},
                               [culprit(snapshot, eng, f"busy loop stuck in {c.where}; workers idle")]))
    return out


def pending_requests(snapshot: Snapshot, dep: Deployment) -> int | None:
    """running + waiting from the deployment's latest /metrics sample; None when not known."""
    best: int | None = None
    for server in snapshot.data("http").get("servers", []) or []:
        if not isinstance(server, dict) or not set(server.get("pids") or []) & dep.pids:
            continue
        samples = [m for m in server.get("metrics") or [] if isinstance(m, dict) and m.get("status") == 200]
        if samples:
            last: dict[str, Any] = samples[-1]
            total = int((last.get("running") or 0) + (last.get("waiting") or 0))
            best = total if best is None else best + total
    return best


def second_look_pids(facts: Facts) -> list[int]:
    """The analyzer contract's second-look hook (analysis/contract.py): EngineCores busy while all their
    workers idle -- a hang if it holds, normal in passing."""
    classes, pids = facts.classes, []
    for dep in facts.deployments:
        procs = dep.processes
        workers = [classes.get(p["pid"]) for p in procs if role_of(p) == "worker"]
        if workers and all(c is not None and c.name == IDLE for c in workers):
            pids += [p["pid"] for p in procs if (c := classes.get(p["pid"])) is not None and c.name == ENGINE_BUSY]
    return sorted(set(pids))
