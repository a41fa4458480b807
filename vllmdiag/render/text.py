"""Rich terminal view of a report: verdict panel first, then deployments, then layer sections.

Layer-specific views live in ``render/<layer>_view.py`` with ``render(report, console)``; they are
found by folder (``render/views.py``), so each layer owns its own picture. Rendering never collects.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report, Verdict
from vllmdiag.render.culprits import limited as culprit_lines
from vllmdiag.render.report_data import is_command, vllm_label
from vllmdiag.render.safe import clean

STATUS_STYLE = {"healthy": "bold green", "blocked": "bold red", "degraded": "bold yellow",
                "no-deployment": "bold blue", "inconclusive": "bold magenta", "starting": "bold cyan"}
SEVERITY_STYLE = {"critical": "red", "warning": "yellow", "info": "dim"}
STATE_STYLE = {"Z": "bold red", "T": "bold red", "t": "bold red", "D": "bold yellow", "R": "green", "S": ""}
CULPRIT_STYLE = "bold white on red"
CULPRIT_LINES = 6  # folded lines in the verdict box; the rest are named in one "and N more" line
# Set by the CLI's -v/--verbose: every row of every section (the default folds what is fine).
VERBOSE = False


def escape(text: Any) -> str:
    """Cleaned of control characters and escaped for rich markup: for every untrusted string."""
    from rich.markup import escape as _escape

    return _escape(clean(text))


PIPED_WIDTH = 200  # stdout not a terminal and no COLUMNS: a log or a ticket, not an 80-column screen


def make_console(file: Any = None) -> Any:
    """The views' console. On a terminal its width; piped (a log, `| less`, a ticket) rich would assume 80
    columns and hard-wrap every long line there, a culprit's pid list included (issue 35 item 8): piped, lines
    are laid out at PIPED_WIDTH unless COLUMNS says otherwise, and wrap only between words."""
    import os
    import sys

    from rich.console import Console

    width = None
    target = file if file is not None else sys.stdout
    if not os.environ.get("COLUMNS") and not (hasattr(target, "isatty") and target.isatty()):
        width = PIPED_WIDTH
    console = Console(file=file, highlight=False, soft_wrap=False, width=width)
    console.vllmdiag_piped = width is not None  # type: ignore[attr-defined]  # boxes fit their text, no padding
    return console


def _seq(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [] if value is None else [value]


def plain_verdict(v: Verdict) -> Any:
    """The verdict as plain text pieces (no markup, no assumption on types): the fallback panel."""
    from rich.panel import Panel
    from rich.text import Text

    body = Text(f"{str(v.status).upper()}  layer: {v.layer}\n{v.summary}\n", style="bold")
    lines, more = culprit_lines(_seq(v.culprits), CULPRIT_LINES)
    for c in lines:
        body.append(f"\n{c.kind}: {c.title} ({c.reason})" if c.kind != "culprit" else
                    f"\nculprit: {c.title} on {c.node}, {c.where}: {c.reason}")
    if more:
        body.append(f"\nculprits {more}")
    for e in _seq(v.evidence)[:8]:
        body.append(f"\n  - {e}")
    for step in _seq(v.next_steps):
        body.append(f"\n  {'$' if is_command(str(step)) else '-'} {step}", style="cyan")
    return Panel(body, title="vllmdiag verdict")


def print_findings(report: Report, console: Any) -> None:
    """Warnings and criticals the verdict did not already say; the rest counted (-v shows all)."""
    said = " ".join([report.verdict.summary, *report.verdict.evidence])
    loud = [f for f in report.findings if f.severity != "info"]
    quiet = len(report.findings) - len(loud)
    new = [f for f in loud if f.message.rstrip(".") not in said]
    if new:
        console.print(findings_table(report, new))
    if len(new) < len(loud):
        codes = ", ".join(sorted({f.code for f in loud if f not in new}))
        console.print(f"[dim]findings already said in the verdict above: {escape(codes)}[/]")
    if quiet:
        console.print(f"[dim]{quiet} informational finding(s); -v shows them and every healthy row[/]")


def verdict_panel(v: Verdict, expand: bool = True) -> Any:
    from rich.panel import Panel
    from rich.text import Text

    body = Text()
    body.append(v.status.upper(), style=STATUS_STYLE.get(v.status, "bold"))
    if v.layer:
        body.append(f"  layer: {v.layer}", style="bold")
    if v.confidence != "high":
        body.append(f"  (confidence {v.confidence})", style="dim")
    body.append("\n" + v.summary + "\n")
    _culprits(body, v)
    evidence = [e for e in v.evidence if not _said(e, v.summary)]
    if evidence:
        body.append("\n\nevidence:", style="bold")
        for e in evidence[:8]:
            body.append(f"\n  - {e}")
    return Panel(body, title="vllmdiag verdict", border_style=STATUS_STYLE.get(v.status, "white"), expand=expand)


def _culprits(body: Any, v: Verdict) -> None:
    """The culprit lines. The summary already says why; a culprit line says who, exactly (node, pid, rank).
    Workers blamed alike are one line (`VLLM::Worker_TP[0-7]`, every pid), the rest past the limit one
    "and N more" line: none is dropped (issue 35 item 2). A node a sweep could not read is said as such."""
    lines, more = culprit_lines(v.culprits, CULPRIT_LINES)
    for c in lines:
        if c.kind != "culprit":
            body.append(f"\n{c.kind}: ", style="bold")
            body.append(f"{c.title} ({c.reason})" if c.reason else c.title)
            continue
        body.append("\nculprit: ", style="bold")
        body.append(f" {c.title} ", style=CULPRIT_STYLE)
        body.append(f" on {c.node}, {c.where}")
        if not (_said(c.reason, v.summary) or c.title in v.summary
                or (len(c.pids) == 1 and f"pid {c.pids[0]}" in v.summary)):
            body.append(f": {c.reason}")
    if more:
        body.append("\nculprits ", style="bold")
        body.append(more)


def print_verdict(v: Verdict, console: Any) -> None:
    """The verdict box, then its next steps below it (print_steps)."""
    console.print(verdict_panel(v, expand=not getattr(console, "vllmdiag_piped", False)))
    print_steps(v.next_steps, console)


def print_steps(steps: list[str], console: Any) -> None:
    """Next steps under the verdict box, each command on one physical line however narrow the terminal
    (soft wrap: the terminal folds it on screen, a copy is one line; inside the box a wrapped command
    pasted line by line ran its second half alone, issue 35 item 5). A step that is prose ("Re-run as
    root ...") is said as a sentence, never after a `$`."""
    from rich.text import Text

    if not steps:
        return
    console.print(Text("next (read-only) steps:", style="bold"))
    for step in steps:
        if is_command(step):
            console.print(Text("  $ ", style="dim") + Text(clean(step), style="cyan"), soft_wrap=True)
        else:
            console.print(Text(f"  - {clean(step)}"))


def _said(text: str, summary: str) -> bool:
    """Is `text` (a culprit reason, an evidence line) already in the summary? Then it is not repeated."""
    from vllmdiag.render.report_data import said

    return said(text, summary)


def deployment_tree(dep: dict[str, Any], fold: bool = False) -> Any:
    """The process tree, culprit marked. `fold`: sibling workers alike in state and not blamed are one
    line (`VLLM::Worker_TP[0-7]  pids 101-108  S`), so a TP=8 tree stays short."""
    from rich.text import Text
    from rich.tree import Tree

    status = str(dep["verdict"]["status"])
    # Text, not markup: an unknown status once produced a stray "[/]" (MarkupError, issue 15 item 13).
    version = vllm_label(dep)
    tree = Tree(Text("deployment ", style="bold") + Text(str(dep["id"]), style="bold") + Text(" ")
                + Text(status, style=STATUS_STYLE.get(status, "")) + Text(f"  {clean(version)}" if version else "", style="dim"))
    blamed = {c.get("pid") for c in dep["verdict"].get("culprits", []) if c.get("pid") is not None}
    nodes: dict[int, Any] = {}
    pids = {p["pid"] for p in dep["processes"]}
    folded = _fold_workers(dep["processes"], blamed) if fold else {}
    for p in dep["processes"]:
        if p["pid"] in folded and folded[p["pid"]] is None:
            continue  # shown in its group's line
        parent = nodes.get(p["ppid"]) if p["ppid"] in pids else None
        if fold and _role(p) == "resource_tracker":  # its long `python -c ...` line says nothing more
            p = {**p, "title": "multiprocessing resource_tracker"}
        label = folded.get(p["pid"]) or _proc_label(p, p["pid"] in blamed)
        if parent is None and p["pid"] != dep["root_pid"]:
            label += f"  [dim](ppid {p['ppid']})[/]"
        nodes[p["pid"]] = (parent or tree).add(label)
    return tree


def _role(p: dict[str, Any]) -> str:
    return str(p.get("role") or "other")  # analysis inferred it (ProcessBrief.role); never recomputed here


def _proc_label(p: dict[str, Any], culprit: bool) -> str:
    style = STATE_STYLE.get(str(p.get("state") or ""), "") or "default"
    title = escape(p["title"] or _role(p))
    label = f"[{CULPRIT_STYLE}]{title}[/]" if culprit else title
    label += f"  pid {escape(p['pid'])}  [{style}]{escape(p.get('state'))}[/]"
    return label + ("  [bold red]◀ culprit[/]" if culprit else "")


def _fold_workers(procs: list[dict[str, Any]], blamed: set[Any]) -> dict[int, str | None]:
    """pid -> the group's label (first member) or None (folded into it), for runs of 3+ alike workers."""
    groups: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for p in procs:
        ranks = p.get("ranks") or {}
        if _role(p) == "worker" and p["pid"] not in blamed and set(ranks) <= {"tp"} and "tp" in ranks:
            groups.setdefault((p["ppid"], p.get("state")), []).append(p)
    out: dict[int, str | None] = {}
    for (_, state), alike in groups.items():
        for members in _rank_runs(alike):
            _fold_run(members, state, out)
    return out


def _rank_runs(workers: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Runs of consecutive TP ranks (the culprit splits TP[0-7] into TP[0-4], ..., TP[6-7])."""
    runs: list[list[dict[str, Any]]] = []
    for w in sorted(workers, key=lambda m: int(m["ranks"]["tp"])):
        if runs and int(runs[-1][-1]["ranks"]["tp"]) + 1 == int(w["ranks"]["tp"]):
            runs[-1].append(w)
        else:
            runs.append([w])
    return runs


def _fold_run(members: list[dict[str, Any]], state: Any, out: dict[int, str | None]) -> None:
    tps = [int(m["ranks"]["tp"]) for m in members]
    if len(members) >= 3:
        pid_list = [int(m["pid"]) for m in members]
        style = STATE_STYLE.get(state or "", "") or "default"
        label = (f"VLLM::Worker_TP[{tps[0]}-{tps[-1]}]  [{style}]{escape(state)}[/]  pids {_pid_span(pid_list)} "
                 f"[dim]({len(members)} alike; -v: one line each)[/]")
        out.update({m["pid"]: None for m in members})
        out[members[0]["pid"]] = label


def _pid_span(pids: list[int]) -> str:
    return f"{pids[0]}-{pids[-1]}" if pids == list(range(pids[0], pids[-1] + 1)) else ",".join(map(str, pids))


def findings_table(report: Report, findings: list[Any] | None = None) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="findings", show_lines=False)
    for col in ("severity", "layer", "code", "node", "message"):
        table.add_column(col, overflow="fold")
    order = {"critical": 0, "warning": 1, "info": 2}
    for f in sorted(report.findings if findings is None else findings, key=lambda f: order.get(str(f.severity), 3)):
        sev = str(f.severity)
        table.add_row(Text(sev, style=SEVERITY_STYLE.get(sev, "")), escape(f.layer), escape(f.code),
                      escape(f.node),
                      escape(f.message))
    return table
