"""Commands from other distributions, found by the entry point group ``vllmdiag.commands``.

An entry point's name is the command's; its object is a function (one command) or a typer app (a group
of commands). The product names the command, so a plugin can neither take nor shadow one of its own.
Looking them up is bounded and never breaks the product: at most ``MAX_COMMANDS`` entry points are
read, only the one asked for is imported (all of them for the top-level help, where they are listed),
and one that fails to load is one line on stderr and left out, never a traceback.

The simulator (sim/, the ``vllmdiag-sim`` distribution) adds ``demo`` and ``sim`` this way. The product
imports nothing of it and knows only those two names, to say what to install when they are asked for
on a node without it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Collection
from typing import Any

from vllmdiag.errors import BadInput

GROUP = "vllmdiag.commands"
MAX_COMMANDS = 32  # a site with more has installed something that is not a vllmdiag plugin
SIM_COMMANDS = ("demo", "sim")
# The simulator is its own distribution (sim/pyproject.toml): production nodes install none of it.
SIM_INSTALL = "python3 -m pip install dist/vllmdiag_sim-*.whl"  # the release (scripts/build-release)


@functools.cache
def offered() -> tuple[Any, ...]:
    """The group's entry points (read from the installed metadata, nothing imported), first of a name wins."""
    try:
        from importlib.metadata import entry_points

        found = list(entry_points(group=GROUP))
    except Exception as exc:  # an installed distribution's metadata we cannot read: the product still runs
        note(f"commands of other distributions not looked up ({type(exc).__name__}: {exc})")
        return ()
    if len(found) > MAX_COMMANDS:
        note(f"{len(found)} entry points in {GROUP}: only the first {MAX_COMMANDS} are looked at")
    firsts: dict[str, Any] = {}
    for ep in found[:MAX_COMMANDS]:
        firsts.setdefault(ep.name, ep)
    return tuple(firsts.values())


def need_simulator(command: str) -> int:
    """``demo`` and ``sim`` come with the simulator: without it, one line naming the command that adds it."""
    if command in SIM_COMMANDS and not any(ep.name == command for ep in offered()):
        raise BadInput(f"the simulator is not installed (demo and sim need it): run `{SIM_INSTALL}` where the "
                       "release was built (docs/install.md), or `python3 -m pip install ./sim` in a checkout")
    return 0


def add_commands(app: Any, command: str | None, own: Collection[str]) -> None:
    """Add the plugins' commands to ``app``: the one named ``command``, or all (``None``: the help lists them).
    ``own`` are the product's commands: asked for, nothing is looked up; offered, the plugin's is left out."""
    if command in own:
        return
    for ep in offered():
        if command not in (None, ep.name):
            continue
        if ep.name in own:
            note(f"the `{ep.name}` command of {_source(ep)} is left out: vllmdiag has its own")
            continue
        try:
            install(app, ep.name, ep.load())
        except Exception as exc:  # its import or its declaration failed: the product's commands stand
            note(f"the `{ep.name}` command of {_source(ep)} did not load: {type(exc).__name__}: {exc}")


def install(app: Any, name: str, obj: Any) -> None:
    """Add one command or group, converted once first so that a bad declaration fails here, not in the help."""
    import typer
    from typer.main import get_command

    if isinstance(obj, typer.Typer):
        get_command(obj)
        app.add_typer(obj, name=name)
    elif callable(obj):
        trial = typer.Typer()
        trial.command(name)(obj)
        get_command(trial)
        app.command(name)(obj)
    else:
        raise TypeError(f"{type(obj).__name__} is neither a command function nor a typer app")


def _source(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} ({ep.value})" if dist is not None else ep.value


def note(message: str) -> None:
    from vllmdiag.render.safe import clean

    # Names and messages come from installed metadata: one plain line, no control sequence.
    sys.stderr.write(f"vllmdiag: {clean(message.splitlines()[0] if message else '')}\n")
