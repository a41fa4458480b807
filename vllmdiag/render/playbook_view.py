"""Rich view of playbooks (``vllmdiag playbook [CODE]``)."""

from __future__ import annotations

from typing import Any

from vllmdiag.playbooks.playbook import API, UNKNOWN_API
from vllmdiag.render.text import escape, make_console


def show_playbook_list(books: dict[str, dict[str, Any]], console: Any = None) -> None:
    from rich.table import Table

    console = console or make_console()
    table = Table(title="playbooks (vllmdiag playbook CODE for one)")
    table.add_column("code")
    table.add_column("title")
    for code in sorted(books):
        table.add_row(escape(code), escape(books[code].get("title", "")))
    console.print(table)


def show_playbook(code: str, book: dict[str, Any], console: Any = None) -> None:
    console = console or make_console()
    console.print(f"[bold]{escape(code)}[/]: {escape(book.get('title', ''))}\n")
    console.print(escape(book.get("meaning", "")).strip() + "\n")
    for key, label in (("confirm", "confirm (read-only)"), ("causes", "likely causes"), ("remediation", "remediation")):
        items = book.get(key) or []
        if items:
            console.print(f"[bold]{label}[/]")
            for item in items:
                # {curl_api}: triage fills in the deployment's own API server; here, what to fill in.
                item = item.replace(API, UNKNOWN_API) if key == "confirm" else item
                # A command on one physical line (soft wrap): pasted, it runs whole (issue 35 item 5).
                console.print(("  $ " if key == "confirm" else "  - ") + escape(item), soft_wrap=key == "confirm")
            console.print()
