"""The command line. Thin: typer commands call plain functions in vllmdiag.api (and friends);
only this module maps errors to one-line messages and exit codes.

Each of the product's commands declares itself where it lives: ``COMMAND`` (cli/shared.py's ``Command``) in
``cli/<name>_command.py``; ``build_app`` finds them (one file is one command), lists them in ``HELP_ORDER``
and adds the plugins' (cli/plugins.py) where ``PLUGINS`` stands.

Exit codes: 0 healthy, 1 blocked or degraded (gate: a required check failed), 2 usage error or bad
input, 3 no vLLM deployment found, 4 inconclusive (the tool could not see enough).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Annotated, Any, TypeVar

from vllmdiag import __version__
from vllmdiag.cli.shared import Command
from vllmdiag.cli.shared import opt as _opt
from vllmdiag.errors import EXIT_INCONCLUSIVE, EXIT_INTERRUPTED, EXIT_USAGE, VllmdiagError, one_line

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
            from vllmdiag.cli.triage_command import triage_command

            raise SystemExit(_guard(lambda: triage_command(**kwargs)))
    if argv[:1] in (["demo"], ["sim"]):
        from vllmdiag.cli.plugins import need_simulator

        if _guard(lambda: need_simulator(argv[0])):
            raise SystemExit(EXIT_USAGE)
    app = build_app(argv)
    raise SystemExit(_guard(lambda: app(args=argv, prog_name="vllmdiag", standalone_mode=False) or 0))


COMMANDS = "vllmdiag.cli"  # the package whose <name>_command modules are the product's commands
SUFFIX = "_command"
PLUGINS = "(plugins)"  # where the help lists the commands of other distributions (the simulator's demo, sim)
# The help's order, as it always was; a command found but not named here comes after these, in name order.
HELP_ORDER = ("triage", "analyze", "collect", "playbook", PLUGINS, "sweep", "gate", "watch")
# Commands of other distributions never take these names (nor that of any command found).
OWN_COMMANDS = tuple(name for name in HELP_ORDER if name != PLUGINS)


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


def build_app(argv: list[str] | None = None, package: str = COMMANDS) -> Any:
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

    asked = next((a for a in argv or [] if not a.startswith("-")), None)
    # Only a command that is the first word runs alone (`-h triage` is the top-level help: all of them).
    own = own_commands(asked if argv and argv[0] == asked else None, package)
    for name in help_order(own):
        if name == PLUGINS:  # imported only when asked for or listed
            from vllmdiag.cli.plugins import add_commands

            add_commands(app, asked, (*OWN_COMMANDS, *own))
        else:
            own[name].install(app)
    return app


def own_commands(asked: str | None, package: str = COMMANDS) -> dict[str, Command]:
    """The product's commands by name: only the one asked for when it is one (its module alone is imported),
    else every ``<name>_command`` module of ``package`` (the top-level help lists them all)."""
    module = _command_module(package, asked) if asked else None
    if module is not None:
        modules = [module]
    else:
        from vllmdiag.registry import discover_modules

        modules = discover_modules(package, SUFFIX)
    found: dict[str, Command] = {}
    for module in modules:
        command = getattr(module, "COMMAND", None)
        short = module.__name__.rsplit(".", 1)[1]
        # The file names the command: asked for by name, only that file need be read.
        if not isinstance(command, Command) or f"{command.name}{SUFFIX}" != short:
            raise TypeError(f"{module.__name__}: COMMAND must be a cli.shared.Command named {short[:-len(SUFFIX)]!r}")
        found[command.name] = command
    return found


def _command_module(package: str, name: str) -> ModuleType | None:
    if not name.isidentifier() or name.startswith("_"):
        return None  # not a command's name (a file, a typo): typer says so, with every command found
    import importlib.util

    if importlib.util.find_spec(f"{package}.{name}{SUFFIX}") is None:
        return None
    return importlib.import_module(f"{package}.{name}{SUFFIX}")


def help_order(own: dict[str, Command]) -> list[str]:
    """``HELP_ORDER``'s names of the commands found (and the plugins' place), then the others in name order."""
    named = [name for name in HELP_ORDER if name in own or name == PLUGINS]
    return named + sorted(set(own) - set(named))
