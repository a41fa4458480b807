"""``vllmdiag sweep``: thin typer command over ``vllmdiag.sweep.sweep_api`` (found by vllmdiag/cli/app.py: ``COMMAND``)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from vllmdiag.cli.options import SWEEP, check, with_defaults
from vllmdiag.cli.shared import Command
from vllmdiag.errors import BadInput
from vllmdiag.runtime import lastword


def sweep_command(**given: Any) -> int:
    """Diagnose every node of a fleet at once: one verdict, nodes folded into classes, sick nodes listed."""
    started = lastword.process_start()  # --sweep-timeout covers everything from the command's start to the verdict
    o = with_defaults(SWEEP, given)  # the options as declared in cli/options.py (typer passes them all)
    if o["verbose"]:
        from vllmdiag.render import text

        text.VERBOSE = True
    check(SWEEP, o)  # each option's range, as the table declares it
    confirm = 0.0 if o["no_confirm"] else o["confirm"]
    if o["ship_python"] is not None and not o["ship"]:
        raise BadInput("--ship-python needs --ship")
    plan = _plan(o, confirm, started)
    json_out, prom = o["json_out"], o["prom"]
    if prom is not None:
        from vllmdiag.gate.prom import check_name

        check_name(prom, "--prom")  # before the sweep: a name node_exporter never reads is a usage error
    if o["gate"]:
        return _gate(plan, o["gate_config"], o["tp"], o["junit"], json_out, prom)
    if o["junit"] is not None or prom is not None or o["gate_config"] is not None or o["tp"] is not None:
        raise BadInput("--junit, --prom, --gate-config and --tp need --gate")
    from vllmdiag.sweep.sweep_api import sweep

    if json_out:
        result = sweep(plan, confirm=confirm > 0)
    else:
        result = _with_progress(plan, lambda p, progress: sweep(p, progress, confirm > 0))
    from vllmdiag.cli.shared import emit

    rc = emit(result, json_out, o["report"])  # the verdict first: a --save that cannot be written is exit 2 after it
    if o["save"] is not None:
        from vllmdiag.sweep.sweep_api import save as save_dir

        save_dir(result, o["save"])
    return rc


def _plan(o: dict[str, Any], confirm: float, started: float) -> Any:
    """The sweep's plan from its options: the nodes resolved (less -x/-X), how each is reached, the deadlines."""
    from vllmdiag.registry import opt_in
    from vllmdiag.sweep.fanout import SweepPlan, fit_confirm
    from vllmdiag.sweep.inventory import load_inventory
    from vllmdiag.sweep.nodes import resolve_nodes
    from vllmdiag.sweep.transport import Transport
    from vllmdiag.sweep.tree import TreeSpec
    from vllmdiag.sweep.tree import check as check_tree

    resolving = time.monotonic()
    inv = load_inventory(o["inventory"]) if o["inventory"] else None
    sweep_timeout = o["sweep_timeout"]
    deadline = started + sweep_timeout if sweep_timeout is not None else None
    names = resolve_nodes([o["nodeset"] or "", *(o["nodes"] or []), *_groups(o["group"], "-g")], o["hostfile"], inv,
                          deadline)
    excluded = [*(o["exclude"] or []), *_groups(o["exclude_group"], "-X")]
    if excluded:
        names = _without(names, resolve_nodes(excluded, None, inv, deadline))
    resolved_s = time.monotonic() - resolving
    transport = Transport(exec_template=o["exec_template"], remote_cmd=o["remote_cmd"], ship=o["ship"],
                          ship_py_spy=o["ship_py_spy"], ship_python=o["ship_python"],
                          connect_timeout_s=o["connect_timeout"], strict_host_key_checking=o["strict"],
                          user=o["user"], ssh_options=split_ssh_options(o["ssh_option"] or []),
                          probes=tuple(o["probe"] or ()), enable=tuple(opt_in(o["enable"] or [])),
                          confirm_s=fit_confirm(confirm, o["timeout"], sweep_timeout))
    gateway, topology = o["gateway"], o["topology"]
    tree = TreeSpec(tuple(gateway or ()), str(topology) if topology else None) if gateway or topology else None
    plan = SweepPlan(nodes=names, transport=transport, inventory=inv, timeout_s=o["timeout"], fanout=o["fanout"],
                     sweep_timeout_s=sweep_timeout, tree=tree, started=started, setup_s=resolved_s)
    check_tree(plan)
    return plan


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


COMMAND = Command("sweep", sweep_command, SWEEP)
