"""``vllmdiag collect``: the node-side entry point, on argparse so it runs with only psutil/pyzmq.

Sweeps run it on every node (installed, or shipped as a zipapp with the vLLM environment's own
Python), so it must not import typer or rich, and it imports nothing it does not use.
"""

from __future__ import annotations

import argparse
import os
import sys

from vllmdiag import __version__
from vllmdiag.cli.options import COLLECT, add_to_parser, check
from vllmdiag.errors import EXIT_USAGE, BadInput, VllmdiagError, one_line
from vllmdiag.model import strict_json


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"vllmdiag collect: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vllmdiag collect", description="Collect a read-only snapshot of this node's vLLM processes.")
    add_to_parser(p, COLLECT)  # the one option table (cli/options.py); typer's `collect --help` reads it too
    p.add_argument("--version", action="version", version=__version__)
    return p


def _say_confirming(until: float) -> None:
    from vllmdiag.runtime import lastword
    from vllmdiag.runtime.deadline import CONFIRMING

    lastword.postpone(until)  # the window is part of the promise: a starved collect's timer moves with it
    sys.stderr.write(CONFIRMING + "\n")
    sys.stderr.flush()


def main(argv: list[str]) -> int:
    from vllmdiag.runtime.lastword import process_start
    from vllmdiag.runtime.priority import boost

    origin = process_start()  # the budget is the whole command's: interpreter start included
    boost("--no-boost" not in argv)  # before any thread (vllmdiag/runtime/priority.py: why it cannot hurt the target)
    args = build_parser().parse_args(argv)
    try:
        check(COLLECT, vars(args))  # each option's range, as the table declares it
    except BadInput as exc:  # the bare line, as argparse's own errors (no "fix:"): a sweep shows it per node
        sys.stderr.write(f"vllmdiag collect: {exc}\n")
        return EXIT_USAGE
    missing = [pid for pid in args.pid or [] if pid <= 0 or not os.path.exists(f"/proc/{pid}")]
    if missing:  # a wrong --pid is a wrong option, not an empty node (issue 35 item 6)
        sys.stderr.write(f"vllmdiag collect: --pid {missing[0]}: no such process here (this node, this PID namespace)\n")
        return EXIT_USAGE
    from vllmdiag.api import collect_confirmed as collect
    from vllmdiag.registry import opt_in
    from vllmdiag.runtime.options import collect_options
    from vllmdiag.runtime.run import Run

    run = Run(budget_s=args.budget, confirm_s=args.confirm, origin=origin)  # the command's time, built once

    try:
        options = collect_options(native=args.native, nonblocking=args.nonblocking, nccl_ras=args.nccl_ras,
                                  preflight=args.preflight, enable=opt_in(args.enable or []), pids=args.pid,
                                  node=args.node, no_boost=args.no_boost)
        snap = collect(probes=args.probe, options=options, run=run, on_window=lambda: _say_confirming(run.window_end()))
    except VllmdiagError as exc:  # an unknown --probe, ...: one line and its exit code
        sys.stderr.write(f"vllmdiag collect: {one_line(exc)}\n")
        return exc.exit_code
    text = strict_json.dumps(snap.to_dict(), default=str)
    from vllmdiag.runtime import lastword

    lastword.spoken()  # the snapshot is made: from here on a starved collect's timer stands down
    if args.json_out or not args.out:
        sys.stdout.write(text + "\n")
    if args.out:
        from vllmdiag.files.outfile import OutputError, write_output

        try:
            write_output(args.out, text + "\n", "--out")
        except OutputError as exc:
            sys.stdout.flush()
            sys.stderr.write(f"vllmdiag collect: {one_line(exc)}\n")
            return exc.exit_code
    return 0
