"""``vllmdiag triage`` without typer: the common command lines, read here, call the same command.

Importing typer (with its vendored click) costs ~27 ms of a ~0.5 s triage, and every on-call run
is a triage. This reads only plain shapes: the options ``triage_command`` declares (``cli.py``
stays the one declaration: tests/test_cli_fast.py checks every name here against typer's command
and that both readings give the same call). Anything else -- --help, an unknown or misspelt option,
a value typer would reject or read differently (missing, empty, starting with '-') -- returns None
and typer reads the line as always, with its messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FLAGS = {"--json": "json_out", "--native": "native", "--nonblocking": "nonblocking", "--nccl-ras": "nccl_ras",
         "--probe-request": "probe_request", "-v": "verbose", "--verbose": "verbose",
         "--no-boost": "no_boost"}
# option -> (parameter, type, repeatable)
VALUES: dict[str, tuple[str, type, bool]] = {
    "--pid": ("pid", int, True), "--probe": ("probe", str, True), "--enable": ("enable", str, True),
    "--budget": ("budget", float, False), "--watch": ("watch", float, False), "--confirm": ("confirm", float, False),
    "--save": ("save", Path, False), "--report": ("report", Path, False)}


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
