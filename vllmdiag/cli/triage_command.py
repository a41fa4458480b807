"""``vllmdiag triage``: diagnose this node now. Its plain command lines come here without typer
(cli/app.py's fast path, read by cli/fast_triage.py), the rest through typer, to the same function."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from vllmdiag.cli.options import TRIAGE, check, with_defaults
from vllmdiag.cli.shared import Command, check_report_name, emit, verbose
from vllmdiag.errors import BadInput


def triage_command(**given: Any) -> int:
    """Diagnose this node now: which layer stopped the flow, and which process or rank stopped it."""
    from vllmdiag.api import triage
    from vllmdiag.runtime import deadline, lastword

    o = with_defaults(TRIAGE, given)  # the options as declared in cli/options.py (typer passes them all)
    budget, confirm, native, nonblocking = o["budget"], o["confirm"], o["native"], o["nonblocking"]
    watch = o["rates"]
    if o["watch"]:  # the deprecated spelling: still works, says so once
        sys.stderr.write("vllmdiag: triage --watch is now --rates (it observes S seconds and reports rates; "
                         "the resident watcher is `vllmdiag watch`)\n")
        watch = watch or o["watch"]
    report, json_out = o["report"], o["json_out"]
    origin = lastword.process_start()  # the budget is the whole command's: interpreter start included

    check(TRIAGE, {**o, "rates": watch})  # each option's range (cli/options.py); --watch is read as --rates
    if native and nonblocking:
        raise BadInput("--native cannot be combined with --nonblocking (py-spy refuses it)")
    check_report_name(report)
    check_pids_exist(o["pid"])
    from vllmdiag.registry import opt_in
    from vllmdiag.runtime.options import collect_options
    from vllmdiag.runtime.record import Collected
    from vllmdiag.runtime.run import RENDER_S, Run

    # --pid travels as triage's own argument (api.triage adds it: the snapshot's key order as always).
    options = collect_options(native=native, nonblocking=nonblocking, nccl_ras=o["nccl_ras"],
                              probe_request=o["probe_request"], enable=opt_in(o["enable"] or []),
                              no_boost=o["no_boost"], rates_s=watch)
    from vllmdiag.cli.progress_line import WatchBar

    verbose(o["verbose"])
    with _confirm_bar() as tick, WatchBar(watch, enabled=sys.stderr.isatty() and not json_out) as bar:
        result = triage(pids=o["pid"], probes=o["probe"], options=options, on_confirm=bar.chain(tick),
                        run=Run(budget_s=budget + watch, confirm_s=confirm, origin=origin))
    if o["pid"] and result.report.verdict.status == "no-deployment":
        pid_not_in_a_deployment(result.report, o["pid"])
    from vllmdiag.watch.history import say_remembered

    # What a `watch` on this node saw (its stall's onset, evidence), said before our verdict; after the look,
    # so that a usage error stays the one line it is.
    say_remembered(sys.stderr)
    did = [Collected.read(s) for s in result.report.snapshots]
    window = confirm if any(d.confirm for d in did) else 0.0
    by = origin + max(budget + watch, window) + deadline.LAST_WORD_S - 0.05
    if any((d.startup_s or 0.0) >= budget + watch for d in did):
        by = max(by, time.monotonic() + RENDER_S)  # a start past the budget (api.triage): draw what was found
    return emit(result, json_out, report, o["save"], by=by)


def check_pids_exist(pids: list[int] | None) -> None:
    """--pid of a process that does not exist is a wrong option (exit 2), not an empty node (issue 35 item 6)."""
    for pid in pids or []:
        if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
            raise BadInput(f"--pid {pid}: no such process here (this node, this PID namespace)")


def pid_not_in_a_deployment(report: Any, pids: list[int]) -> None:
    """--pid of a live process that is part of no vLLM deployment, while deployments run here: say so and name
    them (exit 2), rather than "No vLLM deployment found" (issue 35 item 6). With none here at all, the verdict
    (no deployment, exit 3) is the truth and stands."""
    from vllmdiag.analysis.bisect import analyze

    everything = analyze(list(report.snapshots), None)
    if not everything.deployments:
        return
    deps = [f"pid {d.root_pid} ({_short(d.process(d.root_pid))})" for d in everything.deployments[:8]]
    more = f" and {len(everything.deployments) - 8} more" if len(everything.deployments) > 8 else ""
    given = ", ".join(map(str, pids))
    raise BadInput(f"--pid {given}: not part of any vLLM deployment; {len(everything.deployments)} deployment(s) run "
                   f"here: {', '.join(deps)}{more} (fix: --pid one of those, or no --pid for all)")


def _short(proc: Any) -> str:
    from vllmdiag.render.safe import clean

    title = clean(getattr(proc, "title", "") or "?")  # a process title is untrusted: one plain line
    return title if len(title) <= 48 else title[:47] + "…"


class _confirm_bar:  # noqa: N801 (used as a context manager, reads like a function)
    """A progress bar on stderr while the confirm window looks again, on a terminal only (never in --json
    pipes, logs or CI output); created on the first tick, so the healthy path never imports rich."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> Callable[[float, float], None] | None:
        return self.tick if sys.stderr.isatty() else None

    def tick(self, watched_s: float, window_s: float) -> None:
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self.bar = Progress(TextColumn("work in flight, nothing moved yet: confirming"), BarColumn(),
                                TextColumn("{task.completed:.1f}/{task.total:.0f} s"),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("confirm", total=window_s)
        self.bar.update(self.task, completed=watched_s)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


COMMAND = Command("triage", triage_command, TRIAGE)
