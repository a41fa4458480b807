"""Endpoint view: each ZMQ listener of the reported deployments, its holders, peers and ZMTP answer.

Reads only the report's node sections (``Report.sections``: the listeners and what their ZMTP answer
means, analysis/sections.py); never collects nor reads the snapshot.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report

STATUS_STYLE = {"ok": "green", "timeout": "bold red", "refused": "red", "no_listener": "red", "closed": "yellow",
                "rejected": "yellow", "not_zmtp": "dim", "greeted": "yellow", "error": "magenta"}
MAX_ROWS = 60


def render(report: Report, console: Any) -> None:
    rows = []
    for section in report.sections.values():
        if "endpoints" in section.errors:
            raise section.errors["endpoints"]
        rows += section.endpoints
    if not rows:
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title="ZMQ endpoints (listeners; peers = accepted connections; ZMTP greeting)")
    for col in ("endpoint", "held by", "peers", "type", "zmtp", "ms", "meaning"):
        table.add_column(col, overflow="fold")
    for r in sorted(rows, key=lambda r: (min(r.holders), r.endpoint))[:MAX_ROWS]:
        # every red cell says why (analysis' note); a silent TCP listener is not red
        style = STATUS_STYLE.get(str(r.status), "") if r.problem or r.status == "ok" else "dim"
        # Socket-Type is whatever the peer sent in its greeting: text, never markup.
        table.add_row(Text(str(r.endpoint)), Text(",".join(map(str, r.holders))), Text(str(r.accepted)),
                      Text(str(r.type)), Text(str(r.status), style=style), Text(str(r.ms or "")),
                      Text(r.note, style="" if r.problem else "dim"))
    if len(rows) > MAX_ROWS:
        table.add_row(f"... {len(rows) - MAX_ROWS} more", "", "", "", "", "", "")
    console.print(table)
