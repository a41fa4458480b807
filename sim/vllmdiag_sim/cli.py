"""`vllmdiag sim ...`: start, fault, list and stop simulated vLLM 0.33 deployments."""

from __future__ import annotations

import json
import re
from typing import Annotated

import typer

from vllmdiag.errors import BadInput, did_you_mean
from vllmdiag_sim.deployment import Deployment, SimError, state_root
from vllmdiag_sim.faults import FAULTS, FaultError

app = typer.Typer(no_args_is_help=True, help="Simulated vLLM 0.33 deployments with fault injection.")


def _show(dep: Deployment, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(dep.summary(), indent=1))
        return
    typer.echo(f"deployment {dep.id}  root pid {dep.root_pid}  http port {dep.http_port}  fault {dep.fault}")
    target = _fault_target(dep)
    if target:  # which process got the fault, said where it was put in place (issue 35 item 8)
        typer.echo(f"  fault on         {target}")
    for role, pids in dep.pids_by_role.items():
        typer.echo(f"  {role:<16} {' '.join(map(str, pids))}")
    typer.echo(f"  segments         {' '.join(dep.segments + dep.leaked) or '-'}")


def _fault_target(dep: Deployment) -> str:
    """Who the fault was put on, as the sim chose it (--rank, else its default: the last local rank)."""
    from vllmdiag_sim.faults import EXPECTED, RANKED

    who = EXPECTED.get(dep.fault, (None, None, None))[2]
    if who is None:
        return ""
    try:
        if who == "engine_core":
            return f"VLLM::EngineCore, pid {dep.engine_pid()}"
        if who == "api_server":
            return f"the API server, pid {dep.root_pid}"
    except SimError:
        return f"the {who} (gone)"
    fixed = {"group": f"the whole TP group (TP0-TP{dep.tp - 1}): every rank alike",
             "segments": "shared-memory segments (no process)",
             "client": f"the HTTP client, pid {' '.join(map(str, dep.pids_by_role.get('client', []))) or '?'}"}
    if who in fixed:
        return fixed[who]
    if who == "api_server_child":  # --rank is the API server's index
        stopped = [p["pid"] for p in dep.processes if p["role"] == "api_server_child" and p.get("rank") == dep.rank]
        return f"VLLM::APIServer_{dep.rank}, pid {stopped[0] if stopped else 'gone'}"
    if who == "dp_worker":  # dense DP: --rank is the DP rank; its worker(s) are titled without it
        held = [p for p in dep.processes if p["role"] == "worker" and p.get("dp_rank") == dep.rank]
        return (f"DP rank {dep.rank}'s worker: " + ", ".join(f"{p['title']} pid {p['pid']}" for p in held)
                if held else f"DP rank {dep.rank}'s worker (gone)")
    if dep.fault not in RANKED and who != "worker":
        return f"{who.replace('_', ' ')} (see `vllmdiag sim list-faults`)"
    ranked = [p for p in dep.processes if p["role"] == "worker" and p.get("rank") is not None
              and p.get("dp_rank") in (0, None)]
    rank = dep.rank if dep.rank is not None else max((int(p["rank"]) for p in ranked), default=None)
    pid = next((p["pid"] for p in ranked if p.get("rank") == rank), None)
    chosen = "" if dep.rank is not None else " (the default: the last rank; --rank R picks another)"
    return f"VLLM::Worker_TP{rank} rank {rank}, pid {pid if pid is not None else 'gone'}{chosen}"


@app.command()
def up(
    tp: Annotated[int, typer.Option("--tp", help="tensor-parallel size (1-8)")] = 2,
    dp: Annotated[int, typer.Option("--dp", help="data-parallel replicas")] = 1,
    fault: Annotated[str, typer.Option("--fault", help="fault to put in place (see list-faults)")] = "healthy",
    rank: Annotated[int | None, typer.Option("--rank", help="TP rank the fault targets")] = None,
    namespace: Annotated[bool, typer.Option("--namespace", help="own PID+mount namespace (root)")] = False,
    shm_size: Annotated[str | None, typer.Option("--shm-size", help="namespaced /dev/shm size")] = None,
    port: Annotated[int, typer.Option("--port", help="HTTP port (0 = any free)")] = 0,
    nnodes: Annotated[int, typer.Option("--nnodes", help="nodes the TP group spans")] = 1,
    node_rank: Annotated[int, typer.Option("--node-rank", help="this node's rank")] = 0,
    master_port: Annotated[int | None, typer.Option("--master-port", help="leader's rendezvous port")] = None,
    api_servers: Annotated[int | None, typer.Option("--api-server-count", help="API servers under a manager "
                                                    "`vllm serve` (default: the DP size)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Start a deployment; returns once it is ready and the fault is in place."""
    if fault not in FAULTS:
        raise BadInput(f"unknown fault {fault!r}; {did_you_mean(fault, tuple(FAULTS), '`vllmdiag sim list-faults`')}")
    try:
        dep = Deployment.up(tp=tp, dp=dp, fault=fault, rank=rank, namespace=namespace, shm_size=shm_size,
                            port=port, nnodes=nnodes, node_rank=node_rank, master_port=master_port,
                            api_servers=api_servers)
    except FaultError as exc:
        raise BadInput(str(exc)) from None
    _show(dep, as_json)


@app.command()
def inject(
    dep_id: Annotated[str, typer.Argument(metavar="ID")],
    fault: Annotated[str, typer.Option("--fault", help="fault to put in place")],
    rank: Annotated[int | None, typer.Option("--rank", help="TP rank the fault targets")] = None,
) -> None:
    """Put a fault into a running deployment."""
    if fault not in FAULTS:
        raise BadInput(f"unknown fault {fault!r}; {did_you_mean(fault, tuple(FAULTS), '`vllmdiag sim list-faults`')}")
    dep = _load(dep_id)
    try:
        dep.inject(fault, rank)
    except FaultError as exc:
        raise BadInput(str(exc)) from None
    except TimeoutError:  # one fault per deployment: a process already held by one never takes the next
        raise BadInput(f"deployment {dep_id}: the fault {fault!r} was not taken in time (it holds "
                       f"{dep.fault!r} already?); `vllmdiag sim down {dep_id}` and `sim up --fault {fault}`") from None
    _show(dep, False)


def _load(dep_id: str) -> Deployment:
    """A deployment by id, or one line naming the ones there are (bad input, exit 2)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", dep_id):
        raise BadInput(f"invalid deployment id {dep_id!r} (see `vllmdiag sim list`)")
    try:
        return Deployment.load(dep_id)
    except (SimError, ValueError, TypeError) as exc:
        known = ", ".join(d.id for d in Deployment.list_all()) or "none"
        raise BadInput(f"no simulated deployment {dep_id!r} (running: {known}; see `vllmdiag sim list`)"
                         if isinstance(exc, SimError) else f"deployment {dep_id!r}: unreadable state ({exc})") from None


@app.command("list")
def list_(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Deployments started by the simulator (state under $VLLMDIAG_SIM_STATE)."""
    deps = Deployment.list_all()
    if as_json:
        typer.echo(json.dumps([d.summary() for d in deps], indent=1))
    elif not deps:
        typer.echo(f"no simulated deployments (state under {state_root()}); start one with `vllmdiag sim up`")
    for dep in [] if as_json else deps:
        _show(dep, False)


@app.command("list-faults")
def list_faults() -> None:
    """The fault catalog."""
    for name, what in FAULTS.items():
        typer.echo(f"{name:<20} {what}")


@app.command()
def down(
    dep_id: Annotated[str | None, typer.Argument(metavar="[ID]")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every deployment the simulator started")] = False,
    keep_leak: Annotated[bool, typer.Option("--keep-leak", help="leave shm-leak segments behind")] = False,
) -> None:
    """Stop what a deployment started and remove its segments and socket files."""
    if dep_id is None and not all_:
        raise typer.BadParameter("give a deployment ID or --all")
    for dep in Deployment.list_all() if all_ else [_load(str(dep_id))]:
        dep.down(keep_leak=keep_leak)
        typer.echo(f"stopped {dep.id}")
