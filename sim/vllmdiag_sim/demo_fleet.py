"""`vllmdiag demo --fleet`: a few simulated nodes on this machine, one faulted, swept as a fleet.

Each node is a simulated vLLM deployment in its own PID + mount namespace (own /proc, own
/dev/shm), as tests/fleet_fixtures.py builds them. The sweep reaches a node the way `kubectl exec`
or `srun` would: through ClusterShell's exec worker with an `nsenter` template, so no sshd is
needed. `%h` (the node name) picks a link `<tmp>/<node> -> /proc/<node's PID 1>`, whose `ns/pid`
and `ns/mnt` are the node's namespaces. Everything started is torn down, also on Ctrl-C/SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from vllmdiag.errors import BadInput
from vllmdiag_sim.demo import (
    Injected,
    check_fault,
    default_rank,
    expected_text,
    grade,
    inject,
    say,
    start_faults,
    teardown_on_sigterm,
    write_report_file,
)


def demo_fleet(fault: str = "straggler", nodes: int = 4, tp: int = 2, rank: int | None = None,
               report: Path | None = None, console: Any = None) -> int:
    """Start `nodes` namespaced nodes, put `fault` on one, sweep them all; the sweep's exit code."""
    from vllmdiag.render.screen import draw
    from vllmdiag.render.text import make_console
    from vllmdiag_sim.faults import FAULTS

    check_fleet_prerequisites()
    check_fault(fault, tp, rank)
    console = console or make_console()
    rank = default_rank(fault, tp, rank)
    names = [f"gpu{i:02d}" for i in range(nodes)]
    sick = names[min(1, nodes - 1)]
    with teardown_on_sigterm(), _tmpdir() as tmp, _nodes(names, sick, fault, tp, rank) as deps:
        say(console, f"{nodes} nodes up ({', '.join(names)}): each a simulated `vllm serve --tensor-parallel-size "
                     f"{tp}` in its own PID+mount namespace (own /proc and /dev/shm)")
        injected = inject(deps[sick], fault, rank)
        _as_node_pid(injected)
        say(console, f"injected [bold]{fault}[/] on [bold]{sick}[/]: {FAULTS[fault]}" + _target(injected))
        say(console, f"expected answer: {sick} " + expected_text(injected) + "; every other node healthy")
        template = _link_nodes(tmp, deps)
        result = _sweep(console, names, template)
        draw(result.report, console)
        if report is not None:
            write_report_file(result.report, report)
            say(console, f"report written to {report}")
        found, why = grade_fleet(result.report.to_dict()["verdict"], injected, sick)
        say(console, ("[bold green]FOUND[/] " if found else "[bold red]MISSED[/] ") + why)
        say(console, "tearing the nodes down ...")
    say(console, f"done; exit code {result.exit_code} is the sweep's. Your own fleet: see docs/fleet.md, 'Fleet quick start'.")
    return int(result.exit_code)


def check_fleet_prerequisites() -> None:
    if os.geteuid() != 0:
        raise BadInput("demo --fleet needs root (it creates PID and mount namespaces); run it as root, "
                         "or try the single-node `vllmdiag demo`")
    missing = [t for t in ("unshare", "nsenter", "mount") if shutil.which(t) is None]
    if missing:
        raise BadInput(f"demo --fleet needs {', '.join(missing)} (apt-get install util-linux mount)")


@contextlib.contextmanager
def _tmpdir() -> Iterator[Path]:
    tmp = Path(tempfile.mkdtemp(prefix="vllmdiag-demo-"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _nodes(names: list[str], sick: str, fault: str, tp: int, rank: int | None) -> Iterator[dict[str, Any]]:
    """Start every node in parallel (the fault goes in later, on `sick`); stop them all however we leave."""
    from vllmdiag_sim.deployment import Deployment

    deps: dict[str, Any] = {}

    def up(name: str) -> None:
        start = name == sick and fault in start_faults()
        deps[name] = Deployment.up(tp=tp, fault=fault if start else "healthy", rank=rank if start else None,
                                   namespace=True)

    try:
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for future in [pool.submit(up, n) for n in names]:
                future.result()
        yield deps
    finally:
        for dep in deps.values():
            with contextlib.suppress(Exception):
                dep.down()


def _link_nodes(tmp: Path, deps: dict[str, Any]) -> str:
    for name, dep in deps.items():
        (tmp / name).symlink_to(f"/proc/{ns_init_pid(dep.launcher_pid)}")
    return f"nsenter --pid={tmp}/%h/ns/pid --mount={tmp}/%h/ns/mnt --"


def ns_init_pid(launcher_pid: int) -> int:
    """The node's PID 1 (host view): the one child of its `unshare --fork` launcher."""
    kids = Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read_text().split()
    if not kids:
        raise RuntimeError(f"simulated node launcher {launcher_pid} has no namespace init")
    return int(kids[0])


def _sweep(console: Any, names: list[str], template: str) -> Any:
    from ClusterShell.NodeSet import NodeSet

    from vllmdiag.cli.sweep_command import _with_progress
    from vllmdiag.sweep.fanout import SweepPlan
    from vllmdiag.sweep.sweep_api import sweep
    from vllmdiag.sweep.transport import Transport

    remote = f"{sys.executable} -m vllmdiag"
    folded = str(NodeSet.fromlist(names))
    say(console, "sweeping, as this command would (ClusterShell exec worker; on a real fleet: ssh, or --exec "
                 "'kubectl exec %h --') ...", ["vllmdiag", "sweep", folded, "--exec", template, "--remote-cmd", remote])
    from vllmdiag.api import DEFAULT_CONFIRM_S

    transport = Transport(exec_template=template, remote_cmd=remote, confirm_s=DEFAULT_CONFIRM_S)
    plan = SweepPlan(nodes=names, transport=transport, timeout_s=25.0)
    return _with_progress(plan, lambda p, progress: sweep(p, progress))


def _as_node_pid(inj: Injected) -> None:
    """The node's own view of the pids (what its /proc, and so the verdict, shows)."""
    from vllmdiag_sim.faults import own_pid

    inj.pid = own_pid(inj.pid) if inj.pid is not None else None
    inj.root_pid = own_pid(inj.root_pid)


def _target(inj: Injected) -> str:
    rank = f" rank {inj.rank}" if inj.rank is not None else ""
    return f" -> {inj.what}{rank}, pid {inj.pid} on that node" if inj.pid is not None else ""


def grade_fleet(verdict: dict[str, Any], inj: Injected, sick: str) -> tuple[bool, str]:
    culprits = verdict.get("culprits") or []
    if culprits and culprits[0].get("node") != sick:
        return False, f"the fleet verdict blames node {culprits[0].get('node')}, but the fault is on {sick}."
    found, why = grade(verdict, inj)
    if found and inj.expect[0] == "healthy":
        return found, why.replace("vllmdiag answered healthy", "the fleet verdict: every node healthy", 1)
    return found, why.replace("vllmdiag answered", f"the fleet verdict names {sick}:", 1) if found else why
