"""Rich view of the GPU layer: stack classes folded into rank sets, and one row per GPU (pure).

Reads only the report: its node sections (``Report.sections``, analysis/sections.py: the stack classes
analysis folded, each node's NVML rows) and the deployments' culprits. Prints nothing when neither is there.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report
from vllmdiag.render.text import escape
from vllmdiag.vocab.stack_classes import COLLECTIVE, ENGINE_BUSY, ENGINE_IDLE, EXECUTING, IDLE, SYNC_POINT, UNKNOWN

# "executing" is not green: the rank that never reached its peers' collective is usually executing.
CLASS_STYLE = {COLLECTIVE: "yellow", SYNC_POINT: "yellow", EXECUTING: "", IDLE: "dim",
               ENGINE_IDLE: "dim", ENGINE_BUSY: "bold red", UNKNOWN: "magenta"}


def render(report: Report, console: Any) -> None:
    from rich.table import Table

    sections = list(report.sections.values())
    rows = [row for section in sections for row in _checked(section.stacks_error, section.stacks)]
    if rows:
        table = Table(title="stack classes (py-spy)", title_justify="left")
        for col in ("deployment", "ranks / process", "class", "backend", "where"):
            table.add_column(col, overflow="fold")
        blamed = _blamed_ranks(report)
        for row in rows:
            r = row.entry
            if row.other:
                table.add_row(escape(row.deployment or ""), escape(row.label), _cls(r["class"]), "",
                              escape(r.get("where") or ""))
                continue
            culprit = (row.deployment, str(r["ranks"])) in blamed
            who = f"[bold white on red]{escape(r['ranks'])} ◀ culprit[/]" if culprit else escape(r["ranks"])
            table.add_row(escape(row.deployment or ""), who, _cls(r["class"]), escape(r.get("backend") or ""),
                          escape(r.get("where") or ""))
        console.print(table)
    gpus = [(s.node, g.nvml) for s in sections for g in _checked(s.errors.get("gpus"), s.gpus)]
    if gpus:
        table = Table(title="GPUs (NVML)", title_justify="left")
        for col in ("node", "gpu", "util %", "power W", "memory GiB", "temp C", "ECC unc", "xid", "pids"):
            table.add_column(col, overflow="fold")
        for node, g in gpus:
            table.add_row(escape(node), str(g.get("index")), _num(g.get("util_pct")),
                          f"{_num(g.get('power_w'))}/{_num(g.get('power_limit_w'))}",
                          f"{_gib(g.get('memory_used_bytes'))}/{_gib(g.get('memory_total_bytes'))}",
                          _num(g.get("temperature_c")), _num(g.get("ecc_uncorrected_volatile")),
                          escape(",".join(map(str, g.get("xid_events") or [])) or "-"),
                          escape(",".join(str(p.get("pid")) for p in g.get("processes") or []) or "-"))
        console.print(table)


def _checked(error: Exception | None, rows: list[Any]) -> list[Any]:
    """A section part's rows, or the error analysis met building it (the guarded view says so)."""
    if error is not None:
        raise error
    return rows


def _blamed_ranks(report: Report) -> set[tuple[str | None, str]]:
    """(deployment id, "TP5") of each culprit worker, to mark its stack class row."""
    out: set[tuple[str | None, str]] = set()
    for dep in report.deployments:
        d = dep.to_dict()
        for c in d["verdict"].get("culprits", []):
            if c.get("role") == "worker" and c.get("rank") is not None:
                out.add((d["id"], f"TP{c['rank']}"))
    return out


def _cls(label: str) -> str:
    style = CLASS_STYLE.get(label.split(":")[0], "")
    return f"[{style}]{escape(label)}[/]" if style else escape(label)


def _num(v: Any) -> str:
    return "?" if v is None else str(v)


def _gib(v: Any) -> str:
    return "?" if v is None else f"{v / (1 << 30):.1f}"
