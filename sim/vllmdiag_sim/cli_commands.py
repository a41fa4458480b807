"""The commands this distribution adds to `vllmdiag`: `demo` here, the `sim` group in vllmdiag_sim/cli.py.

The product finds them through the entry point group ``vllmdiag.commands`` (sim/pyproject.toml), by
name: the entry point's name is the command's, its object a function (a command) or a typer app (a
group). So the product imports nothing of the simulator, and a node without it has neither command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from vllmdiag.cli.shared import opt as _opt
from vllmdiag.errors import BadInput


def demo_command(
    fault: Annotated[str, _opt("--fault", help="fault to inject (see `vllmdiag sim list-faults`)")] = "straggler",
    tp: Annotated[int | None, _opt("--tp", help="tensor-parallel size (1-8; default 4, with --fleet 2 per node)")] = None,
    rank: Annotated[int | None, _opt("--rank", help="TP rank the fault targets (default: the last)")] = None,
    fleet: Annotated[bool, _opt("--fleet", help="start a few namespaced nodes (root) and sweep them")] = False,
    nodes: Annotated[int, _opt("--nodes", help="with --fleet: how many nodes (2-8)")] = 4,
    report: Annotated[Path | None, _opt("--report", help="also write a self-contained .html or .md report")] = None,
    verbose: Annotated[bool, _opt("-v", "--verbose", help="show every row (healthy ones are folded by default)")] = False,
) -> int:
    """Start a simulated hung vLLM deployment, say what was injected, triage it, say if it was found, tear down."""
    if tp is not None and not 1 <= tp <= 8:
        raise BadInput("--tp must be between 1 and 8")
    # Before anything starts (the product's writer says the same, but only once the deployment ran).
    if report is not None and report.suffix.lower() not in (".html", ".htm", ".md"):
        raise BadInput(f"--report {report}: use a .html or .md file name")
    if verbose:  # -v: every row of every section, as `triage -v`
        from vllmdiag.render import text

        text.VERBOSE = True
    if fleet:
        from vllmdiag_sim.demo_fleet import demo_fleet

        if not 2 <= nodes <= 8:
            raise BadInput("--nodes must be between 2 and 8")
        return int(demo_fleet(fault=fault, nodes=nodes, tp=tp or 2, rank=rank, report=report))
    from vllmdiag_sim.demo import demo

    return int(demo(fault=fault, tp=tp or 4, rank=rank, report=report))
