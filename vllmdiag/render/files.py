"""Self-contained report files (--report FILE.html|.md) to paste into an incident ticket."""

from __future__ import annotations

import html
from pathlib import Path

from vllmdiag.analysis.engine import Report
from vllmdiag.cli_errors import UsageError
from vllmdiag.render.safe import md_escape, sanitize_report


def report_text(report: Report, path: Path) -> str:
    """The report for a .md or .html file name (the caller writes it through vllmdiag.outfile)."""
    suffix = path.suffix.lower()
    if suffix == ".md":
        return to_markdown(report)
    if suffix in (".html", ".htm"):
        return to_html(report)
    raise UsageError(f"--report {path}: use a .html or .md file name")


def to_markdown(report: Report) -> str:
    """Every string of the report is Markdown-escaped once (sanitize_report): no raw HTML, no links,
    no table breakouts, whatever a title or node name holds (issue 15, item 8)."""
    report = sanitize_report(report, md_escape)
    v = report.verdict
    lines = [f"# vllmdiag: {v.status}" + (f" at the {v.layer} layer" if v.layer else ""), "", v.summary, ""]
    if v.culprits:
        lines += ["## Culprits", "", "| node | pid | role | rank | title | reason |", "|---|---|---|---|---|---|"]
        lines += [_row(c.node, c.pid, c.role, c.rank, c.title, c.reason) for c in v.culprits]
        lines.append("")
    if v.evidence:
        lines += ["## Evidence", ""] + [f"- {_md(e)}" for e in v.evidence] + [""]
    if v.next_steps:
        lines += ["## Next read-only steps", ""] + [f"- {s}" for s in v.next_steps] + [""]
    from vllmdiag.fleet.html import fleet_markdown

    lines += fleet_markdown(report)
    for dep in report.deployments:
        d = dep.to_dict()
        lines += [f"## Deployment {_md(d['id'])}: {_md(d['verdict']['status'])}", "",
                  "| pid | ppid | role | rank | state | title |", "|---|---|---|---|---|---|"]
        lines += [_row(p["pid"], p["ppid"], p["role"], p["rank"], p["state"], p["title"]) for p in d["processes"]]
        lines.append("")
    if report.findings:
        lines += ["## Findings", "", "| severity | layer | code | node | message |", "|---|---|---|---|---|"]
        lines += [_row(f.severity, f.layer, f.code, f.node, f.message) for f in report.findings]
    return "\n".join(lines) + "\n"


def to_html(report: Report) -> str:
    """No network assets: inline CSS only, every value cleaned of control characters and escaped."""
    report = sanitize_report(report)
    v = report.verdict
    color = {"healthy": "#1a7f37", "blocked": "#cf222e", "degraded": "#9a6700"}.get(v.status, "#555")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>vllmdiag report</title><style>",
        "body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;margin:1em 0}",
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left;font-size:13px}",
        ".verdict{border-left:6px solid " + color + ";padding:0.5em 1em;background:#f6f8fa}",
        "code,pre{background:#eee;padding:2px 4px}</style></head><body>",
        f"<div class='verdict'><h1>{_h(v.status.upper())}" + (f" &mdash; layer {_h(v.layer)}" if v.layer else "")
        + f"</h1><p>{_h(v.summary)}</p></div>",
    ]
    if v.culprits:
        parts.append(_table(["node", "pid", "role", "rank", "title", "reason"],
                            [[c.node, c.pid, c.role, c.rank, c.title, c.reason] for c in v.culprits], "Culprits"))
    if v.evidence:
        parts.append("<h2>Evidence</h2><ul>" + "".join(f"<li>{_h(e)}</li>" for e in v.evidence) + "</ul>")
    if v.next_steps:
        parts.append("<h2>Next read-only steps</h2><pre>" + _h("\n".join(v.next_steps)) + "</pre>")
    from vllmdiag.fleet.html import fleet_html

    parts.append(fleet_html(report))
    for dep in report.deployments:
        d = dep.to_dict()
        parts.append(_table(["pid", "ppid", "role", "rank", "state", "title"],
                            [[p["pid"], p["ppid"], p["role"], p["rank"], p["state"], p["title"]] for p in d["processes"]],
                            f"Deployment {d['id']}: {d['verdict']['status']}"))
    if report.findings:
        parts.append(_table(["severity", "layer", "code", "node", "message"],
                            [[f.severity, f.layer, f.code, f.node, f.message] for f in report.findings], "Findings"))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _table(header: list[str], rows: list[list[object]], title: str) -> str:
    head = "".join(f"<th>{_h(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_h(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<h2>{_h(title)}</h2><table><tr>{head}</tr>{body}</table>"


def _h(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _row(*cells: object) -> str:
    return "| " + " | ".join(_md(c) for c in cells) + " |"


def _md(value: object) -> str:
    """Values are already escaped by sanitize_report(report, md_escape); numbers and None need none."""
    return value if isinstance(value, str) else md_escape(value)
