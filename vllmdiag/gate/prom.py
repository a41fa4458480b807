"""Prometheus textfile (node_exporter textfile collector) of gate results (written by vllmdiag.files.outfile).

node_exporter reads only ``*.prom`` files of its textfile directory: any other name would be written
and silently never read, so it is refused as a usage error (``check_name``). The file is written
whole beside its place and renamed into it (vllmdiag.files.outfile), so a scrape never sees half of it.
"""

from __future__ import annotations

import time
from pathlib import Path

from vllmdiag.errors import BadInput
from vllmdiag.gate.result import STATUSES, FleetGateResult, NodeGateResult


def check_name(path: Path, option: str) -> None:
    """A textfile name node_exporter reads (NAME.prom), or BadInput: one line, exit 2."""
    if _device(path):
        return  # /dev/stdout, a pipe: not a textfile for node_exporter, written as asked (outfile's device rules)
    if not path.name.endswith(".prom") or path.name == ".prom":
        raise BadInput(f"{option} {str(path)[:300]!r}: node_exporter reads only files named *.prom; "
                       "name the file NAME.prom")


def _device(path: Path) -> bool:
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def fleet_prom(fleet: FleetGateResult) -> str:
    """`sweep --gate --prom`: one textfile with every node's checks (labelled by node)."""
    return to_prom([fleet.nodes[n] for n in sorted(fleet.nodes)])


def to_prom(nodes: list[NodeGateResult], now: float | None = None) -> str:
    stamp = time.time() if now is None else now
    lines = [
        "# HELP vllmdiag_gate_check Gate check status: 1 for the current status of each check, 0 for the others.",
        "# TYPE vllmdiag_gate_check gauge",
    ]
    for node in nodes:
        for check in node.checks:
            for status in STATUSES:
                labels = _labels(node=node.node, check=check.name, status=status, required=str(check.required).lower())
                lines.append(f"vllmdiag_gate_check{{{labels}}} {1 if check.status == status else 0}")
    lines += ["# HELP vllmdiag_gate_passed 1 when every required gate check passed on the node.",
              "# TYPE vllmdiag_gate_passed gauge"]
    lines += [f"vllmdiag_gate_passed{{{_labels(node=n.node)}}} {1 if n.passed else 0}" for n in nodes]
    lines += ["# HELP vllmdiag_gate_last_run_timestamp_seconds When the gate last ran (unix time).",
              "# TYPE vllmdiag_gate_last_run_timestamp_seconds gauge"]
    lines += [f"vllmdiag_gate_last_run_timestamp_seconds{{{_labels(node=n.node)}}} {stamp:.3f}" for n in nodes]
    return "\n".join(lines) + "\n"


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
