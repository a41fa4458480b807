"""`vllmdiag demo`: a simulated hung vLLM deployment, started, faulted, triaged, graded, torn down.

It teaches by saying what it does: which fault it injects into which rank and pid, what the fault
catalog expects triage to answer, and at the end whether the verdict named what was injected.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from vllmdiag.errors import BadInput, did_you_mean


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def teardown_on_sigterm() -> Iterator[None]:
    """SIGTERM unwinds like Ctrl-C, so every `with` that started something tears it down."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class Injected:
    """What the demo put in place, to grade the verdict against."""

    fault: str
    rank: int | None
    pid: int | None
    what: str
    expect: tuple[str, str | None, str | None]  # status, layer, who (vllmdiag_sim.faults.EXPECTED)
    clients: list[int] = field(default_factory=list)
    root_pid: int = 0
    tp: int = 0
    client_port: int | None = None  # the stalled client's own port (its pid may be out of a node's sight)


def check_fault(fault: str, tp: int, rank: int | None) -> None:
    from vllmdiag_sim.faults import EXPECTED, FAULTS, FaultError, validate_start

    if fault not in FAULTS:
        raise BadInput(f"unknown fault {fault!r}; {did_you_mean(fault, tuple(FAULTS), '`vllmdiag sim list-faults`')}")
    try:
        validate_start(fault, tp=tp, dp=1, nnodes=1, master_port=None)
    except FaultError as exc:
        raise BadInput(f"--fault {fault} --tp {tp}: {exc}") from None
    if rank is not None and not 0 <= rank < tp:
        raise BadInput(f"--rank must be between 0 and {tp - 1} for --tp {tp}")
    if fault not in EXPECTED:
        raise BadInput(f"fault {fault} has no expected answer in vllmdiag_sim/faults.py EXPECTED: cannot grade it")


def say(console: Any, text: str, command: list[str] | None = None) -> None:
    """One line of the demo's story; a command it names goes on a line of its own, whole (soft wrap: a
    narrow terminal folds it on screen, a copy is one line; issue 35 item 5)."""
    console.print(f"[bold cyan]demo[/] {text}", highlight=False)
    if command:
        import shlex

        from rich.text import Text

        console.print(Text("  $ ", style="dim") + Text(shlex.join(command), style="cyan"), soft_wrap=True)


def demo(fault: str = "straggler", tp: int = 4, rank: int | None = None, report: Path | None = None,
         console: Any = None) -> int:
    """Start a deployment, inject `fault`, triage it, say whether it was found; the triage exit code."""
    from vllmdiag import api
    from vllmdiag.render.screen import draw
    from vllmdiag.render.text import make_console
    from vllmdiag_sim.deployment import Deployment
    from vllmdiag_sim.faults import FAULTS

    check_fault(fault, tp, rank)
    console = console or make_console()
    rank = default_rank(fault, tp, rank)
    with teardown_on_sigterm():
        say(console, f"starting a simulated vLLM 0.33 deployment: `vllm serve facebook/opt-125m "
                     f"--tensor-parallel-size {tp}` (real processes, shared-memory rings, ZMQ, HTTP) ...")
        start = fault in start_faults()  # in place from launch (a small /dev/shm, a rank stuck in NCCL init)
        with Deployment.up(tp=tp, fault=fault if start else "healthy", rank=rank if start else None) as dep:
            say(console, f"up: API server pid {dep.root_pid}, EngineCore pid {dep.engine_pid()}, "
                         f"workers {_workers(dep)}")
            injected = inject(dep, fault, rank)
            say(console, f"injected [bold]{fault}[/]: {FAULTS[fault]}" + _target(injected))
            say(console, "expected answer: " + expected_text(injected))
            say(console, f"triaging, as `vllmdiag triage --pid {dep.root_pid}` would ...")
            result = api.triage(pids=[dep.root_pid])
            draw(result.report, console)
            if report is not None:
                write_report_file(result.report, report)
                say(console, f"report written to {report}")
            found, why = grade(result.report.to_dict()["verdict"], injected)
            mark = "[bold green]FOUND[/]" if found else "[bold red]MISSED[/]"
            say(console, f"{mark} {why}")
            say(console, "tearing the deployment down (processes, segments, socket files) ...")
        say(console, f"done; exit code {result.exit_code} is triage's ({_exit_meaning(result.exit_code)}). "
                     "Try another fault: `vllmdiag demo --fault F` (list: `vllmdiag sim list-faults`), "
                     "or a fleet: `vllmdiag demo --fleet`.")
        return int(result.exit_code)


def default_rank(fault: str, tp: int, rank: int | None) -> int | None:
    """The rank a rank-aimed fault hits unless told: the last (as `vllmdiag sim` does)."""
    from vllmdiag_sim.faults import EXPECTED, RANKED

    aimed = fault in RANKED or EXPECTED.get(fault, ("", None, None))[2] == "worker"
    return tp - 1 if aimed and rank is None else rank


def start_faults() -> set[str]:
    from vllmdiag_sim import faults

    return set(getattr(faults, "START_FAULTS", {"shm-small"}))


def write_report_file(report: Any, path: Path) -> None:
    from vllmdiag.files.outfile import write_output
    from vllmdiag.render.files import report_text

    write_output(path, report_text(report, path), "--report")


def inject(dep: Any, fault: str, rank: int | None) -> Injected:
    from vllmdiag_sim.faults import EXPECTED

    who = EXPECTED[fault][2]
    pid: int | None = None
    if rank is not None:
        pid = _worker_pid(dep, rank)  # before the fault: a killed worker is no longer listed
    elif who == "engine_core":
        pid = dep.engine_pid()
    elif who == "api_server":
        pid = dep.root_pid
    if fault != "healthy" and fault not in start_faults():
        dep.inject(fault, rank)
    clients = list(dep.pids_by_role.get("client", []))
    if who == "client" and clients:
        pid = clients[-1]
    title = {"engine_core": "VLLM::EngineCore", "api_server": "the API server", "client": "the HTTP client",
             "group": f"the whole TP group (TP0-TP{dep.tp - 1})"}.get(who or "", f"VLLM::Worker_TP{rank}")
    ports = [int(a.name.rsplit("-", 1)[1]) for a in (dep.path / "acks").glob("client-stalled-*")]
    return Injected(fault, rank, pid, title, EXPECTED[fault], clients, dep.root_pid, dep.tp, ports[0] if ports else None)


def _worker_pid(dep: Any, rank: int) -> int | None:
    from vllmdiag_sim.deployment import SimError

    try:
        return int(dep.worker_pid(rank))
    except SimError:  # stuck before it took its rank title (init-odd-rank): the one untitled worker
        untitled = [p["pid"] for p in dep.processes if p["role"] == "worker" and p.get("rank") is None]
        return int(untitled[0]) if len(untitled) == 1 else None


def _workers(dep: Any) -> str:
    pids = dep.pids_by_role.get("worker", [])
    return ", ".join(str(p) for p in pids) if pids else "none (TP=1 runs the model in the EngineCore)"


def _target(inj: Injected) -> str:
    if inj.pid is None:
        return ""
    rank = f" rank {inj.rank}" if inj.rank is not None else ""
    return f" -> {inj.what}{rank}, pid {inj.pid}"


def expected_text(inj: Injected) -> str:
    status, layer, who = inj.expect
    text = status + (f" at the {layer} layer" if layer else "")
    if who == "group":
        text += f", culprit {inj.what}: every rank waits alike, so no single rank is to blame"
    elif who is not None and inj.pid is not None:
        text += f", culprit {inj.what}" + (f" rank {inj.rank}" if inj.rank is not None else "") + f" (pid {inj.pid})"
    elif who == "segments":
        text += " (shared-memory segments; no process to blame)"
    return text


def grade(verdict: dict[str, Any], inj: Injected) -> tuple[bool, str]:
    """Did the verdict (the JSON contract) name what was injected? With a sentence saying why."""
    status, layer, who = inj.expect
    got = verdict["status"] + (f" at the {verdict['layer']} layer" if verdict.get("layer") else "")
    culprits = verdict.get("culprits") or []
    top = culprits[0] if culprits else None
    named = top is not None and blames(top, inj)
    if (verdict["status"], verdict.get("layer")) != (status, layer):
        return False, f"vllmdiag answered {got}; the injected {inj.fault} should read {expected_text(inj)}."
    if who in ("worker", "engine_core", "api_server", "client", "group") and not named:
        said = _culprit_text(top) if top else "no culprit"
        return False, f"right layer ({got}) but it blamed {said}, not {inj.what} (pid {inj.pid})."
    if who is None and status == "healthy":
        return True, f"vllmdiag answered {got}, as it must for {inj.fault} (a false alarm is as bad as a miss)."
    if who is None:
        return True, f"vllmdiag answered {got}, as it must for {inj.fault} (and blamed no single rank for it)."
    blamed = f"; culprit {_culprit_text(top)}" if top else ""
    return True, f"vllmdiag answered {got}{blamed}: that is what was injected ({inj.fault})."


def blames(c: dict[str, Any], inj: Injected) -> bool:
    who = inj.expect[2]
    if who == "worker":
        return c.get("role") == "worker" and c.get("rank") == inj.rank and c.get("pid") in (None, inj.pid)
    if who == "engine_core":
        return c.get("role") == "engine_core"
    if who == "api_server":
        return c.get("role") == "api_server" and c.get("pid") == inj.root_pid
    if who == "client":
        # A node in its own PID namespace cannot see a client on the host: then the connection names it.
        port = inj.client_port
        by_port = port is not None and str(c.get("title") or "").endswith(f":{port}")
        return c.get("role") in ("client", "http_client") and (c.get("pid") in inj.clients or by_port)
    if who == "group":
        if inj.tp == 1:
            return c.get("role") == "engine_core"
        return c.get("role") == "rank_group" and c.get("title") == f"Worker_TP[0-{inj.tp - 1}]"
    return True


def _culprit_text(c: dict[str, Any]) -> str:
    rank = f" rank {c['rank']}" if c.get("rank") is not None else ""
    pid = f" (pid {c['pid']})" if c.get("pid") is not None else ""
    return f"{c.get('title') or c.get('role')}{rank}{pid}"


def _exit_meaning(code: int) -> str:
    return {0: "healthy", 1: "blocked or degraded", 3: "no vLLM deployment found",
            4: "inconclusive: the tool could not see enough"}.get(code, "see README: exit codes")


if __name__ == "__main__":  # pragma: no cover - `python -m vllmdiag_sim.demo` for quick manual runs
    sys.exit(demo())
