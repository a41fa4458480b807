"""Rich tables of gate results for humans, one node (``vllmdiag gate``) or a fleet (``sweep --gate``);
the JSON and JUnit outputs are the machine interfaces. Reads the gate's results, never runs a check."""

from __future__ import annotations

from typing import Any

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def render_node(node: Any, console: Any = None) -> None:
    """One node's checks (a ``gate.result.NodeGateResult``)."""
    from rich.table import Table

    from vllmdiag.render.safe import sanitize_report
    from vllmdiag.render.text import escape, make_console

    node = sanitize_report(node)  # reasons quote node names, paths and remote answers (issue 15, item 8)
    console = console or make_console()  # piped (CI logs): not hard-wrapped at 80 columns
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
    console.print(gate_line(node))


def gate_line(node: Any) -> str:
    """The gate's last line (rich markup): FAILED, PASSED, or, when a required check could not look, what it
    did not check; that never ends "GATE PASSED" (issue 35 item 8). The exit code is the gate's (0 unless a
    required check failed: a skip never fails it by itself, README)."""
    from vllmdiag.render.text import escape

    failed = [c.name for c in node.checks if c.blocks]
    unseen = [c for c in node.checks if c.required and c.status == "skip"]
    counts = node.counts()
    if failed:
        return f"[bold red]GATE FAILED[/]: required check(s) failed: {escape(', '.join(failed))}"
    if unseen:
        names = "; ".join(f"{c.name} ({c.reason.rstrip('; ')})" for c in unseen)
        return (f"[bold magenta]GATE NOT PROVEN[/]: no required check failed, but {len(unseen)} required check(s) "
                f"could not look: {escape(names)}; {counts['warn']} warning(s). Where they cannot apply (no GPU), "
                "list them under `skip:` in the gate config (`vllmdiag gate --default-config`)")
    return f"[green]GATE PASSED[/] ({counts['warn']} warning(s), {counts['skip']} skipped)"


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
