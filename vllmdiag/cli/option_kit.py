"""What the option table (cli/options.py) is made of, and the readers built from it.

An ``Option`` is declared once, with its check; a ``Group`` is options that go together (ClusterShell's
``install_nodes_options``, ``install_ssh_options``: one declaration for every door that takes them); a
command's options are the groups it installs plus its own (``command``). typer's commands, the collector's
argparse door and the fast triage path are built from those tuples (``typer_command``, ``add_to_parser``,
``fast_flags``/``fast_values``), help text included.

Importing this module imports neither typer nor argparse: each reader is built when it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import argparse

REQUIRED: Any = ...  # the default of an argument that must be given (typer: no default at all)


class Option(NamedTuple):  # not a dataclass: dataclasses (with inspect) would cost the fast path ~8 ms
    names: tuple[str, ...]  # as typed: ("-v", "--verbose"); () for a positional argument
    param: str  # the command's keyword
    kind: type  # bool: a flag; else the value's type (int, float, str, Path)
    help: str
    default: Any = None
    many: bool = False  # repeatable: a list of values
    metavar: str | None = None
    hidden: bool = False  # read but not listed in --help (a deprecated spelling)
    limits: tuple[float, float] | None = None  # the value's range, both ends allowed (None: not given, never checked)
    unit: str = ""  # said after the range: " seconds"
    why: str | None = None  # the message when out of range, where one line speaks for two options

    @property
    def flag(self) -> bool:
        return self.kind is bool

    def but(self, **changes: Any) -> Option:
        return self._replace(**changes)

    def check(self, value: Any) -> Any:
        """The value, or BadInput (one line, exit 2) when it is out of this option's range."""
        if self.limits is None or value is None:
            return value
        low, high = self.limits
        if not low <= value <= high:
            from vllmdiag.errors import BadInput

            raise BadInput(self.why or f"{self.names[-1]} must be between {low:g} and {high:g}{self.unit}")
        return value


class Group(NamedTuple):
    """Options a command installs together; ``only`` and ``but`` fit them to one command (its help words)."""

    name: str
    options: tuple[Option, ...]

    def only(self, *params: str) -> Group:
        missing = set(params) - {o.param for o in self.options}
        if missing:
            raise TypeError(f"group {self.name} has no {', '.join(sorted(missing))}")
        return self._replace(options=tuple(o for o in self.options if o.param in params))

    def but(self, **changes: str | Mapping[str, Any]) -> Group:
        """Per parameter: a new help text (a str), or the fields to change (a mapping)."""
        by = {o.param: o for o in self.options}
        for param, change in changes.items():
            fields = {"help": change} if isinstance(change, str) else dict(change)
            by[param] = by[param].but(**fields)
        return self._replace(options=tuple(by.values()))


def command(*parts: Group | Option, order: str) -> tuple[Option, ...]:
    """A command's options: the groups it installs and its own options, in ``order`` (parameter names: the
    order --help lists them in, kept as users know it). Each is listed exactly once, or this raises on import."""
    installed = [o for p in parts for o in (p.options if isinstance(p, Group) else (p,))]
    by = {o.param: o for o in installed}
    names = order.split()
    if len(by) != len(installed) or sorted(names) != sorted(by):
        raise TypeError(f"order {order!r} must name each installed option once: {', '.join(sorted(by))}")
    return tuple(by[n] for n in names)


def check(options: Iterable[Option], values: Mapping[str, Any]) -> None:
    """Every option's own check, in the command's order: the first value out of range is the one line said."""
    for o in options:
        if o.limits is not None:
            o.check(values.get(o.param))


def with_defaults(options: Iterable[Option], given: dict[str, Any]) -> dict[str, Any]:
    """Every parameter of a command: those given, the table's defaults for the rest."""
    out = {o.param: o.default for o in options if o.default is not REQUIRED}
    unknown = set(given) - {o.param for o in options}
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
