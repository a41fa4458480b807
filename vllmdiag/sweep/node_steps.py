"""The verdict's next steps aimed the way this sweep reaches its nodes (``vllmdiag/playbooks/steps.py`` does the work)."""

from __future__ import annotations

from vllmdiag.playbooks.steps import exec_prefix, via_exec
from vllmdiag.sweep.transport import Transport

__all__ = ["exec_prefix", "via_transport"]


def via_transport(steps: list[str], transport: Transport) -> list[str]:
    """Rewrite node-directed steps for an exec template; ssh sweeps keep them as written."""
    return via_exec(steps, transport.exec_template)
