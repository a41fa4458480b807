"""The whole screen for a report: verdict first, then the deployments, then either the compact layer
summary (default) or every layer's view (``-v``), then findings; the fleet picture for a sweep.

Every section is guarded: odd-typed data from an untrusted snapshot or saved report costs that section
one line, never the verdict and never an "internal error" exit (issue 15, item 13). Drawing only:
the pieces live in ``text.py`` and ``<name>_view.py`` (``views.py``); nothing here collects or decides.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report
from vllmdiag.render import compact, text, views
from vllmdiag.render.fleet_view import render as fleet_section
from vllmdiag.render.fleet_view import render_fleet
from vllmdiag.render.safe import sanitize_report
from vllmdiag.render.text import (
    _seq,
    deployment_tree,
    escape,
    findings_table,
    make_console,
    plain_verdict,
    print_findings,
    print_verdict,
)


def draw(report: Report, console: Any = None) -> None:
    """The whole screen for a report: the fleet picture for a sweep, the node picture otherwise."""
    from vllmdiag.playbooks.playbook import aim_report

    aim_report(report)  # {curl_api} in the next steps: this deployment's API server (issue 35 item 3)
    if report.is_fleet:
        render_fleet(report, console)
    else:
        render_report(report, console)


def render_report(report: Report, console: Any = None) -> None:
    report = sanitize_report(report)
    console = console or make_console()
    # Every section is guarded: odd-typed data from an untrusted snapshot costs that section one
    # line, never the verdict and never an "internal error" exit (issue 15, item 13).
    if not _section(console, "verdict", lambda: print_verdict(report.verdict, console)):
        console.print(plain_verdict(report.verdict))
    for dep in _seq(report.deployments):
        _section(console, "deployment", lambda dep=dep: console.print(deployment_tree(dep.to_dict(), fold=not text.VERBOSE)))
    if not text.VERBOSE:
        _section(console, "summary", lambda: _render_compact(report, console))
        return
    for name, draw in views.drawing("render"):  # found by folder: render/<name>_view.py
        _section(console, f"{name} view", lambda draw=draw: draw(report, console))
    if report.findings:
        _section(console, "findings", lambda: console.print(findings_table(report)))


def _section(console: Any, name: str, show: Any) -> bool:
    try:
        show()
        return True
    except Exception as exc:
        console.print(f"[dim]({escape(name)} not shown: malformed data: {escape(type(exc).__name__)})[/]")
        return False


def _render_compact(report: Report, console: Any) -> None:
    try:
        compact.render(report.render_dict(), console)
    except Exception as exc:  # odd-typed snapshot data: the section says so, the verdict stays
        console.print(f"[dim](layer summary not shown: malformed data: {escape(type(exc).__name__)})[/]")
    if report.is_fleet:
        fleet_section(report, console)
    print_findings(report, console)
