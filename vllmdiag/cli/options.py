"""The one table of command-line options for ``triage`` and ``collect``: typer's commands, the collector's
argparse door (a shipped node has no typer) and the fast triage path are all built from it, help text
included, so an option is declared once (tests/test_cli_fast.py holds the three readings to one).

Importing this module imports neither typer nor argparse: each reader is built when it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import argparse


class Option(NamedTuple):  # not a dataclass: dataclasses (with inspect) would cost the fast path ~8 ms
    names: tuple[str, ...]  # as typed: ("-v", "--verbose")
    param: str  # the command's keyword
    kind: type  # bool: a flag; else the value's type (int, float, str, Path)
    help: str
    default: Any = None
    many: bool = False  # repeatable: a list of values
    metavar: str | None = None
    hidden: bool = False  # read but not listed in --help (a deprecated spelling)

    @property
    def flag(self) -> bool:
        return self.kind is bool

    def but(self, **changes: Any) -> Option:
        return self._replace(**changes)


JSON = Option(("--json",), "json_out", bool, "print the JSON contract instead of the rich view", False)
SAVE = Option(("--save",), "save", Path, "also write the raw snapshot to this file")
REPORT = Option(("--report",), "report", Path, "write a self-contained .html or .md report")
# -p as py-spy spells it (issue 35 item 10).
PID = Option(("-p", "--pid"), "pid", int, "only the deployment(s) containing this pid (repeatable; -p as py-spy)",
             many=True, metavar="PID")
PROBE = Option(("--probe",), "probe", str, "run only these probes (repeatable)", many=True)
BUDGET = Option(("--budget",), "budget", float, "seconds for the whole command, from its start (interpreter and "
                "imports included) to the verdict printed; partial results, never late", 8.0, metavar="S")
NATIVE = Option(("--native",), "native", bool, "py-spy --native (C/CUDA frames)", False)
NONBLOCKING = Option(("--nonblocking",), "nonblocking", bool, "py-spy --nonblocking (never pauses a target)", False)
NCCL_RAS = Option(("--nccl-ras",), "nccl_ras", bool, "ask NCCL's RAS service once (NCCL >= 2.24)", False)
PROBE_REQUEST = Option(("--probe-request",), "probe_request", bool, "send one 1-token completion to the API", False)
ENABLE = Option(("--enable",), "enable", str, "turn on an opt-in probe by name (repeatable; e.g. nccl_ras, preflight)",
                many=True, metavar="PROBE")
RATES = Option(("--rates",), "rates", float, "observe this many seconds and report rates (rings, tokens/s); "
               "the resident watcher is `vllmdiag watch`", 0.0, metavar="S")
# The old name, easily taken for `vllmdiag watch`: still read, says once on stderr that it is --rates now.
WATCH = Option(("--watch",), "watch", float, "deprecated spelling of --rates", 0.0, hidden=True)
CONFIRM = Option(("--confirm",), "confirm", float, "when work is in flight and nothing moved, keep watching up to "
                 "this many seconds before calling it a hang (0 = off)", 10.0, metavar="S")
VERBOSE = Option(("-v", "--verbose"), "verbose", bool, "show every row (healthy ones are folded by default)", False)
NO_BOOST = Option(("--no-boost",), "no_boost", bool, "keep normal scheduling priority (default as root: SCHED_FIFO "
                  "for the command's short life; VLLMDIAG_BOOST=0 too)", False)

TRIAGE: tuple[Option, ...] = (JSON, SAVE, REPORT, PID, PROBE, BUDGET, NATIVE, NONBLOCKING, NCCL_RAS, PROBE_REQUEST,
                              ENABLE, RATES, WATCH, CONFIRM, VERBOSE, NO_BOOST)
COLLECT: tuple[Option, ...] = (
    JSON.but(help="print the snapshot as JSON (default when --out is not given)"),
    Option(("--out",), "out", Path, "write the snapshot to this file"),
    PROBE, BUDGET.but(help="seconds for the whole command, from its start (interpreter and imports included) to the "
                      "snapshot written; partial results, never late"),
    PID.but(help="limit stacks/rings to these deployments (repeatable; -p as py-spy)"), NATIVE, NONBLOCKING, NCCL_RAS,
    Option(("--preflight",), "preflight", bool, "also collect the gate's preflight facts", False),
    # collect's own default is 0 (one quick look): a sweep passes its --confirm (default 10) to each node.
    ENABLE, CONFIRM.but(default=0.0, help="when work is in flight and nothing moved, keep watching up to S seconds "
                        "(0 = off, collect's default: one quick look; `sweep --confirm`, default 10, passes its own)"),
    Option(("--node",), "node", str, "node name to record (default: hostname)"),
    NO_BOOST.but(help="keep normal scheduling priority (default as root: SCHED_FIFO for the collection's short life)"),
)


def with_defaults(options: Iterable[Option], given: dict[str, Any]) -> dict[str, Any]:
    """Every parameter of a command: those given, the table's defaults for the rest."""
    out = {o.param: o.default for o in options}
    unknown = set(given) - set(out)
    if unknown:
        raise TypeError(f"unknown option parameter(s): {', '.join(sorted(unknown))}")
    return {**out, **given}


# ---- the fast path: which words it reads (anything else goes to typer) --------------------------------
def fast_flags(options: Iterable[Option]) -> dict[str, str]:
    """option word -> parameter, for the flags."""
    return {name: o.param for o in options if o.flag for name in o.names}


def fast_values(options: Iterable[Option]) -> dict[str, tuple[str, type, bool]]:
    """option word -> (parameter, type, repeatable), for the options that take a value."""
    return {name: (o.param, o.kind, o.many) for o in options if not o.flag for name in o.names}


# ---- typer ----------------------------------------------------------------------------------------
def typer_command(fn: Callable[..., Any], options: Iterable[Option]) -> Callable[..., Any]:
    """``fn(**every_parameter)`` as typer sees a command: its signature and help from the table."""
    import functools
    import inspect
    from typing import Annotated

    import typer

    params, annotations = [], {}
    for o in options:
        kind: Any = o.kind
        if o.many:
            kind = list[kind] | None
        elif o.default is None:
            kind = kind | None
        annotation = Annotated[kind, typer.Option(*o.names, help=o.help, metavar=o.metavar,
                                                           hidden=o.hidden)]
        params.append(inspect.Parameter(o.param, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                                        annotation=annotation))
        annotations[o.param] = annotation

    @functools.wraps(fn)
    def command(**kwargs: Any) -> Any:
        return fn(**kwargs)

    command.__signature__ = inspect.Signature(params, return_annotation=int)  # type: ignore[attr-defined]
    command.__annotations__ = {**annotations, "return": int}
    return command


# ---- argparse (the collector's door: every node runs it, typer or not) --------------------------------
def add_to_parser(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    for o in options:
        if o.flag:
            parser.add_argument(*o.names, dest=o.param, action="store_true", help=_help(o))
        elif o.many:
            parser.add_argument(*o.names, dest=o.param, type=o.kind, action="append", metavar=o.metavar,
                                help=_help(o))
        else:
            parser.add_argument(*o.names, dest=o.param, type=o.kind, default=o.default, metavar=o.metavar,
                                help=_help(o))


def _help(o: Option) -> str:
    import argparse

    return argparse.SUPPRESS if o.hidden else o.help
