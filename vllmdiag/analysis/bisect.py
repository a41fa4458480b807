"""The bisection engine: walk process -> handshake -> queue -> gpu -> client per deployment and
report the first layer where the flow stops, with culprits, evidence and next steps (pure).
"""

from __future__ import annotations

from dataclasses import dataclass

from vllmdiag.analysis.contract import analyzers
from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.report_model import deployment_reports
from vllmdiag.analysis.views.deployments import Deployment
from vllmdiag.model import LAYERS, DeploymentReport, Finding, Report, Snapshot, SnapshotError, Verdict

STATUS_RANK = {"healthy": 0, "no-deployment": 1, "starting": 2, "inconclusive": 3, "degraded": 4, "blocked": 5}
# Probes without which a "healthy" answer would be a guess.
ESSENTIAL_PROBES = ("processes", "stacks")


@dataclass
class Judged:
    """A deployment (analysis' full view of it) and its verdict, before it becomes a model
    ``DeploymentReport``: fleet analysis re-decides these after joining nodes."""

    deployment: Deployment
    verdict: Verdict


def snapshot_facts(snapshot: Snapshot) -> Facts:
    """Every fact derived once, shared by every analyzer (analysis/facts.py); bad process data is a SnapshotError."""
    try:
        return Facts.of(snapshot)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise SnapshotError(f"{snapshot.node}: malformed process data ({type(exc).__name__}: {exc})") from None


def analyze_snapshot(snapshot: Snapshot, pids: set[int] | None = None, facts: Facts | None = None
                     ) -> tuple[list[Judged], list[Finding]]:
    """``facts``: the snapshot's, when the caller reads them too (fleet analysis' cross-node checks)."""
    facts = snapshot_facts(snapshot) if facts is None else facts
    if pids:
        facts.deployments = [d for d in facts.deployments if d.pids & pids or d.root_pid in pids
                             or _started_by(snapshot, d, pids)]
    deployments = facts.deployments
    findings: list[Finding] = []
    for module in analyzers():  # found by folder: analysis/layers/<layer>/ (analysis/contract.py)
        layer = module.LAYER
        try:
            findings.extend(module.analyze(facts))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            # Probe data comes from untrusted files too: wrong shapes are bad input, not a crash.
            raise SnapshotError(f"{snapshot.node}: cannot analyze the {layer} layer: malformed probe data "
                                f"({type(exc).__name__}: {exc})") from None
    from vllmdiag.analysis.views.coverage import cap_blind

    cap_blind(snapshot, findings)
    ids = {d.id for d in deployments}
    if pids:  # node-level findings stay; other deployments' findings go
        findings = [f for f in findings if f.deployment is None or f.deployment in ids]
    judged = [Judged(d, decide(snapshot, [f for f in findings if f.deployment == d.id], d.pids)) for d in deployments]
    return judged, findings


def _started_by(snapshot: Snapshot, dep: Deployment, pids: set[int]) -> bool:
    """The deployment descends from a selected pid: `--pid` of a script that runs two engines (two
    ``LLM()``) selects both, although each engine is its own deployment and the script is in neither."""
    parent = {p.get("pid"): p.get("ppid") for p in snapshot.data("processes").get("processes") or []}
    cur, seen = parent.get(dep.root_pid), set()
    while isinstance(cur, int) and cur > 1 and cur not in seen:
        if cur in pids:
            return True
        seen.add(cur)
        cur = parent.get(cur)
    return False


def analyze(snapshots: list[Snapshot], pids: set[int] | None = None) -> Report:
    judged: list[Judged] = []
    reports: list[DeploymentReport] = []
    findings: list[Finding] = []
    for snap in snapshots:
        j, f = analyze_snapshot(snap, pids)
        judged += j
        reports += to_model(snap, j)
        findings += f
    from vllmdiag.analysis.sections import with_sections

    return with_sections(Report(verdict=overall(snapshots, judged, findings), deployments=reports, findings=findings,
                                snapshots=snapshots))


def to_model(snapshot: Snapshot, judged: list[Judged]) -> list[DeploymentReport]:
    try:
        return deployment_reports(snapshot, [(j.deployment, j.verdict) for j in judged])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise SnapshotError(f"{snapshot.node}: malformed process or ring data ({type(exc).__name__}: {exc})") from None


def decide(snapshot: Snapshot, findings: list[Finding], pids: set[int] | None = None) -> Verdict:
    from vllmdiag.analysis.verdict_writer import write_verdict
    from vllmdiag.analysis.views.coverage import gaps

    blocking = [f for f in findings if f.blocking]
    if blocking:
        from vllmdiag.analysis.verdict_writer import corroborate

        layer = next(layer for layer in LAYERS if any(f.layer == layer for f in blocking))
        verdict = write_verdict("blocked", layer, [f for f in blocking if f.layer == layer], findings)
        return corroborate(verdict, [f for f in blocking if f.layer != layer])
    warnings = [f for f in findings if f.severity == "warning"]
    if warnings:
        verdict = write_verdict("degraded", warnings[0].layer, warnings, findings)
        if warnings[0].out_of_view:  # its culprit runs beyond this node's view (P/D producer)
            verdict.confidence = "medium"
        return verdict
    starting = next((f for f in findings if f.code == "handshake.starting"), None)
    # A share of a deployment whose engine runs on another node (`--headless`) never reports ready itself:
    # alone it is "not all of it is on this node" (below); the sweep judges it with its engine's node.
    elsewhere = any(f.out_of_view for f in findings)
    if starting is not None and not elsewhere and (starting.moving or not _blind_spots(snapshot)):
        return _starting(starting)
    progress = next((f for f in findings if f.code == "gpu.progress"), None)
    # Work seen moving is healthy even when another probe (stacks) timed out: say which one was missing.
    moved = progress is not None and progress.moved
    missing = _blind_spots(snapshot, ("stacks",))
    blind = _blind_spots(snapshot, ("processes",)) + gaps(snapshot, pids or set()) + ([] if moved else missing)
    beyond = [f for f in findings if f.out_of_view]  # part of it runs on another node
    if beyond and not blind:
        from vllmdiag.analysis.verdict_writer import write_verdict

        verdict = write_verdict("inconclusive", beyond[0].layer, beyond, findings)
        verdict.summary, verdict.confidence = "Not all of it is on this node: " + beyond[0].message, "low"
        return verdict
    unseen = list(progress.blind) if progress is not None else []
    if blind:
        blind += [] if moved else [u for u in unseen if not u.startswith("stacks")]  # e.g. /metrics answered once
        return Verdict(status="inconclusive", summary="No blocking problem seen, but the tool could not see enough: "
                       + _cause_first(blind), evidence=blind, confidence="low", next_steps=[_fix(blind)])
    if not moved and unseen:  # a probe that saw nothing never supports "idle", "drained", "no step under way"
        why = f"{snapshot.node}: nothing seen moving and idle cannot be told from stuck: " + "; ".join(unseen)
        return Verdict(status="inconclusive", summary="Inconclusive: " + why + ".", evidence=[why], confidence="low",
                       next_steps=[_fix(unseen)])
    # Say what was seen: "moving" only when something moved, "idle" when nothing was in flight.
    summary = "Healthy: processes alive, ranks agree. " + (
        progress.message if progress is not None else "Progress not judged: no stacks, rings or metrics of it were sampled.")
    not_seen = missing + [u for u in unseen if not u.startswith("stacks")] if moved else []
    if not_seen:
        summary += " Not seen (not needed: work was seen moving): " + "; ".join(not_seen) + "."
    # The processes were seen; progress only as far as the caller's --probe let it be looked at.
    unasked = [] if moved or progress is None else list(progress.unasked)
    return Verdict(status="healthy", summary=summary, evidence=not_seen, confidence="medium" if unasked else "high")


def _starting(f: Finding) -> Verdict:
    """Not ready yet: never healthy nor idle (DESIGN.md). Seen moving, or not seen long enough to tell
    (then said so, with the command that looks longer)."""
    moving = f.moving
    steps = [] if moving else ["vllmdiag triage --confirm 30   # look at the start-up longer: moving, or held (and by whom)"]
    return Verdict(status="starting", summary=f.message, evidence=[f.message], confidence="high" if moving else "low",
                   next_steps=steps)


TIMEOUT_FIX = ("The node is short of CPU (or a probe was slow): re-run with a larger --budget (e.g. --budget 30), "
               "as root (vllmdiag then takes SCHED_FIFO for its short life) or under `chrt -f 10`, or from outside a "
               "CPU-throttled pod (docs/priority.md, Kubernetes).")


def _cause_first(blind: list[str]) -> str:
    """When every gap is a denied read, the one cause leads (a tired reader stops at the first clause)."""
    denied = [b for b in blind if ("ermission" in b or "ptrace" in b or "denied" in b)]
    if blind and len(denied) == len(blind):
        return "not root, or without CAP_SYS_PTRACE, so reads were denied: " + "; ".join(blind)
    return "; ".join(blind)


def _fix(blind: list[str]) -> str:
    """The fix for what could not be seen: time (a loaded node) or permission."""
    from vllmdiag.analysis.views.coverage import FIX

    timed = any(" timeout" in b or "budget" in b for b in blind)
    denied = any(("ermission" in b or "ptrace" in b or "denied" in b) for b in blind)
    return FIX if denied and not timed else f"{FIX} {TIMEOUT_FIX}" if denied else TIMEOUT_FIX


def overall(snapshots: list[Snapshot], reports: list[Judged], findings: list[Finding]) -> Verdict:
    if not reports:
        blind = [b for s in snapshots for b in _blind_spots(s, essential=("processes",))]
        if blind:
            return Verdict(status="inconclusive", summary="Could not list processes: " + "; ".join(blind),
                           evidence=blind, confidence="low")
        node_warnings = [f for f in findings if f.deployment is None and f.severity in ("warning", "critical")]
        if node_warnings:
            return _gone(snapshots, node_warnings, findings)
        from vllmdiag.analysis.views.coverage import FIX, hidden_processes
        from vllmdiag.analysis.views.deployment_shapes import unchecked_pythons

        unseen = [u for s in snapshots for u in (hidden_processes(s), unchecked_pythons(s)) if u]  # a vLLM may hide there
        return Verdict(status="no-deployment", summary="No vLLM deployment found on "
                       + ", ".join(sorted({s.node for s in snapshots})) + "." + "".join(f" {u}" for u in unseen),
                       evidence=unseen, next_steps=[FIX] if unseen else [])
    worst = max(reports, key=lambda r: STATUS_RANK.get(r.verdict.status, 0))
    verdict = worst.verdict
    if verdict.status == "healthy":
        node_warnings = [f for f in findings if f.deployment is None and f.severity in ("warning", "critical")]
        if node_warnings:
            from vllmdiag.analysis.verdict_writer import write_verdict

            return write_verdict("degraded", node_warnings[0].layer, node_warnings, findings)
    return verdict


def _gone(snapshots: list[Snapshot], node_warnings: list[Finding], findings: list[Finding]) -> Verdict:
    """No vLLM process runs: said first (exit 3), then what a killed run left (the usual way psm_* leak: a
    supervisor's `kill -9` of the process group, a container kill or a cgroup OOM takes the resource tracker
    down too) with its read-only next steps. "degraded/queue: 6 segments leaked" read as if a deployment ran."""
    from vllmdiag.analysis.verdict_writer import write_verdict

    left = write_verdict("degraded", node_warnings[0].layer, node_warnings, findings)
    stale = [f.message for f in findings if f.deployment is None and f.code == "handshake.stale_socket_files"]
    nodes = ", ".join(sorted({s.node for s in snapshots}))
    summary = f"No vLLM is running on {nodes}. A killed run left: " + "; ".join(f.message for f in node_warnings[:3])
    return Verdict(status="no-deployment", layer=None, culprits=left.culprits, summary=summary,
                   evidence=left.evidence + stale[:1], next_steps=left.next_steps, confidence=left.confidence)


def _blind_spots(snapshot: Snapshot, essential: tuple[str, ...] = ESSENTIAL_PROBES) -> list[str]:
    out = []
    for name in essential:
        res = snapshot.probes.get(name)
        if res is not None and res.status in ("error", "timeout", "skipped"):
            out.append(f"{snapshot.node}: probe {name} {res.status}" + (f" ({res.reason})" if res.reason else ""))
    return out
