"""What every typer command of the face shares: ``typer_command`` (a command's signature and help from the
option table, cli/options.py), ``Command`` (what a cli/<name>_command.py module declares as ``COMMAND``: cli/app.py
finds it), the plain option/argument helpers (the simulator's commands use them) and ``emit`` (print a result as
JSON or the rich view, write --save/--report files, return the exit code).
The commands live in cli/*_command.py; they import this, never each other."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from vllmdiag.cli.options import Option


class Command(NamedTuple):  # not a dataclass: the triage fast path loads this module (cli/options.py says why)
    """One of the product's commands, declared as ``COMMAND`` in its own module ``cli/<name>_command.py``.

    ``run`` is called with every parameter typer read; its docstring is the command's help. ``options``: the
    rows (and so the option groups) of the table in cli/options.py the command installs, typer's signature and
    help built from them; ``None``: ``run`` declares its typer parameters itself."""

    name: str
    run: Callable[..., Any]
    options: tuple[Option, ...] | None = None

    def install(self, app: Any) -> None:
        app.command(self.name)(self.run if self.options is None else typer_command(self.run, self.options))


def verbose(on: bool) -> None:
    """-v: every row of every section in the terminal view (the default folds what is fine)."""
    if on:
        from vllmdiag.render import text

        text.VERBOSE = True


def check_report_name(report: Path | None) -> None:
    from vllmdiag.errors import BadInput

    if report is not None and report.suffix.lower() not in (".html", ".htm", ".md"):
        raise BadInput(f"--report {report}: use a .html or .md file name")


def opt(*names: str, help: str, hidden: bool = False) -> Any:
    import typer

    return typer.Option(*names, help=help, hidden=hidden)


def arg(help: str) -> Any:
    import typer

    return typer.Argument(help=help, show_default=False)


def typer_command(fn: Callable[..., Any], options: Iterable[Option]) -> Callable[..., Any]:
    """``fn(**every_parameter)`` as typer sees a command: its signature and help from the table."""
    import functools
    import inspect

    from vllmdiag.cli.options import REQUIRED

    params, annotations = [], {}
    for o in options:
        annotation = _annotation(o)
        default = inspect.Parameter.empty if o.default is REQUIRED else o.default
        params.append(inspect.Parameter(o.param, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=annotation))
        annotations[o.param] = annotation

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        return fn(**kwargs)

    command.__signature__ = inspect.Signature(params, return_annotation=int)  # type: ignore[attr-defined]
    command.__annotations__ = {**annotations, "return": int}
    return command


def _annotation(o: Option) -> Any:
    from typing import Annotated

    import typer

    kind: Any = o.kind
    if o.many:
        kind = list[kind]
    if o.default is None:
        kind = kind | None
    if not o.names:  # a positional argument
        return Annotated[kind, typer.Argument(help=o.help, show_default=False)]
    return Annotated[kind, typer.Option(*o.names, help=o.help, metavar=o.metavar, hidden=o.hidden)]


def emit(result: Any, as_json: bool, report_file: Path | None, save: Path | None = None,
         by: float | None = None) -> int:
    """Print a triage/analyze/sweep result (JSON or rich), write --save/--report files, return the exit code.

    The verdict is printed first: a file that cannot be written (a directory, a full disk, a
    symlink we refuse to follow) is one line and exit 2 after it, never a lost verdict. ``by``
    (monotonic): a view not drawn by then gives way to the verdict's one plain line (a starved node)."""
    from vllmdiag.runtime import lastword
    from vllmdiag.runtime.deadline import BudgetSpent, guard

    lastword.spoken()  # what is written from here on is the verdict: the starved command's timer stands down
    from vllmdiag.playbooks.playbook import aim_report

    aim_report(result.report)  # next steps that read /metrics aim at this deployment's API server (issue 35 item 3)
    if as_json:
        try:
            with guard(by):
                text = result.to_json()
        except BudgetSpent:  # the verdict alone, still the JSON contract's shape
            import json

            text = json.dumps({"schema_version": 1, "verdict": result.report.verdict.to_dict(), "cut": "the budget "
                               "ran out while writing the full report; a larger --budget gives all of it"})
        sys.stdout.write(text + "\n")
    else:
        try:
            with guard(by):
                from vllmdiag.render.screen import draw

                draw(result.report)
        except BudgetSpent:
            from vllmdiag.render.safe import clean

            v = result.report.verdict
            sys.stdout.write(f"\nvllmdiag: {clean(v.status)}: {clean(v.summary)} (the full view was cut: the budget "
                             "ran out while drawing it; --json or a larger --budget shows all)\n")
    from vllmdiag.files.outfile import OutputError, write_output

    errors: list[OutputError] = []
    if save is not None:

        from vllmdiag.model import strict_json

        snaps = result.report.snapshots
        payload = snaps[0].to_dict() if len(snaps) == 1 else {"snapshots": [s.to_dict() for s in snaps]}
        try:
            write_output(save, strict_json.dumps(payload, default=str) + "\n", "--save")
        except OutputError as exc:
            errors.append(exc)
    if report_file is not None:
        from vllmdiag.render.files import report_text

        try:
            write_output(report_file, report_text(result.report, report_file), "--report")
        except OutputError as exc:
            errors.append(exc)
    if errors:
        sys.stdout.flush()
        raise errors[0]
    return int(result.exit_code)
