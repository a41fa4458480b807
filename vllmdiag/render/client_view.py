"""HTTP view: each API server address with /health, /metrics at both samples, and its client connections.

Reads only the report's node sections (``Report.sections``: the API servers of the node's deployments,
analysis/sections.py); never collects nor reads the snapshot.

Drawn in every format (render/views.py): ``render`` the terminal's -v table, ``html`` the body of this
layer's section of a node in the HTML report, ``markdown`` its lines in the Markdown report; the latter
two read the same sections through ``report_data`` (a ``NodeData``).
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report
from vllmdiag.render import report_data as rd
from vllmdiag.render.html_layers import h
from vllmdiag.render.md_report import md

MAX_CONNECTIONS = 20
HTML_MAX_CONNECTIONS = 50  # a file has room for more rows than a terminal


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


# ---- HTML: the body of this layer's section of a node (render/html_layers.py) ----
def html(node: rd.NodeData) -> str:
    out = ""
    for s in rd.http_servers(node):
        health = s.get("health") or {}
        out += f"<p><b>HTTP {h(s.get('address'))}</b>: /health {h(health.get('status') or health.get('error') or '-')}</p>"
        samples = s.get("metrics") or []
        if samples:
            out += "<table class='metrics'><tr><th>at s</th><th>running</th><th>waiting</th><th>generated tokens</th></tr>"
            out += "".join(f"<tr><td>{h(m.get('at_s'))}</td><td>{h(m.get('running'))}</td><td>{h(m.get('waiting'))}</td>"
                           f"<td>{h(m.get('generation_tokens'))}</td></tr>" for m in samples[:20]) + "</table>"
        conns = sorted(s.get("connections") or [], key=lambda c: -max([q or 0 for q in c.get("send_q") or [0]] or [0]))
        if conns:
            out += "<table class='connections'><tr><th>client</th><th>Send-Q (samples)</th><th>client Recv-Q</th></tr>"
            for c in conns[:HTML_MAX_CONNECTIONS]:
                sq = [q for q in c.get("send_q") or [] if q is not None]
                grow = len(sq) >= 2 and 0 < sq[0] <= sq[-1]
                out += (f"<tr><td class=mono>{h(c.get('remote'))}</td><td{' class=culprit' if grow else ''}>"
                        f"{h(' → '.join(map(str, sq)))}</td>"
                        f"<td>{h(' → '.join(str(q) for q in c.get('peer_recv_q') or [] if q is not None))}</td></tr>")
            out += "</table>"
    return out


# ---- Markdown: the lines of this layer's section of a node (render/md_report.py) ----
def markdown(node: rd.NodeData) -> list[str]:
    """One line per API server: /health and the /metrics samples (the Markdown report's client section)."""
    out = []
    for s in rd.http_servers(node):
        samples = "; ".join(f"at {m.get('at_s')} s running {m.get('running')} waiting {m.get('waiting')} "
                            f"generated {m.get('generation_tokens')}" for m in (s.get("metrics") or [])[:10])
        out.append(f"- HTTP {md(s.get('address'))}: /health {md((s.get('health') or {}).get('status'))}; {md(samples)}")
    return out + [""]
