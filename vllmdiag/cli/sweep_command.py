"""``vllmdiag sweep``: thin typer command over ``vllmdiag.sweep.sweep_api`` (registered by vllmdiag/cli/app.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Any

from vllmdiag.cli.shared import arg as _arg
from vllmdiag.cli.shared import opt as _opt
from vllmdiag.errors import BadInput
from vllmdiag.runtime import lastword

DEFAULT_CONFIRM_S = 10.0  # triage's (vllmdiag.api.DEFAULT_CONFIRM_S; not imported: this module loads for --help)


def register(app: Any) -> None:
    app.command("sweep")(sweep_command)


def sweep_command(
    nodeset: Annotated[str | None, _arg(help="nodes in ClusterShell syntax, e.g. 'gpu[00-47]' or '@group'")] = None,
    nodes: Annotated[list[str] | None, _opt("-w", help="more nodes (ClusterShell syntax; repeatable)")] = None,
    exclude: Annotated[list[str] | None, _opt("-x", help="exclude these nodes (ClusterShell syntax, as clush -x; "
                                              "repeatable)")] = None,
    group: Annotated[list[str] | None, _opt("-g", "--group", help="the nodes of this group (as clush -g; @GROUP too): "
                                            "--inventory's groups, else ClusterShell's groups.conf/groups.d")] = None,
    exclude_group: Annotated[list[str] | None, _opt("-X", help="exclude the nodes of this group (as clush -X)")] = None,
    user: Annotated[str | None, _opt("-l", help="ssh login user (as clush -l; wins over the inventory's)")] = None,
    ssh_option: Annotated[list[str] | None, _opt("-o", help="ssh options as clush -o takes them ('-oPort=2222 "
                                                 "-oUser=x', or Key=Value; repeatable), split into an argv list, never "
                                                 "a shell; those that run commands or load config are refused")] = None,
    hostfile: Annotated[Path | None, _opt("--hostfile", help="file with one node (set) per line")] = None,
    inventory: Annotated[Path | None, _opt("--inventory", help="fleet YAML: groups, per-node ssh options")] = None,
    exec_template: Annotated[str | None, _opt("--exec", help="command prefix per node, %h = node: 'kubectl exec %h --'")] = None,
    remote_cmd: Annotated[str, _opt("--remote-cmd", help="the vllmdiag program on the nodes")] = "vllmdiag",
    ship: Annotated[bool, _opt("--ship", help="copy a self-contained collector and run it with vLLM's Python")] = False,
    ship_py_spy: Annotated[bool, _opt("--ship-py-spy/--no-ship-py-spy", help="with --ship: bundle py-spy too")] = True,
    ship_python: Annotated[str | None, _opt("--ship-python", help="with --ship: the node's Python to run (root-owned, "
                                            "not writable by others); default: vLLM's if trusted, else /usr/bin/python3")] = None,
    timeout: Annotated[float, _opt("-u", "--timeout", help="per-node deadline in seconds, connect + collect (as "
                                   "clush -u, the command timeout)")] = 20.0,
    connect_timeout: Annotated[float, _opt("-t", "--connect-timeout", help="ssh connect timeout in seconds (as clush "
                                           "-t)")] = 5.0,
    sweep_timeout: Annotated[float | None, _opt("--sweep-timeout", help="whole-sweep deadline in seconds")] = None,
    fanout: Annotated[int, _opt("-f", "--fanout", help="nodes contacted at once (as clush -f)")] = 64,
    gateway: Annotated[list[str] | None, _opt("--gateway", help="sweep through this ClusterShell gateway (repeatable)")] = None,
    topology: Annotated[Path | None, _opt("--topology", help="ClusterShell topology.conf: sweep through its gateways")] = None,
    strict: Annotated[str | None, _opt("--strict-host-key-checking", help="yes | no | accept-new")] = None,
    probe: Annotated[list[str] | None, _opt("--probe", help="run only these probes on the nodes")] = None,
    enable: Annotated[list[str] | None, _opt("--enable", help="turn on an opt-in probe on the nodes (repeatable)")] = None,
    confirm: Annotated[float, _opt("--confirm", help="a node that sees work in flight and nothing moving watches up to "
                                   "this many seconds (nodes in parallel; the sweep's deadline grows by it unless "
                                   "--sweep-timeout is given); 0 = off, also the cross-node resample")] = DEFAULT_CONFIRM_S,
    no_confirm: Annotated[bool, _opt("--no-confirm", help="same as --confirm 0")] = False,
    json_out: Annotated[bool, _opt("--json", help="print the fleet JSON contract")] = False,
    save: Annotated[Path | None, _opt("--save", help="write one snapshot JSON per node into this directory")] = None,
    report: Annotated[Path | None, _opt("--report", help="write a self-contained .html or .md report")] = None,
    gate: Annotated[bool, _opt("--gate", help="run the pre-rollout gate on every node instead of triage")] = False,
    gate_config: Annotated[Path | None, _opt("--gate-config", help="gate YAML (see `vllmdiag gate --default-config`)")] = None,
    tp: Annotated[int | None, _opt("--tp", help="with --gate: planned tensor-parallel size per node")] = None,
    junit: Annotated[Path | None, _opt("--junit", help="with --gate: write JUnit XML here")] = None,
    prom: Annotated[Path | None, _opt("--prom", help="with --gate: write a node_exporter textfile here (NAME.prom)")] = None,
    verbose: Annotated[bool, _opt("-v", "--verbose", help="show every row (healthy ones are folded by default)")] = False,
) -> int:
    """Diagnose every node of a fleet at once: one verdict, nodes folded into classes, sick nodes listed."""
    started = lastword.process_start()  # --sweep-timeout covers everything from the command's start to the verdict
    from vllmdiag.registry import opt_in
    from vllmdiag.sweep.fanout import SweepPlan, fit_confirm
    from vllmdiag.sweep.inventory import load_inventory
    from vllmdiag.sweep.nodes import resolve_nodes
    from vllmdiag.sweep.sweep_api import save as save_dir
    from vllmdiag.sweep.sweep_api import sweep
    from vllmdiag.sweep.transport import Transport
    from vllmdiag.sweep.tree import TreeSpec
    from vllmdiag.sweep.tree import check as check_tree

    if verbose:
        from vllmdiag.render import text

        text.VERBOSE = True

    if not 0.5 <= timeout <= 3600 or not 0.5 <= connect_timeout <= 600:
        raise BadInput("--timeout must be 0.5-3600 s and --connect-timeout 0.5-600 s")
    if sweep_timeout is not None and not 0.5 <= sweep_timeout <= 86400:
        raise BadInput("--sweep-timeout must be between 0.5 and 86400 seconds")
    if not 1 <= fanout <= 4096:
        raise BadInput("--fanout must be between 1 and 4096")
    if not 0 <= confirm <= 600:
        raise BadInput("--confirm must be between 0 and 600 seconds")
    confirm = 0.0 if no_confirm else confirm
    if ship_python is not None and not ship:
        raise BadInput("--ship-python needs --ship")
    resolving = time.monotonic()
    inv = load_inventory(inventory) if inventory else None
    deadline = started + sweep_timeout if sweep_timeout is not None else None
    names = resolve_nodes([nodeset or "", *(nodes or []), *_groups(group, "-g")], hostfile, inv, deadline)
    excluded = [*(exclude or []), *_groups(exclude_group, "-X")]
    if excluded:
        names = _without(names, resolve_nodes(excluded, None, inv, deadline))
    resolved_s = time.monotonic() - resolving
    transport = Transport(exec_template=exec_template, remote_cmd=remote_cmd, ship=ship, ship_py_spy=ship_py_spy,
                          ship_python=ship_python, connect_timeout_s=connect_timeout, strict_host_key_checking=strict,
                          user=user, ssh_options=split_ssh_options(ssh_option or []),
                          probes=tuple(probe or ()), enable=tuple(opt_in(enable or [])),
                          confirm_s=fit_confirm(confirm, timeout, sweep_timeout))
    tree = TreeSpec(tuple(gateway or ()), str(topology) if topology else None) if gateway or topology else None
    plan = SweepPlan(nodes=names, transport=transport, inventory=inv, timeout_s=timeout, fanout=fanout,
                     sweep_timeout_s=sweep_timeout, tree=tree, started=started,
                     setup_s=resolved_s)
    check_tree(plan)
    if prom is not None:
        from vllmdiag.gate.prom import check_name

        check_name(prom, "--prom")  # before the sweep: a name node_exporter never reads is a usage error
    if gate:
        return _gate(plan, gate_config, tp, junit, json_out, prom)
    if junit is not None or prom is not None or gate_config is not None or tp is not None:
        raise BadInput("--junit, --prom, --gate-config and --tp need --gate")
    if json_out:
        result = sweep(plan, confirm=confirm > 0)
    else:
        result = _with_progress(plan, lambda p, progress: sweep(p, progress, confirm > 0))
    from vllmdiag.cli.shared import emit

    rc = emit(result, json_out, report)  # the verdict first: a --save that cannot be written is exit 2 after it
    if save is not None:
        save_dir(result, save)
    return rc


def _groups(names: list[str] | None, option: str) -> list[str]:
    """clush's -g/-X GROUP: `@GROUP` (a leading @ is accepted too)."""
    out = []
    for name in names or []:
        bare = name[1:] if name.startswith("@") else name
        if not bare or any(c in bare for c in ",[]@ "):
            raise BadInput(f"{option} {name[:80]!r}: give one group name (as clush {option} GROUP)")
        out.append(f"@{bare}")
    return out


def split_ssh_options(values: list[str]) -> tuple[str, ...]:
    """clush -o takes raw ssh arguments in one string ('-oPort=2222 -oUser=x'): split here (shlex, never a
    shell) into single options, each checked by the inventory's allow-list (transport.Transport). A bare
    `Key=Value` or `Key Value` is one option, as before."""
    import shlex

    out: list[str] = []
    for value in values:
        text = value.strip()
        if not text.startswith("-"):
            out.append(text)
            continue
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise BadInput(f"-o {value[:80]!r}: cannot parse ({exc})") from None
        i = 0
        while i < len(words):
            word = words[i]
            if word == "-o" and i + 1 < len(words):
                out.append(words[i + 1])
                i += 2
            elif word.startswith("-o") and len(word) > 2:
                out.append(word)
                i += 1
            else:
                raise BadInput(f"-o {value[:80]!r}: only ssh -o options (-oKey=Value); {word[:40]!r} is not one "
                               "(the login user is -l, the port -o Port=N)")
    return tuple(out)


def _without(names: list[str], excluded: list[str]) -> list[str]:
    """``-x``: the node list less the excluded names; nothing left is a usage error, never an empty sweep."""
    gone = set(excluded)
    kept = [n for n in names if n not in gone]
    if not kept:
        raise BadInput("-x excludes every node given: nothing to sweep")
    return kept


def _gate(plan: Any, config: Path | None, tp: int | None, junit: Path | None, json_out: bool,
          prom: Path | None = None) -> int:

    from vllmdiag.model import strict_json
    from vllmdiag.render.gate_view import render_gate
    from vllmdiag.sweep.gate_nodes import gate_payload, sweep_gate

    if json_out:
        result, outcomes = sweep_gate(plan, config, tp)
    else:
        result, outcomes = _with_progress(plan, lambda p, progress: sweep_gate(p, config, tp, progress))
    if json_out:
        sys.stdout.write(strict_json.dumps(gate_payload(result, outcomes), indent=2, default=str) + "\n")
    else:
        render_gate(result)
    if junit is not None:  # after the results: a file error (exit 2) never loses them (issue 15, item 3)
        from vllmdiag.files.outfile import write_output
        from vllmdiag.gate.junit import fleet_junit

        sys.stdout.flush()
        write_output(junit, fleet_junit(result), "--junit")
    if prom is not None:  # likewise after the results; atomic (renamed into place), as node_exporter wants
        from vllmdiag.files.outfile import write_output
        from vllmdiag.gate.prom import fleet_prom

        sys.stdout.flush()
        write_output(prom, fleet_prom(result), "--prom", mode=0o644)
    return int(result.exit_code)


def _with_progress(plan: Any, run: Any) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    bad = {"n": 0}
    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("", total=len(plan.nodes))

        def done(outcome: Any) -> None:
            bad["n"] += outcome.status != "ok"
            bar.update(task, advance=1, description=f"{bad['n']} not answering" if bad["n"] else "")

        return run(plan, done)
