"""The command line. Thin: typer commands call plain functions in vllmdiag.api (and friends);
only this module maps errors to one-line messages and exit codes.

Exit codes: 0 healthy, 1 blocked or degraded (gate: a required check failed), 2 usage error or bad
input, 3 no vLLM deployment found, 4 inconclusive (the tool could not see enough).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from vllmdiag import __version__
from vllmdiag.cli.options import ANALYZE, COLLECT, TRIAGE, check, with_defaults
from vllmdiag.cli.plugins import add_commands, need_simulator
from vllmdiag.cli.shared import arg as _arg
from vllmdiag.cli.shared import emit, typer_command
from vllmdiag.cli.shared import opt as _opt
from vllmdiag.errors import EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_USAGE, BadInput, VllmdiagError, one_line

F = TypeVar("F", bound=Callable[..., Any])


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    # First, before any thread: the commands that look at a node take CPU on a saturated one (a no-op when
    # vllmdiag/__main__.py did it already; vllmdiag/runtime/priority.py says why this cannot hurt the target).
    from vllmdiag.runtime.priority import boost_first

    boost_first(argv)
    if argv[:1] == ["collect"] and not {"-h", "--help"} & set(argv[1:]):
        # Fast path without typer/rich: collect is what every node of a sweep runs.
        from vllmdiag.cli.collect import main as collect_main

        raise SystemExit(_guard(lambda: collect_main(argv[1:])))
    if argv[:1] == ["triage"]:
        # Fast path without typer (~27 ms): the plain command lines of the command every on-call runs.
        from vllmdiag.cli.fast_triage import triage_kwargs

        kwargs = triage_kwargs(argv[1:])
        if kwargs is not None:
            raise SystemExit(_guard(lambda: triage_command(**kwargs)))
    if argv[:1] in (["demo"], ["sim"]) and _guard(lambda: need_simulator(argv[0])):
        raise SystemExit(EXIT_USAGE)
    app = build_app(argv)
    raise SystemExit(_guard(lambda: app(args=argv, prog_name="vllmdiag", standalone_mode=False) or 0))


# Commands of other distributions (the simulator's demo and sim: cli/plugins.py) never take these names.
OWN_COMMANDS = ("triage", "analyze", "collect", "playbook", "sweep", "gate", "watch")


def _click_exceptions() -> list[Any]:
    """Recent typer vendors click as typer._click; older ones use click itself. Accept both."""
    mods = []
    for name in ("typer.exceptions", "typer._click.exceptions", "click.exceptions"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            continue
    return mods


def _guard(fn: Callable[[], Any]) -> int:
    """Run a command; map every error to one line and an exit code (never a traceback).

    Exception classes of typer/click are looked up only when something was raised, so the
    collect fast path never imports them."""
    try:
        rc = fn()
        return int(rc) if isinstance(rc, int) else 0
    except VllmdiagError as exc:  # bad input (snapshots, rules, playbooks, options, files), unreachable, ...
        return _fail(one_line(exc), exc.exit_code)
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        return 0
    except Exception as exc:
        ex = _click_exceptions()
        if isinstance(exc, tuple(m.Exit for m in ex if hasattr(m, "Exit"))):
            return int(getattr(exc, "exit_code", 0))
        if isinstance(exc, tuple(m.ClickException for m in ex if hasattr(m, "ClickException"))):
            exc.show()  # type: ignore[attr-defined]
            return EXIT_USAGE
        if isinstance(exc, tuple(m.Abort for m in ex if hasattr(m, "Abort"))):
            return _fail("aborted", EXIT_INTERRUPTED)
        if os.environ.get("VLLMDIAG_DEBUG"):
            raise
        # The last line of defence: the on-call engineer gets one line, not a traceback.
        return _fail(f"internal error: {type(exc).__name__}: {exc} (set VLLMDIAG_DEBUG=1 for a traceback)",
                     EXIT_INCONCLUSIVE)


def _fail(message: str, code: int) -> int:
    from vllmdiag.render.safe import clean

    # Messages quote input (file names, node names, snapshot values): no control sequence gets out.
    sys.stderr.write(f"vllmdiag: {clean(message.splitlines()[0]) if message else 'error'}\n")
    return code


def build_app(argv: list[str] | None = None) -> Any:
    import typer

    # -h as well as --help, on every command and subcommand (click's contexts inherit it): the habit of
    # kubectl, clush and py-spy users.
    app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      context_settings={"help_option_names": ["-h", "--help"]},
                      help="Read-only diagnostics for hung vLLM deployments.")

    @app.callback(invoke_without_command=True)
    def _root(version: Annotated[bool, _opt("--version", help="print the version")] = False) -> None:
        if version:
            print(__version__)
            raise typer.Exit(0)

    app.command("triage")(typer_command(triage_command, TRIAGE))
    app.command("analyze")(typer_command(analyze_command, ANALYZE))
    # collect runs on argparse (cli/collect.py: every node, typer or not); typer shows its help from the table.
    app.command("collect")(typer_command(_collect_passthrough, COLLECT))
    app.command("playbook")(playbook_command)
    # Here, so the help lists them where `demo` always stood; imported only when asked for or listed.
    add_commands(app, next((a for a in argv or [] if not a.startswith("-")), None), OWN_COMMANDS)
    for module, attr in (("vllmdiag.cli.sweep_command", "register"),
                         ("vllmdiag.cli.gate_command", "register"),
                         ("vllmdiag.cli.watch_command", "register")):
        try:
            register = getattr(importlib.import_module(module), attr)
        except (ModuleNotFoundError, AttributeError):
            continue
        register(app)
    return app


def _collect_passthrough(**given: Any) -> int:
    """Collect a read-only snapshot (JSON) of this node's vLLM processes."""
    from vllmdiag.cli.collect import main as collect_main

    return collect_main(sys.argv[2:])


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
    _check_report_name(report)
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

    _verbose(o["verbose"])
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


def _verbose(on: bool) -> None:
    """-v: every row of every section in the terminal view (the default folds what is fine)."""
    if on:
        from vllmdiag.render import text

        text.VERBOSE = True


class _confirm_bar:  # noqa: N801 (used as a context manager, reads like a function)
    """A progress bar on stderr while the confirm window watches, on a terminal only (never in --json
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

            self.bar = Progress(TextColumn("work in flight, nothing moved yet: watching"), BarColumn(),
                                TextColumn("{task.completed:.1f}/{task.total:.0f} s"),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("confirm", total=window_s)
        self.bar.update(self.task, completed=watched_s)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


def analyze_command(**given: Any) -> int:
    """Recompute the verdict offline from saved snapshots, or draw a saved --json report again."""
    from vllmdiag.api import analyze_files

    o = with_defaults(ANALYZE, given)  # the options as declared in cli/options.py (typer passes them all)
    files, json_out, report, pid, verbose = o["files"], o["json_out"], o["report"], o["pid"], o["verbose"]
    _verbose(verbose)
    _check_report_name(report)
    from vllmdiag.model import SnapshotError

    try:
        result = analyze_files(files, pid)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        # Snapshots are untrusted: a well-formed file with the wrong content inside is bad input.
        raise SnapshotError(f"snapshot content is malformed ({type(exc).__name__}: {exc})") from None
    return emit(result, json_out, report)


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


def _check_report_name(report: Path | None) -> None:
    if report is not None and report.suffix.lower() not in (".html", ".htm", ".md"):
        raise BadInput(f"--report {report}: use a .html or .md file name")
