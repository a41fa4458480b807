"""Rich terminal view of a report: verdict panel first, then deployments, then layer sections.

Layer-specific views live in ``render/<layer>_view.py`` with ``render(report, console)``; they are
picked up here when present, so each layer owns its own picture. Rendering never collects.
"""

from __future__ import annotations

import importlib
from typing import Any

from vllmdiag.analysis.deployments import role_of
from vllmdiag.analysis.engine import Report
from vllmdiag.model import Verdict
from vllmdiag.render.safe import clean, sanitize_report

STATUS_STYLE = {"healthy": "bold green", "blocked": "bold red", "degraded": "bold yellow",
                "no-deployment": "bold blue", "inconclusive": "bold magenta"}
SEVERITY_STYLE = {"critical": "red", "warning": "yellow", "info": "dim"}
VIEWS = ("process", "handshake", "queue", "gpu", "client", "fleet")
STATE_STYLE = {"Z": "bold red", "T": "bold red", "t": "bold red", "D": "bold yellow", "R": "green", "S": ""}


def escape(text: Any) -> str:
    """Cleaned of control characters and escaped for rich markup: for every untrusted string."""
    from rich.markup import escape as _escape

    return _escape(clean(text))


def make_console(file: Any = None) -> Any:
    from rich.console import Console

    return Console(file=file, highlight=False, soft_wrap=False)


def render_report(report: Report, console: Any = None) -> None:
    report = sanitize_report(report)
    console = console or make_console()
    console.print(verdict_panel(report.verdict))
    for dep in report.deployments:
        console.print(deployment_tree(dep.to_dict()))
    for name in VIEWS:
        try:
            module = importlib.import_module(f"vllmdiag.render.{name}_view")
        except ModuleNotFoundError:
            continue
        try:
            module.render(report, console)
        except Exception as exc:  # odd-typed snapshot data: one section says so, the verdict stays
            console.print(f"[dim]({name} view not shown: malformed data: {escape(type(exc).__name__)})[/]")
    if report.findings:
        console.print(findings_table(report))


def verdict_panel(v: Verdict) -> Any:
    from rich.panel import Panel
    from rich.text import Text

    body = Text()
    body.append(v.status.upper(), style=STATUS_STYLE.get(v.status, "bold"))
    if v.layer:
        body.append(f"  layer: {v.layer}", style="bold")
    if v.confidence != "high":
        body.append(f"  (confidence {v.confidence})", style="dim")
    body.append("\n" + v.summary + "\n")
    for c in v.culprits[:4]:
        pid = c.pid if c.pid is not None else "-"
        rank = f" rank {c.rank}" if c.rank is not None else ""
        body.append(f"\nculprit: {c.node} pid {pid} {c.title or c.role}{rank}: {c.reason}", style="bold")
    if v.evidence:
        body.append("\n\nevidence:", style="bold")
        for e in v.evidence[:8]:
            body.append(f"\n  - {e}")
    if v.next_steps:
        body.append("\n\nnext (read-only) steps:", style="bold")
        for s in v.next_steps:
            body.append(f"\n  $ {s}", style="cyan")
    return Panel(body, title="vllmdiag verdict", border_style=STATUS_STYLE.get(v.status, "white"))


def deployment_tree(dep: dict[str, Any]) -> Any:
    from rich.tree import Tree

    status = dep["verdict"]["status"]
    tree = Tree(f"[bold]deployment {escape(dep['id'])}[/] [{STATUS_STYLE.get(status, '')}]{status}[/]")
    nodes: dict[int, Any] = {}
    pids = {p["pid"] for p in dep["processes"]}
    for p in dep["processes"]:
        parent = nodes.get(p["ppid"]) if p["ppid"] in pids else None
        style = STATE_STYLE.get(p.get("state") or "", "") or "default"
        label = f"{escape(p['title'] or role_of(p))}  pid {escape(p['pid'])}  [{style}]{escape(p.get('state'))}[/]"
        if parent is None and p["pid"] != dep["root_pid"]:
            label += f"  [dim](ppid {p['ppid']})[/]"
        nodes[p["pid"]] = (parent or tree).add(label)
    return tree


def findings_table(report: Report) -> Any:
    from rich.table import Table

    table = Table(title="findings", show_lines=False)
    for col in ("severity", "layer", "code", "node", "message"):
        table.add_column(col)
    order = {"critical": 0, "warning": 1, "info": 2}
    for f in sorted(report.findings, key=lambda f: order.get(f.severity, 3)):
        table.add_row(f"[{SEVERITY_STYLE.get(f.severity, '')}]{escape(f.severity)}[/]", escape(f.layer), escape(f.code),
                      escape(f.node),
                      escape(f.message))
    return table
