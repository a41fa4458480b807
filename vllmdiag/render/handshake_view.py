"""Endpoint view: each ZMQ listener of the reported deployments, its holders, peers and ZMTP answer.

Reads only the report (its snapshots' ``endpoints`` data); never collects.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report
from vllmdiag.render.report_data import endpoint_note

STATUS_STYLE = {"ok": "green", "timeout": "bold red", "refused": "red", "no_listener": "red", "closed": "yellow",
                "rejected": "yellow", "not_zmtp": "dim", "greeted": "yellow", "error": "magenta"}
MAX_ROWS = 60


def render(report: Report, console: Any) -> None:
    rows = []
    for snap in report.snapshots:
        pids = {p for d in report.deployments if d.node == snap.node for p in d.pids}
        ep = snap.data("endpoints")
        zmtp = {z.get("listener") or z["endpoint"]: z for z in ep.get("zmtp", [])}
        listeners = [(e["endpoint"], e["binders"], e["accepted"]) for e in ep.get("ipc", [])]
        listeners += [(t["endpoint"], t["pids"], t["accepted"]) for t in ep.get("tcp_listen", [])]
        rows += [(endpoint, holders, accepted, zmtp.get(endpoint, {})) for endpoint, holders, accepted in listeners
                 if set(holders) & pids]
    if not rows:
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title="ZMQ endpoints (listeners; peers = accepted connections; ZMTP greeting)")
    for col in ("endpoint", "held by", "peers", "type", "zmtp", "ms", "meaning"):
        table.add_column(col, overflow="fold")
    for endpoint, holders, accepted, z in sorted(rows, key=lambda r: (min(r[1]), r[0]))[:MAX_ROWS]:
        status = z.get("status") or "-"
        problem, note = endpoint_note(str(endpoint), z)  # every red cell says why; a silent TCP listener is not red
        style = STATUS_STYLE.get(str(status), "") if problem or status == "ok" else "dim"
        # Socket-Type is whatever the peer sent in its greeting: text, never markup.
        table.add_row(Text(str(endpoint)), Text(",".join(map(str, holders))), Text(str(accepted)),
                      Text(str(z.get("peer_socket_type") or "?")),
                      Text(str(status), style=style), Text(str(z.get("latency_ms") or "")),
                      Text(note, style="" if problem else "dim"))
    if len(rows) > MAX_ROWS:
        table.add_row(f"... {len(rows) - MAX_ROWS} more", "", "", "", "", "", "")
    console.print(table)
