"""Errors in one place: each kind of failure is one typed exception carrying its exit code, and only
the command line (``cli.app._guard``, ``cli.collect.main``) turns one into a message and an exit status.

Libraries raise these; they never print, never exit, and never need to know about typer or click.
"""

from __future__ import annotations

# Exit statuses (README, DESIGN.md): the verdict's, then the tool's own.
EXIT_HEALTHY = 0
EXIT_PROBLEM = 1  # blocked or degraded (gate: a required check failed)
EXIT_USAGE = 2  # bad input: options, files, snapshots, reports, configs, inventories, node sets, rules
EXIT_NO_DEPLOYMENT = 3
EXIT_INCONCLUSIVE = 4  # the tool could not see enough (permissions, timeouts, unreachable targets)
EXIT_INTERRUPTED = 130


class VllmdiagError(Exception):
    """A failure the user gets as one line (``str(exc)``) and ``exit_code``; never a traceback."""

    exit_code = EXIT_USAGE


class BadInput(VllmdiagError):
    """Input we will not act on: shown as one line, exit 2."""

    exit_code = EXIT_USAGE


class Unreachable(VllmdiagError):
    """Something the command needs could not be reached (a URL, a node, a socket): the answer would be a
    guess, so it is inconclusive (exit 4), with the reason."""

    exit_code = EXIT_INCONCLUSIVE
