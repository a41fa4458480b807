"""Rich tables of gate results for humans, one node (``vllmdiag gate``) or a fleet (``sweep --gate``);
the JSON and JUnit outputs are the machine interfaces. Reads the gate's results, never runs a check."""

from __future__ import annotations

from typing import Any

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def render_node(node: Any, console: Any = None) -> None:
    """One node's checks (a ``gate.result.NodeGateResult``)."""
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


def render_gate(result: Any, console: Any = None) -> None:
    """A fleet's gate (a ``gate.result.FleetGateResult``): one row per node, then the cross-node checks."""
    from rich.table import Table

    from vllmdiag.render.text import escape, make_console

    console = console or make_console()
    table = Table(title=f"sweep --gate: {'PASS' if result.passed else 'FAIL'}")
    for col in ("node", "result", "failed (required)", "warnings"):
        table.add_column(col)
    for name, node in sorted(result.nodes.items()):
        failed = [c.name for c in node.checks if c.blocks]
        warned = [c.name for c in node.checks if c.status in ("warn", "fail") and not c.blocks]
        table.add_row(escape(name), "[green]pass[/]" if node.passed else "[bold red]fail[/]", escape(", ".join(failed)),
                      escape(", ".join(warned)))
    console.print(table)
    for c in result.fleet_checks:
        if c.status != "pass":
            console.print(f"[bold]{escape(c.name)}[/] {escape(c.status)}: {escape(c.reason)}")
