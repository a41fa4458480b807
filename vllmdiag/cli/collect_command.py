"""``vllmdiag collect`` as typer shows it (its help, from the table). What runs is the argparse door,
cli/collect.py: every node of a sweep runs it, typer or not (cli/app.py's fast path, the shipped collector)."""

from __future__ import annotations

import sys
from typing import Any

from vllmdiag.cli.options import COLLECT
from vllmdiag.cli.shared import Command


def collect_passthrough(**given: Any) -> int:
    """Collect a read-only snapshot (JSON) of this node's vLLM processes."""
    from vllmdiag.cli.collect import main as collect_main

    return collect_main(sys.argv[2:])


COMMAND = Command("collect", collect_passthrough, COLLECT)
