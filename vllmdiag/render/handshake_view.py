"""Endpoint view: each ZMQ listener of the reported deployments, its holders, peers and ZMTP answer.

Reads only the report's node sections (``Report.sections``: the listeners and what their ZMTP answer
means, analysis/sections.py); never collects nor reads the snapshot.

Drawn in every format (render/views.py): ``render`` the terminal's -v table, ``html`` the body of this
layer's section of a node in the HTML report, ``markdown`` its lines in the Markdown report; the latter
two read the same sections through ``report_data`` (a ``NodeData``).
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report
from vllmdiag.render import report_data as rd
from vllmdiag.render.html_layers import h, tag
from vllmdiag.render.md_report import md, md_block

STATUS_STYLE = {"ok": "green", "timeout": "bold red", "refused": "red", "no_listener": "red", "closed": "yellow",
                "rejected": "yellow", "not_zmtp": "dim", "greeted": "yellow", "error": "magenta"}
MAX_ROWS = 60
MAX_ENDPOINTS = 200  # the HTML report's table


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


# ---- HTML: the body of this layer's section of a node (render/html_layers.py) ----
def html(node: rd.NodeData) -> str:
    rows = rd.endpoints(node)[:MAX_ENDPOINTS]
    if not rows:
        return ""
    bad = [r for r in rows if r["problem"]]
    good = [r for r in rows if not r["problem"]]
    head = "<tr><th>endpoint</th><th>held by</th><th>peers</th><th>type</th><th>ZMTP</th><th>ms</th><th>meaning</th></tr>"
    out = f"<p>{len(rows)} ZMQ listeners; {len(bad)} with a problem.</p>"
    if bad:
        out += f"<table class='endpoints problems'>{head}{''.join(_endpoint_row(node, r) for r in bad)}</table>"
    if good:
        out += (f"<details><summary>{len(good)} endpoints without a problem</summary>"
                f"<table class='endpoints'>{head}{''.join(_endpoint_row(node, r) for r in good)}</table></details>")
    return out


def _endpoint_row(node: rd.NodeData, r: dict[str, Any]) -> str:
    procs = node.procs()
    holders = ", ".join(f"{rd.short_name(procs.get(p))} ({p})" for p in r["holders"][:12])
    kind = "critical" if r["problem"] else ("ok" if r["status"] == "ok" else "info")
    return (f"<tr><td class=mono>{h(r['endpoint'])}</td><td>{h(holders)}</td><td>{h(r['accepted'])}</td>"
            f"<td>{h(r['type'])}</td><td>{tag(r['status'], kind)}</td><td>{h(r['ms'] if r['ms'] is not None else '')}</td>"
            f"<td>{h(r['note'])}</td></tr>")


# ---- Markdown: the lines of this layer's section of a node (render/md_report.py) ----
def markdown(node: rd.NodeData) -> list[str]:
    """The listeners counted, the ones with a problem listed (the Markdown report's handshake section)."""
    eps = rd.endpoints(node)
    bad = [e for e in eps if e["problem"]]
    return [f"{len(eps)} ZMQ listeners, {len(bad)} with a problem.",
            *[f"- {md_block(e['endpoint'])}: {md(e['status'])} (held by {md(e['holders'])})" for e in bad[:50]], ""]
