"""``python -m vllmdiag`` and the ``vllmdiag`` command (scripts/vllmdiag): the first code that runs.

On a node whose every core is busy, what runs before the tool raises its own priority runs at the
mercy of the spinning threads, so it is only this: the priority (vllmdiag/runtime/priority.py says why it
cannot hurt the target), a triage's last word where it could not take that priority
(vllmdiag/runtime/lastword.py), then the CLI. And once a command that looks at a node has said its
verdict, the process ends at once: the interpreter's teardown (freeing every module and object,
~35 ms) is time the on-call engineer would wait for nothing."""

import os
import sys

from vllmdiag.runtime import lastword
from vllmdiag.runtime.priority import LOOKING, boost_first, realtime


def main() -> None:
    argv = sys.argv[1:]
    boost_first(argv)
    if not realtime():  # at full speed the command's own guards hold; starved, only a timer armed now can
        lastword.arm(argv)
    from vllmdiag.cli.app import main as run

    try:
        run()
    except SystemExit as done:
        if argv[:1] and argv[0] in LOOKING and (done.code is None or isinstance(done.code, int)):
            _exit_now(done.code or 0)
        raise


def _exit_now(code: int) -> None:
    """Everything was written and closed by the command (reports, snapshots, the collector reaped);
    what is left in our own buffers goes out, then no teardown."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away: the exit code still says the verdict
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
