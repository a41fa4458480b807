"""``vllmdiag triage`` without typer: the common command lines, read here, call the same command.

Importing typer (with its vendored click) costs ~27 ms of a ~0.5 s triage, and every on-call run
is a triage. This reads only plain shapes of the options in ``options.TRIAGE`` (the one table typer's
command is built from too: tests/unit/test_cli_fast.py checks that both readings give the same call).
Anything else -- --help, an unknown or misspelt option, a value typer would reject or read differently
(missing, empty, starting with '-') -- returns None and typer reads the line as always, with its messages.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.cli.options import TRIAGE, fast_flags, fast_values

FLAGS = fast_flags(TRIAGE)
VALUES = fast_values(TRIAGE)  # option -> (parameter, type, repeatable)


def triage_kwargs(args: list[str]) -> dict[str, Any] | None:
    """Keyword arguments for ``triage_command`` (only those given), or None: let typer read it."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        name, eq, inline = args[i].partition("=")
        if name in FLAGS and not eq:
            out[FLAGS[name]] = True
            i += 1
            continue
        if name not in VALUES:
            return None
        param, kind, many = VALUES[name]
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(args):
            value, i = args[i + 1], i + 2
        else:
            return None
        if not value or value.startswith("-") or value != value.strip():
            return None
        try:
            converted = kind(value)
        except ValueError:
            return None
        if many:
            out.setdefault(param, []).append(converted)
        else:
            out[param] = converted
    return out
