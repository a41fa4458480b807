"""HTTP view: each API server address with /health, /metrics at both samples, and its client connections.

Reads only the report's node sections (``Report.sections``: the API servers of the node's deployments,
analysis/sections.py); never collects nor reads the snapshot.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report

MAX_CONNECTIONS = 20


def render(report: Report, console: Any) -> None:
    servers = []
    for section in report.sections.values():
        if "http" in section.errors:
            raise section.errors["http"]
        servers += [row.server for row in section.http]
    if not servers:
        return
    from rich.table import Table
    from rich.text import Text

    for s in servers:
        health = s.get("health") or {}
        samples = [m for m in s.get("metrics", []) if m.get("status") == 200]
        metrics = "  ".join(f"run {m.get('running')} wait {m.get('waiting')} gen {m.get('generation_tokens')}"
                            for m in samples) or "no /metrics"
        title = f"HTTP {s['address']}: /health {health.get('status') or health.get('error') or '-'}; {metrics}"
        if s.get("not_asked"):  # a stopped API server (probes/http.py): why there is no /health or /metrics
            title = f"HTTP {s['address']}: not asked: {s['not_asked']}"
        table = Table(title=Text(title))
        for col in ("client", "Send-Q (2 samples)", "client Recv-Q", "client pid"):
            table.add_column(col, overflow="fold")
        conns = sorted(s.get("connections", []), key=lambda c: -max(q or 0 for q in c.get("send_q", [0])))
        for c in conns[:MAX_CONNECTIONS]:
            sq = [q for q in c.get("send_q", []) if q is not None]
            stuck = len(sq) == 2 and 0 < sq[0] <= sq[1]
            peer = c.get("peer") or {}
            table.add_row(Text(str(c.get("remote"))), Text(" -> ".join(map(str, sq)), style="bold red" if stuck else ""),
                          Text(" -> ".join(str(q) for q in c.get("peer_recv_q", []) if q is not None)),
                          Text(f"{peer.get('pid')} {peer.get('comm', '')}" if peer.get("pid") else ""))
        if len(conns) > MAX_CONNECTIONS:
            table.add_row(f"... {len(conns) - MAX_CONNECTIONS} more", "", "", "")
        console.print(table)
