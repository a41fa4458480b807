"""The fleet section of the --report files (called from vllmdiag/render/files.py); empty for one node."""

from __future__ import annotations

import html

from vllmdiag.analysis.engine import Report

CELL_COLOR = {".": "#1a7f37", "X": "#cf222e", "b": "#f4a6a6", "d": "#d4a72c", "?": "#8250df"}
STATE_COLOR = {"healthy": "#1a7f37", "blocked": "#cf222e", "degraded": "#9a6700"}


def fleet_html(report: Report) -> str:
    """Folded classes, then the nodes x GPUs grid (folded rows), then the nodes that did not answer."""
    if "nodes" not in report.extra:
        return ""
    from vllmdiag.render.fleet_view import grid_rows

    parts = ["<h2>Fleet</h2><style>.g{display:inline-block;width:12px;height:12px;margin:1px;border-radius:2px}</style>"]
    classes = report.extra.get("fleet", {}).get("classes", [])
    parts.append("<table><tr><th>nodes</th><th>#</th><th>status</th><th>summary</th></tr>" + "".join(
        f"<tr><td>{_h(c['nodes'])}</td><td>{_h(c['count'])}</td>"
        f"<td style='color:{STATE_COLOR.get(c['status'], '#8250df')}'>{_h(c['status'])}</td><td>{_h(c['summary'])}</td></tr>"
        for c in classes) + "</table>")
    rows = []
    for r in grid_rows(report):
        cells = "".join(f"<span class='g' title='{_h(ch)}' style='background:{CELL_COLOR.get(ch, '#999')}'></span>"
                        for ch in r["gpus"]) or "-"
        rows.append(f"<tr><td>{_h(r['nodes'])}</td><td>{_h(r['state'])}</td><td>{cells}</td><td>{_h(r['reason'])}</td></tr>")
    parts.append("<h3>Nodes x GPUs</h3><table><tr><th>nodes</th><th>state</th><th>GPUs</th><th>why</th></tr>"
                 + "".join(rows) + "</table>")
    return "\n".join(parts)


def fleet_markdown(report: Report) -> list[str]:
    if "nodes" not in report.extra:
        return []
    lines = ["## Fleet", "", "| nodes | # | status | summary |", "|---|---|---|---|"]
    for c in report.extra.get("fleet", {}).get("classes", []):
        lines.append(f"| {_md(c['nodes'])} | {c['count']} | {c['status']} | {_md(c['summary'])} |")
    failed = [n for n in report.extra.get("nodes", []) if n["status"] != "ok"]
    if failed:
        lines += ["", "| node | status | reason |", "|---|---|---|"]
        lines += [f"| {_md(n['name'])} | {n['status']} | {_md(n.get('reason') or '')} |" for n in failed]
    return lines + [""]


def _h(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _md(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")
