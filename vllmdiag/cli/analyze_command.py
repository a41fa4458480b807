"""``vllmdiag analyze``: the verdict again, offline, from saved snapshots or a saved --json report."""

from __future__ import annotations

from typing import Any

from vllmdiag.cli.options import ANALYZE, with_defaults
from vllmdiag.cli.shared import Command, check_report_name, emit, verbose


def analyze_command(**given: Any) -> int:
    """Recompute the verdict offline from saved snapshots, or draw a saved --json report again."""
    from vllmdiag.api import analyze_files

    o = with_defaults(ANALYZE, given)  # the options as declared in cli/options.py (typer passes them all)
    files, json_out, report, pid = o["files"], o["json_out"], o["report"], o["pid"]
    verbose(o["verbose"])
    check_report_name(report)
    from vllmdiag.model import SnapshotError

    try:
        result = analyze_files(files, pid)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        # Snapshots are untrusted: a well-formed file with the wrong content inside is bad input.
        raise SnapshotError(f"snapshot content is malformed ({type(exc).__name__}: {exc})") from None
    return emit(result, json_out, report)


COMMAND = Command("analyze", analyze_command, ANALYZE)
