"""Ring view: one bar per shm ring of the reported deployments, readers as cells, the laggard in red.

Reads only the report (its snapshots' `rings` data and the queue findings); never collects.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.deployments import display_title
from vllmdiag.analysis.engine import Report
from vllmdiag.analysis.queue import RingRole, ring_roles

ROLE_NAMES = {"rpc_broadcast_mq": "rpc", "worker_response_mq": "response", "group_broadcaster": "group bcast",
              "unknown": "?"}


def render(report: Report, console: Any) -> None:
    rows = []
    for snap in report.snapshots:
        deps = [d.deployment for d in report.deployments if d.deployment.node == snap.node]
        rows += [(snap.node, r) for r in ring_roles(snap, deps) if r.deployment is not None]
    if not rows:
        return
    from rich.table import Table
    from rich.text import Text

    blamed = _blamed(report)
    table = Table(title="shm rings (unread slots per reader; sampled)", show_lines=False)
    for col in ("ring", "role", "writer", "readers", "state"):
        table.add_column(col, overflow="fold", min_width=4 if col != "readers" else None)
    for node, r in sorted(rows, key=lambda x: (x[0], x[1].role, x[1].name)):
        geo = r.ring.get("geometry") or {}
        role = f"{ROLE_NAMES.get(r.role, r.role)} {int(geo.get('max_chunk_bytes', 0)) >> 20}M x {geo.get('max_chunks')}"
        table.add_row(Text(str(r.name)), Text(role), Text(_short(r.writer)), bar(r, blamed.get((node, r.name), set())),
                      Text(_state(r)))
    console.print(table)


def bar(r: RingRole, laggards: set[int]) -> Any:
    """`|TP0 0|TP1 0|TP2 10|TP3 0|`: green caught up, yellow behind, red reverse the blamed reader."""
    from rich.text import Text

    stable = r.ring.get("stable_unread") or []
    last = r.ring.get("unread_slots") or []
    k = int((r.ring.get("geometry") or {}).get("max_chunks") or 0)
    text = Text("|")
    for i in range(len(last)):
        value = stable[i] if i < len(stable) and stable[i] is not None else last[i]
        who = _short(r.readers[i] if i < len(r.readers) else None, fallback=f"r{i}")
        style = "bold white on red" if i in laggards else ("green" if value == 0 else "yellow")
        text.append(f"{who} {value}{'/' + str(k) if value == k else ''}", style=style)
        text.append("|")
    return text


def _state(r: RingRole) -> str:
    ring = r.ring
    parts = ["FULL" if ring.get("full") else "", "moving" if ring.get("moved") else "still",
             f"{ring.get('sample_count', 0)}x/{float(ring.get('window_s') or 0):.2f}s", str(ring.get("last_method") or "")]
    return " ".join(p for p in parts if p)


def _short(p: dict[str, Any] | None, fallback: str = "-") -> str:
    if not p:
        return fallback
    title = display_title(p)
    return title.split("::", 1)[-1].replace("Worker_", "") or str(p.get("pid"))


def _blamed(report: Report) -> dict[tuple[str, str], set[int]]:
    out: dict[tuple[str, str], set[int]] = {}
    for f in report.findings:
        if f.layer == "queue" and f.severity == "critical" and "ring" in f.evidence:
            out.setdefault((f.node, str(f.evidence["ring"])), set()).update(int(i) for i in f.evidence.get("readers") or [])
    return out
