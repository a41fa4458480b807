"""Rich table of gate results for humans (the JSON and JUnit outputs are the machine interfaces)."""

from __future__ import annotations

from typing import Any

from vllmdiag.gate.result import NodeGateResult

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def render_node(node: NodeGateResult, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from vllmdiag.render.safe import sanitize_report
    from vllmdiag.render.text import escape

    node = sanitize_report(node)  # reasons quote node names, paths and remote answers (issue 15, item 8)
    console = console or Console()
    table = Table(title=f"vllmdiag gate: {escape(node.node)}", title_justify="left", expand=False)
    table.add_column("check")
    table.add_column("status")
    table.add_column("required")
    table.add_column("reason", overflow="fold")
    for check in node.checks:
        style = STYLE.get(check.status, "")
        table.add_row(escape(check.name), f"[{style}]{escape(check.status)}[/]", "yes" if check.required else "advisory",
                      escape(check.reason))
    console.print(table)
    failed = [c.name for c in node.checks if c.blocks]
    if failed:
        console.print(f"[bold red]GATE FAILED[/]: required check(s) failed: {escape(', '.join(failed))}")
    else:
        console.print(f"[green]GATE PASSED[/] ({node.counts()['warn']} warning(s), {node.counts()['skip']} skipped)")
