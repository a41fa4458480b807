"""Self-contained report files (--report FILE.html|.md) to paste into an incident ticket.

Both are built from the JSON contract (`report.to_dict()`), sanitized once at this boundary
(`render/safe.py`: control characters made visible), then escaped by their own renderer:
`render/html_report.py` (html.escape) and `render/md_report.py` (md_escape). Writing the file is
the caller's job, through `vllmdiag.outfile`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from vllmdiag.cli_errors import UsageError
from vllmdiag.render.safe import sanitize_report


def report_text(report: Any, path: Path) -> str:
    """The report for a .md or .html file name (the caller writes it through vllmdiag.outfile)."""
    suffix = path.suffix.lower()
    if suffix == ".md":
        return to_markdown(report, sys.argv)
    if suffix in (".html", ".htm"):
        return to_html(report, sys.argv)
    raise UsageError(f"--report {path}: use a .html or .md file name")


def to_markdown(report: Any, argv: list[str] | None = None) -> str:
    from vllmdiag.render.md_report import to_markdown as markdown

    return markdown(sanitize_report(report.to_dict()), sanitize_report(argv))


def to_html(report: Any, argv: list[str] | None = None) -> str:
    from vllmdiag.render.html_report import to_html as page

    return page(sanitize_report(report.to_dict()), sanitize_report(argv))
