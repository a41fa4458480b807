"""Ring view: one bar per shm ring of the reported deployments, readers as cells, the laggard in red.

Reads only the report's node sections (``Report.sections``, analysis/sections.py): each ring's role,
size, writer and readers, unread slots per reader, the readers a finding blames and the sampling words
were decided there; never collects nor decides, never reads the snapshot.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report
from vllmdiag.model.report import RingRow

ROLE_NAMES = {"rpc_broadcast_mq": "rpc", "worker_response_mq": "response", "group_broadcaster": "group bcast",
              "unknown": "?"}


def render(report: Report, console: Any) -> None:
    rows = []
    for node, section in report.sections.items():
        if section.rings_error is not None:
            raise section.rings_error  # the guarded view says it could not draw (untrusted data)
        rows += [(node, r) for r in section.rings]
    if not rows:
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title="shm rings (unread slots per reader; sampled)", show_lines=False)
    for col in ("ring", "role", "writer", "readers", "state"):
        table.add_column(col, overflow="fold", min_width=4 if col != "readers" else None)
    for _, ring in sorted(rows, key=lambda x: (x[0], x[1].kind, x[1].name)):
        table.add_row(Text(ring.name), Text(f"{ROLE_NAMES.get(ring.kind, ring.kind)} {ring.size}"), Text(ring.term_writer),
                      bar(ring), Text(ring.term_state))
    console.print(table)


def bar(ring: RingRow) -> Any:
    """`|TP0 0|TP1 0|TP2 10|TP3 0|`: green caught up, yellow behind, red reverse the blamed reader."""
    from rich.text import Text

    k = ring.max_chunks
    text = Text("|")
    for i, (who, value) in enumerate(zip(ring.term_readers, ring.term_unread, strict=True)):
        style = "bold white on red" if i in ring.laggards else ("green" if value == 0 else "yellow")
        text.append(f"{who} {value}{'/' + str(k) if value == k else ''}", style=style)
        text.append("|")
    return text
