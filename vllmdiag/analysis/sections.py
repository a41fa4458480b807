"""Each node's rings and stacks as the report shows them, computed once here and carried by the report
(``Report.sections``, outside the JSON contract); render only formats them (pure).

Built from what the report carries, never from analysis' internals, so a saved ``--json`` report read back
(``vllmdiag analyze saved.json``) gets the same sections as the run that wrote it: ring roles, writer and
readers from ``DeploymentReport.rings`` (``views/ring_roles.py`` decided them), the readers a finding
blames from the findings, the folded stack classes from ``gpu.stack_classes``, the sampled numbers and
the stacks from the report's snapshots.

A finding blames ring readers by being a critical queue finding whose evidence names the ``ring`` and
the reader indexes (``readers``): the ring section draws those readers as the ones the ring waits on.
"""

from __future__ import annotations

import re
from typing import Any

from vllmdiag.model import Finding, Report, Snapshot
from vllmdiag.model.report import DeploymentReport, NodeSection, ProcessBrief, RingRow, StackRow, short_label

# The words the report uses for analysis' ring roles (vllm-internals 1.12).
ROLE_WORDS = {"rpc_broadcast_mq": "rpc", "worker_response_mq": "response", "group_broadcaster": "group broadcast",
              "unknown": "?"}


def with_sections(report: Report) -> Report:
    """The report with every node's section attached (a node whose data is odd-typed keeps the error)."""
    report.sections = {snap.node: node_section(report, snap) for snap in report.snapshots}
    return report


def node_section(report: Report, snap: Snapshot) -> NodeSection:
    deps = [d for d in report.deployments if d.node == snap.node]
    findings = [f for f in report.findings if f.node == snap.node]
    section = NodeSection(snap.node)
    try:
        section.rings = ring_rows(snap, deps, findings)
    except Exception as exc:  # noqa: BLE001 - untrusted data: the ring view says it could not draw, as before
        section.rings_error = exc
    try:
        section.stacks = stack_rows(snap, deps, findings, _culprits(report, snap.node))
    except Exception as exc:  # noqa: BLE001 - likewise for the stack view
        section.stacks_error = exc
    return section


def blamed_readers(findings: list[Finding]) -> dict[str, set[int]]:
    """Ring name -> the reader indexes critical queue findings blame (the one reader of this contract)."""
    out: dict[str, set[int]] = {}
    for f in findings:
        if f.layer == "queue" and f.severity == "critical" and "ring" in f.evidence:
            out.setdefault(str(f.evidence["ring"]), set()).update(int(i) for i in f.evidence.get("readers") or [])
    return out


def ring_rows(snap: Snapshot, deps: list[DeploymentReport], findings: list[Finding]) -> list[RingRow]:
    """Every sampled ring one of the node's deployments maps, laggards first."""
    views = {v.name: (d, v) for d in deps for v in d.rings}
    procs = {p.pid: p for d in deps for p in d.processes}
    blamed = blamed_readers(findings)
    out = []
    for ring in snap.data("rings").get("rings", []):
        hit = views.get(str(ring.get("name")))
        if hit is None:
            continue
        dep, view = hit
        unread = [int(u or 0) for u in (ring.get("stable_unread") or ring.get("unread_slots") or [])]
        readers = shown_readers(view.role, [procs[p] for p in ring.get("mapped_by") or [] if p in procs])
        geo = ring.get("geometry") or {}
        state = " ".join(w for w in ("FULL" if ring.get("full") else "", "moving" if ring.get("moved") else "still",
                                     f"{ring.get('sample_count', 0)} samples / {float(ring.get('window_s') or 0):.2f} s") if w)
        out.append(RingRow(str(ring.get("name")), ROLE_WORDS.get(view.role, view.role), _label(dep.process(view.writer)),
                           (readers + [f"r{i}" for i in range(len(unread))])[:len(unread)], unread,
                           int(geo.get("max_chunks") or 0), blamed.get(str(ring.get("name")), set()),
                           list(ring.get("samples") or []), state))
    return sorted(out, key=lambda r: (not r.laggards, r.role, r.name))


def shown_readers(role: str, mappers: list[ProcessBrief]) -> list[str]:
    """The reader names the report has always shown: the live processes that map the ring, workers in rank
    order (an rpc ring's readers; a group's after its writer), the EngineCore of a response ring. Not
    ``RingView.readers`` (reader i is local rank i there, a dead rank's slot kept): the two differ when a
    rank is gone, and the report's words stay as they were (issue 36: recorded fixtures byte-identical)."""
    engines = [p for p in mappers if p.role == "engine_core"]
    workers = sorted((p for p in mappers if p.role == "worker"), key=lambda p: (p.rank is None, p.rank or 0, p.pid))
    if role == "worker_response_mq":
        return [_label(engines[0])] if engines else []
    if role == "rpc_broadcast_mq":
        return [_label(w) for w in workers]
    return [_label(w) for w in workers[1:]] if role == "group_broadcaster" else []


def _label(p: ProcessBrief | None) -> str:
    return short_label(p.title, p.role) if p is not None else "?"


def _culprits(report: Report, node: str) -> tuple[set[int], set[int]]:
    """(pids, worker ranks) the report's verdicts blame on this node."""
    culprits = list(report.verdict.culprits) + [c for d in report.deployments for c in d.verdict.culprits]
    pids = {c.pid for c in culprits if c.node == node and c.pid is not None}
    ranks = {c.rank for c in culprits if c.node == node and c.rank is not None and c.role == "worker"}
    return pids, ranks


def stack_rows(snap: Snapshot, deps: list[DeploymentReport], findings: list[Finding],
               culprits: tuple[set[int], set[int]]) -> list[StackRow]:
    """The analysis' folded classes (``gpu.stack_classes``), each with one member's full stack attached."""
    pids, ranks = culprits
    dumps = {int(x["pid"]): x for x in snap.data("stacks").get("dumps", []) if x.get("pid") is not None}
    by_rank = {p.rank: p.pid for d in deps for p in d.processes if p.role == "worker"}
    out = []
    for f in findings:
        if f.code != "gpu.stack_classes":
            continue
        for c in f.evidence.get("stack_classes", []):
            members = expand_ranks(str(c.get("ranks", "")))
            pid = next((by_rank[r] for r in members if r in by_rank), None)
            blamed = bool(set(members) & ranks) or any(by_rank.get(r) in pids for r in members)
            out.append(StackRow(c.get("ranks"), dict(c), main_stack(dumps.get(pid)) if pid else [], blamed))
        for o in f.evidence.get("others", []):
            out.append(StackRow(f"{o.get('title')} ({o.get('pid')})", dict(o), main_stack(dumps.get(int(o["pid"]))),
                                int(o["pid"]) in pids))
    return out


def expand_ranks(text: str) -> list[int]:
    """`TP[0-4,6-7]` -> [0, 1, 2, 3, 4, 6, 7]; `TP5` -> [5]."""
    out: list[int] = []
    for a, b in re.findall(r"(\d+)(?:-(\d+))?", text):
        out += list(range(int(a), int(b or a) + 1))[:4096]
    return out


def main_stack(dump: dict[str, Any] | None) -> list[str]:
    """The main thread's frames, innermost first, as `function (file:line)`."""
    if not dump:
        return []
    threads = dump.get("threads") or []
    main = next((t for t in threads if t.get("name") == "MainThread"), threads[0] if threads else None)
    return [f"{f[0]} ({f[1]}:{f[2]})" for f in (main or {}).get("frames", []) if isinstance(f, list) and len(f) >= 3]
