"""Ring view: one bar per shm ring of the reported deployments, readers as cells, the laggard in red.

Reads only the report: who writes and reads each ring (``DeploymentReport.rings``, decided by analysis),
its snapshots' ``rings`` data for the sampled numbers, and the readers a finding blames (the node's
section, ``Report.sections``, analysis/sections.py); never collects nor decides.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import DeploymentReport, Report, RingView

ROLE_NAMES = {"rpc_broadcast_mq": "rpc", "worker_response_mq": "response", "group_broadcaster": "group bcast",
              "unknown": "?"}


def render(report: Report, console: Any) -> None:
    rows = []
    for snap in report.snapshots:
        sampled = {str(r.get("name")): r for r in snap.data("rings").get("rings", []) if isinstance(r, dict)}
        rows += [(snap.node, d, v, sampled[v.name]) for d in report.deployments if d.node == snap.node
                 for v in d.rings if v.name in sampled]
    if not rows:
        return
    from rich.table import Table
    from rich.text import Text

    blamed = _blamed(report)
    table = Table(title="shm rings (unread slots per reader; sampled)", show_lines=False)
    for col in ("ring", "role", "writer", "readers", "state"):
        table.add_column(col, overflow="fold", min_width=4 if col != "readers" else None)
    for node, dep, view, ring in sorted(rows, key=lambda x: (x[0], x[2].role, x[2].name)):
        geo = ring.get("geometry") or {}
        role = f"{ROLE_NAMES.get(view.role, view.role)} {int(geo.get('max_chunk_bytes', 0)) >> 20}M x {geo.get('max_chunks')}"
        table.add_row(Text(str(view.name)), Text(role), Text(_short(dep, view.writer)),
                      bar(dep, view, ring, blamed.get((node, view.name), set())), Text(_state(ring)))
    console.print(table)


def bar(dep: DeploymentReport, view: RingView, ring: dict[str, Any], laggards: set[int]) -> Any:
    """`|TP0 0|TP1 0|TP2 10|TP3 0|`: green caught up, yellow behind, red reverse the blamed reader."""
    from rich.text import Text

    stable = ring.get("stable_unread") or []
    last = ring.get("unread_slots") or []
    k = int((ring.get("geometry") or {}).get("max_chunks") or 0)
    text = Text("|")
    for i in range(len(last)):
        value = stable[i] if i < len(stable) and stable[i] is not None else last[i]
        who = _short(dep, view.readers[i] if i < len(view.readers) else None, fallback=f"r{i}")
        style = "bold white on red" if i in laggards else ("green" if value == 0 else "yellow")
        text.append(f"{who} {value}{'/' + str(k) if value == k else ''}", style=style)
        text.append("|")
    return text


def _state(ring: dict[str, Any]) -> str:
    parts = ["FULL" if ring.get("full") else "", "moving" if ring.get("moved") else "still",
             f"{ring.get('sample_count', 0)}x/{float(ring.get('window_s') or 0):.2f}s", str(ring.get("last_method") or "")]
    return " ".join(p for p in parts if p)


def _short(dep: DeploymentReport, pid: int | None, fallback: str = "-") -> str:
    """Who writes or reads, as analysis named them (``DeploymentReport.rings`` holds pids)."""
    p = dep.process(pid)
    if p is None:
        return fallback
    return p.title.split("::", 1)[-1].replace("Worker_", "") or str(p.pid)


def _blamed(report: Report) -> dict[tuple[str, str], set[int]]:
    """(node, ring) -> the reader indexes a finding blames, as analysis put them in the node's section."""
    return {(node, r.name): r.laggards for node, section in report.sections.items() for r in section.rings}
