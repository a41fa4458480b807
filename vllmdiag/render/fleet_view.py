"""Fleet picture: a nodes x GPUs grid coloured by state, identical rows folded into node sets (clush -b).

``render(report, console)`` is the section ``render/text.py`` picks up (nothing for a one-node
report); ``render_fleet`` is the whole sweep screen: verdict, classes, grid, the findings that matter.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report

# A glyph per state, not only a colour: the grid must read the same without colour (logs, pipes, NO_COLOR).
CELL_STYLE = {".": ("■", "green"), "X": ("✖", "bold red"), "b": ("▲", "red"), "d": ("◆", "yellow"), "?": ("?", "magenta")}
CELL_WORD = {".": "ok", "X": "culprit", "b": "in a blocked deployment", "d": "degraded", "?": "unknown"}
NODE_STYLE = {"healthy": "green", "blocked": "bold red", "degraded": "yellow", "inconclusive": "magenta",
              "no-deployment": "blue", "starting": "cyan", "unreachable": "bold magenta", "timeout": "bold magenta",
              "error": "bold magenta"}
MAX_ROWS = 40


def render(report: Report, console: Any) -> None:
    if report.nodes is None or report.fleet is None:
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title="fleet: nodes x GPUs", show_header=True, header_style="bold", box=None)
    for col in ("nodes", "#", "state", "GPUs", "why"):
        table.add_column(col, overflow="fold")
    rows = report.fleet.grid  # folded by fleet analysis (node sets, worst first)
    for r in rows[:MAX_ROWS]:
        cells = Text()
        for ch in r.gpus:
            glyph, style = CELL_STYLE.get(ch, ("■", "white"))
            cells.append(glyph, style=style)
        table.add_row(Text(r.nodes), str(r.count), Text(r.state, style=NODE_STYLE.get(r.state, "")),
                      cells if r.gpus else Text("-", style="dim"), Text(r.reason, style="dim"))
    if len(rows) > MAX_ROWS:
        table.add_row(f"... {len(rows) - MAX_ROWS} more classes", "", "", "", "")
    console.print(table)
    legend = Text()
    for ch, (glyph, style) in CELL_STYLE.items():
        legend.append(f"{glyph} {CELL_WORD[ch]}  ", style=style)
    console.print(legend)
    for c in report.fleet.classes:
        if c.summary in report.verdict.summary:
            continue  # the verdict said it already
        if c.status not in ("healthy", "unreachable", "timeout", "error"):
            line = Text(f"{c.nodes} ", style="bold") + Text(c.status, style=NODE_STYLE.get(c.status, ""))
            console.print(line + Text(f": {c.summary}"))


def render_fleet(report: Report, console: Any = None) -> None:
    from vllmdiag.render.safe import sanitize_report
    from vllmdiag.render.text import findings_table, make_console, print_findings, print_verdict

    report = sanitize_report(report)  # node names and remote reasons are untrusted (issue 15, item 8)
    console = console or make_console()
    print_verdict(report.verdict, console)
    render(report, console)
    for line in failed_lines([n for n in report.nodes or [] if n.status != "ok"]):
        console.print(line)
    timing = timing_line([n.to_dict() for n in report.nodes or []])
    if timing:
        console.print(f"[dim]{_esc(timing)}[/]")
    if _verbose() and any(f.severity != "info" for f in report.findings):
        shown = Report(verdict=report.verdict, deployments=[], snapshots=[],
                       findings=[f for f in report.findings if f.severity != "info"][:60])
        console.print(findings_table(shown))
    elif not _verbose():
        print_findings(report, console)


def timing_line(nodes: list[dict[str, Any]], slowest: int = 3) -> str | None:
    """Per-node time (connect + collect), for a sweep: the median and the slowest few by name."""
    timed = sorted(((float(n.get("duration_s") or 0.0), str(n.get("name"))) for n in nodes), reverse=True)
    if len(timed) < 2:
        return None
    median = sorted(t for t, _ in timed)[len(timed) // 2]
    worst = ", ".join(f"{name} {t:.1f} s" for t, name in timed[:slowest])
    return f"per-node time: median {median:.1f} s; slowest {worst} ({len(timed)} nodes; --json: nodes[].duration_s)"


def _verbose() -> bool:
    from vllmdiag.render import text

    return bool(text.VERBOSE)


def _esc(text: object) -> str:
    from vllmdiag.render.text import escape

    return escape(text)


def failed_lines(failed: list[Any]) -> list[str]:
    """Nodes that did not answer, one line per status and cause with the node set folded (`nohost[1-40]
    unreachable: host name does not resolve (40 nodes ...)`); past MAX_ROWS lines, how many more: a long
    list is never cut in silence (issue 35 item 2)."""
    from vllmdiag.render.report_data import fold

    groups: dict[tuple[str, str], list[Any]] = {}
    for n in failed:
        groups.setdefault((str(n.status), str(n.reason or "").split(": ", 1)[0]), []).append(n)
    out = []
    for (status, cause), nodes in list(groups.items())[:MAX_ROWS]:
        if len(nodes) == 1:
            out.append(f"[bold magenta]{_esc(nodes[0].name)}[/] {_esc(status)}: {_esc(nodes[0].reason or '')}")
        else:
            out.append(f"[bold magenta]{_esc(fold([str(n.name) for n in nodes]))}[/] {_esc(status)}: {_esc(cause)} "
                       f"({len(nodes)} nodes; --json: nodes[].reason says each)")
    if len(groups) > MAX_ROWS:
        out.append(f"... and {len(groups) - MAX_ROWS} more kinds of failure (--json lists every node)")
    return out
