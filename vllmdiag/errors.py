"""Errors in one place: each kind of failure is one typed exception carrying its exit code, and only
the command line (``cli.app._guard``, ``cli.collect.main``) turns one into a message and an exit status.

Libraries raise these; they never print, never exit, and never need to know about typer or click.
"""

from __future__ import annotations

import re

# Exit statuses (README, DESIGN.md): the verdict's, then the tool's own.
EXIT_HEALTHY = 0
EXIT_PROBLEM = 1  # blocked or degraded (gate: a required check failed)
EXIT_USAGE = 2  # bad input: options, files, snapshots, reports, configs, inventories, node sets, rules
EXIT_NO_DEPLOYMENT = 3
EXIT_INCONCLUSIVE = 4  # the tool could not see enough (permissions, timeouts, unreachable targets)
EXIT_INTERRUPTED = 130


_NAMES_OPTION = re.compile(r"(?:^|[\s(`'\"])--?[A-Za-z]")  # `--pid 7: ...`, `-x excludes ...`


class VllmdiagError(Exception):
    """A failure the user gets as one line (``one_line(exc)``: the message, then what to do) and
    ``exit_code``; never a traceback. Every class says its ``fix`` (pystack's help text per error)."""

    exit_code = EXIT_USAGE
    fix = "run the command with --help to see what it takes"


class BadInput(VllmdiagError):
    """Input we will not act on: shown as one line, exit 2. Its fix is said only when the message names an
    option (`--budget must be ...`): under "the simulator is not installed: run ..." an "(fix: correct the
    option ...)" named an option nobody got wrong (issue 35 item 8). Subclasses name their own fix."""

    exit_code = EXIT_USAGE
    fix = "correct the option named above; the command's --help lists what it takes"


class Unreachable(VllmdiagError):
    """Something the command needs could not be reached (a URL, a node, a socket): the answer would be a
    guess, so it is inconclusive (exit 4), with the reason."""

    exit_code = EXIT_INCONCLUSIVE
    fix = "check that the target named above is up and reachable from here (address, port, ssh), then run again"


def one_line(exc: VllmdiagError) -> str:
    """The error line the CLI prints: the message's first line, then " (fix: ...)" unless it already says one."""
    lines = str(exc).splitlines()
    message = lines[0] if lines else type(exc).__name__
    fix = getattr(exc, "fix", "")
    if type(exc).fix is BadInput.fix and not _NAMES_OPTION.search(message):
        fix = ""  # no option is wrong: the message says what is, and what to do
    return message if not fix or "fix:" in message.lower() else f"{message} (fix: {fix})"


def did_you_mean(word: str, choices: list[str] | tuple[str, ...], listing: str) -> str:
    """`did you mean straggler?` for a near miss (difflib, as git and pip do), else where the list is: never
    the whole list of 28 names on one line (issue 35 item 8)."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    ratio = {c: difflib.SequenceMatcher(None, word, c).ratio() for c in close}
    close = [c for c in close if ratio[c] >= ratio[close[0]] - 0.05]  # the near ties only, best first
    return f"did you mean {' or '.join(close)}? ({listing} lists them all)" if close else f"{listing} lists them"
