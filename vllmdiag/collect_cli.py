"""``vllmdiag collect``: the node-side entry point, on argparse so it runs with only psutil/pyzmq.

Sweeps run it on every node (installed, or shipped as a zipapp with the vLLM environment's own
Python), so it must not import typer or rich, and it imports nothing it does not use.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vllmdiag import __version__
from vllmdiag.errors import EXIT_USAGE, VllmdiagError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"vllmdiag collect: {message}\n")
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vllmdiag collect", description="Collect a read-only snapshot of this node's vLLM processes.")
    p.add_argument("--json", action="store_true", help="print the snapshot as JSON (default when --out is not given)")
    p.add_argument("--out", type=Path, help="write the snapshot to this file")
    p.add_argument("--probe", action="append", dest="probes", help="run only these probes (repeatable)")
    p.add_argument("--budget", type=float, default=8.0, help="total seconds for the whole collection")
    p.add_argument("--pid", type=int, action="append", dest="pids", help="limit stacks/rings to these deployments")
    p.add_argument("--native", action="store_true", help="py-spy --native stacks")
    p.add_argument("--nonblocking", action="store_true", help="py-spy --nonblocking (never pauses targets)")
    p.add_argument("--nccl-ras", action="store_true", help="query NCCL's RAS service once")
    p.add_argument("--preflight", action="store_true", help="also collect the gate's preflight facts")
    p.add_argument("--enable", action="append", default=[], metavar="PROBE",
                   help="turn on an opt-in probe by name (repeatable; e.g. nccl_ras, preflight)")
    p.add_argument("--confirm", type=float, default=0.0, metavar="S",
                   help="when work is in flight and nothing moved, keep watching up to S seconds (as triage; 0 = off)")
    p.add_argument("--node", help="node name to record (default: hostname)")
    p.add_argument("--no-boost", action="store_true",
                   help="keep normal scheduling priority (default as root: SCHED_FIFO for the collection's short life)")
    p.add_argument("--version", action="version", version=__version__)
    return p


def main(argv: list[str]) -> int:
    from vllmdiag.deadline import process_start
    from vllmdiag.priority import boost

    origin = process_start()  # the budget is the whole command's: interpreter start included
    boost("--no-boost" not in argv)  # before any thread (vllmdiag/priority.py: why it cannot hurt the target)
    args = build_parser().parse_args(argv)
    if not 0.2 <= args.budget <= 600:
        sys.stderr.write("vllmdiag collect: --budget must be between 0.2 and 600 seconds\n")
        return EXIT_USAGE
    if not 0 <= args.confirm <= 600:
        sys.stderr.write("vllmdiag collect: --confirm must be between 0 and 600 seconds\n")
        return EXIT_USAGE
    from vllmdiag.api import collect_confirmed as collect
    from vllmdiag.registry import opt_in

    options = {"native": args.native, "nonblocking": args.nonblocking, "nccl_ras": args.nccl_ras,
               "preflight": args.preflight}
    if args.pids:
        options["pids"] = args.pids
    if args.node:
        options["node"] = args.node
    if args.no_boost:
        options["boost"] = False
    try:
        options.update(opt_in(args.enable))
        snap = collect(probes=args.probes, options=options, budget_s=args.budget, confirm_s=args.confirm,
                       origin=origin)
    except VllmdiagError as exc:  # an unknown --probe, ...: one line and its exit code
        sys.stderr.write(f"vllmdiag collect: {exc}\n")
        return exc.exit_code
    text = json.dumps(snap.to_dict(), default=str)
    if args.json or not args.out:
        sys.stdout.write(text + "\n")
    if args.out:
        from vllmdiag.outfile import OutputError, write_output

        try:
            write_output(args.out, text + "\n", "--out")
        except OutputError as exc:
            sys.stdout.flush()
            sys.stderr.write(f"vllmdiag collect: {exc}\n")
            return exc.exit_code
    return 0
