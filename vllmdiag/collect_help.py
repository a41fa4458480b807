"""`vllmdiag collect --help` in the style of the other commands (typer's rich panels).

collect parses with argparse so every node can run it with only psutil and pyzmq; its help is the
one place it may use rich, and only when a person asks for it on a machine that has rich.
"""

from __future__ import annotations

import argparse
import sys


def show(parser: argparse.ArgumentParser) -> int:
    try:
        from rich.console import Console
        from rich.panel import Panel
        from rich.table import Table
    except ImportError:  # a shipped collector on a bare vLLM node: argparse's own help
        parser.print_help()
        return 0
    console = Console(file=sys.stdout, highlight=False)
    console.print("\n [bold]Usage:[/] vllmdiag collect [OPTIONS]\n")
    console.print(f" {parser.description or ''}\n")
    table = Table(box=None, show_header=False, padding=(0, 1), expand=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(style="bold yellow", no_wrap=True)
    table.add_column(overflow="fold")
    for action in parser._actions:  # argparse has no public iterator over its options
        if not action.option_strings:
            continue
        kind = getattr(action.type, "__name__", None) or "str"
        metavar = "" if action.nargs == 0 else f"<{'path' if kind in ('Path', 'PosixPath') else kind.lower()}>"
        default = action.default if action.default not in (None, False, argparse.SUPPRESS) else None
        text = (action.help or "") + (f" [dim]\\[default: {default}][/]" if default is not None else "")
        table.add_row(", ".join(sorted(action.option_strings, key=len, reverse=True)), metavar, text)
    console.print(Panel(table, title="Options", title_align="left", border_style="dim"))
    return 0
