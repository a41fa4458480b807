"""What each node's report shows (its rings, stacks, ZMQ endpoints, API servers, GPUs) and how each
snapshot was collected, computed once here and carried by the report (``Report.sections``,
``Report.collection``, outside the JSON contract); render only formats them and never reads the snapshot
(tests/unit/test_import_graph.py).

Built from what the report carries, never from analysis' internals, so a saved ``--json`` report read back
(``vllmdiag analyze saved.json``) gets the same sections as the run that wrote it: ring roles, writer and
readers from ``DeploymentReport.rings`` (``views/ring_roles.py`` decided them), the readers a finding
blames from the findings, the folded stack classes from ``gpu.stack_classes``, the sampled numbers, the
stacks, the endpoints, servers and GPUs from the report's snapshots.

A finding blames ring readers by being a critical queue finding whose evidence names the ``ring`` and
the reader indexes (``readers``): the ring section draws those readers as the ones the ring waits on.
"""

from __future__ import annotations

import re
from typing import Any

from vllmdiag.model import Finding, Report, Snapshot
from vllmdiag.model.report import (
    CollectionRow,
    DeploymentReport,
    EndpointRow,
    GpuRow,
    HttpRow,
    NodeSection,
    ProcessBrief,
    RingRow,
    RingView,
    StackRow,
    short_label,
)

# The words the report uses for analysis' ring roles (vllm-internals 1.12).
ROLE_WORDS = {"rpc_broadcast_mq": "rpc", "worker_response_mq": "response", "group_broadcaster": "group broadcast",
              "unknown": "?"}


def with_sections(report: Report) -> Report:
    """The report with every node's section attached (a node whose data is odd-typed keeps the error)."""
    report.sections = {snap.node: node_section(report, snap) for snap in report.snapshots}
    report.collection = [collection_row(snap) for snap in report.snapshots]
    return report


def collection_row(snap: Snapshot) -> CollectionRow:
    """How the snapshot was collected, and every probe that did not fully see (what the verdict could not use)."""
    problems = [(name, str(p.status), str(p.reason or "")) for name, p in sorted(snap.probes.items())
                if p.status not in ("ok", None)]
    return CollectionRow(snap.node, snap.collected_at, snap.vllmdiag_version, snap.duration_s,
                         snap.options.get("budget_s"), problems)


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
    pids = {p.pid for d in deps for p in d.processes}
    parts = {"endpoints": lambda: endpoint_rows(snap, pids), "http": lambda: http_rows(snap, pids),
             "gpus": lambda: gpu_rows(snap, deps)}
    for name, build in parts.items():
        try:
            setattr(section, name, build())
        except Exception as exc:  # noqa: BLE001 - likewise: that part's view says it could not draw
            section.errors[name] = exc
    nvml = snap.probes.get("nvml")
    section.nvml_probe = {"status": nvml.status, "reason": nvml.reason} if nvml is not None else None
    return section


def blamed_readers(findings: list[Finding]) -> dict[str, set[int]]:
    """Ring name -> the reader indexes critical queue findings blame (the one reader of this contract)."""
    out: dict[str, set[int]] = {}
    for f in findings:
        if f.layer == "queue" and f.severity == "critical" and f.ring is not None:
            out.setdefault(f.ring, set()).update(f.readers)
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
        row = RingRow(str(ring.get("name")), ROLE_WORDS.get(view.role, view.role), _label(dep.process(view.writer)),
                      (readers + [f"r{i}" for i in range(len(unread))])[:len(unread)], unread,
                      int(geo.get("max_chunks") or 0), blamed.get(str(ring.get("name")), set()),
                      list(ring.get("samples") or []), state)
        out.append(terminal_ring(row, dep, view, ring))
    return sorted(out, key=lambda r: (not r.laggards, r.role, r.name))


def terminal_ring(row: RingRow, dep: DeploymentReport, view: RingView, ring: dict[str, Any]) -> RingRow:
    """The ring as the terminal's table has always shown it (render/queue_view.py): readers by title
    with reader i = ``view.readers[i]``, the stable unread count per reader where sampled, else the last."""
    geo = ring.get("geometry") or {}
    stable = ring.get("stable_unread") or []
    last = ring.get("unread_slots") or []
    row.kind = view.role
    row.size = f"{int(geo.get('max_chunk_bytes', 0)) >> 20}M x {geo.get('max_chunks')}"
    row.term_writer = _title(dep, view.writer)
    row.term_readers = [_title(dep, view.readers[i] if i < len(view.readers) else None, f"r{i}") for i in range(len(last))]
    row.term_unread = [stable[i] if i < len(stable) and stable[i] is not None else last[i] for i in range(len(last))]
    parts = ["FULL" if ring.get("full") else "", "moving" if ring.get("moved") else "still",
             f"{ring.get('sample_count', 0)}x/{float(ring.get('window_s') or 0):.2f}s", str(ring.get("last_method") or "")]
    row.term_state = " ".join(p for p in parts if p)
    return row


def _title(dep: DeploymentReport, pid: int | None, fallback: str = "-") -> str:
    """Who writes or reads by process title (`TP3`, `EngineCore`), the pid when untitled."""
    p = dep.process(pid)
    if p is None:
        return fallback
    return p.title.split("::", 1)[-1].replace("Worker_", "") or str(p.pid)


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
            out.append(StackRow(c.get("ranks"), dict(c), main_stack(dumps.get(pid)) if pid else [], blamed, f.deployment))
        for o in f.evidence.get("others", []):
            out.append(StackRow(f"{o.get('title')} ({o.get('pid')})", dict(o), main_stack(dumps.get(int(o["pid"]))),
                                int(o["pid"]) in pids, f.deployment, other=True))
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


def endpoint_rows(snap: Snapshot, pids: set[int]) -> list[EndpointRow]:
    """Each ZMQ listener of the node's deployments with its ZMTP answer; problems first."""
    ep = snap.data("endpoints")
    zmtp = {z.get("listener") or z.get("endpoint"): z for z in ep.get("zmtp", [])}
    rows = [(e["endpoint"], e.get("binders") or [], e.get("accepted")) for e in ep.get("ipc", [])]
    rows += [(t["endpoint"], t.get("pids") or [], t.get("accepted")) for t in ep.get("tcp_listen", [])]
    out = []
    for endpoint, holders, accepted in rows:
        if set(holders) & pids:
            z = zmtp.get(endpoint, {})
            problem, note = endpoint_note(endpoint, z)
            out.append(EndpointRow(endpoint, holders, accepted, z.get("status") or "-", z.get("peer_socket_type") or "?",
                                   z.get("latency_ms"), problem, note))
    return sorted(out, key=lambda r: (not r.problem, min(r.holders or [0]), r.endpoint))


def endpoint_note(endpoint: str, z: dict[str, Any]) -> tuple[bool, str]:
    """(is it a problem, what the ZMTP status means), as the handshake analysis reads it: a TCP
    listener that accepts and stays silent may well not be ZMQ at all (TCPStore, NCCL bootstrap)."""
    status = z.get("status") or "-"
    if status == "ok":
        return False, "greeted as ZMQ " + str(z.get("peer_socket_type") or "")
    if endpoint.startswith("tcp://") and z.get("stage") == "signature" and status == "timeout":
        return False, "accepted but silent: not a ZMQ socket (a TCPStore or NCCL bootstrap listener); not a problem"
    notes = {"timeout": "accepted but sent no ZMTP greeting in time: the owner's ZMQ I/O thread does not serve it",
             "refused": "connection refused: nothing listens although the socket is listed",
             "no_listener": "no process listens on this path any more", "closed": "closed during the greeting",
             "not_zmtp": "answered, but not with ZMTP",
             "-": "not dialled, on purpose: the HTTP port, or a TCPStore/gloo/NCCL listener (not ZMQ)"}
    return status in ("timeout", "refused", "no_listener", "closed"), notes.get(status, str(z.get("reason") or status))


def http_rows(snap: Snapshot, pids: set[int]) -> list[HttpRow]:
    """The API servers of the node's deployments, as the http probe saw them."""
    return [HttpRow(str(s.get("address")), s) for s in snap.data("http").get("servers", []) if set(s.get("pids", [])) & pids]


def gpu_rows(snap: Snapshot, deps: list[DeploymentReport]) -> list[GpuRow]:
    """NVML rows, each with the rank(s) whose worker pid runs on it."""
    rank_of = {p.pid: p.rank for d in deps for p in d.processes if p.role == "worker"}
    return [GpuRow(g, [rank_of[int(p["pid"])] for p in g.get("processes") or []
                       if p.get("pid") is not None and int(p["pid"]) in rank_of])
            for g in snap.data("nvml").get("gpus", [])]
