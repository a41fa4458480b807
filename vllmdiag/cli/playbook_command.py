"""``vllmdiag playbook``: the playbooks, listed or one shown (its own typer parameter: no option of the table)."""

from __future__ import annotations

from typing import Annotated

from vllmdiag.cli.shared import Command
from vllmdiag.cli.shared import arg as _arg
from vllmdiag.errors import BadInput


def playbook_command(
    code: Annotated[str | None, _arg(help="a finding code, e.g. queue.ring_full")] = None,
) -> int:
    """List the playbooks, or show one: what it means, read-only commands to confirm, remediation."""
    from vllmdiag.playbooks.playbook import load_playbooks
    from vllmdiag.render.playbook_view import show_playbook, show_playbook_list

    books = load_playbooks()
    if code is None:
        show_playbook_list(books)
        return 0
    if code not in books:
        raise BadInput(f"unknown finding code {code!r}; run `vllmdiag playbook` for the list")
    show_playbook(code, books[code])
    return 0


COMMAND = Command("playbook", playbook_command)
