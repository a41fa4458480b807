"""Rich view of the GPU layer: stack classes folded into rank sets, and one row per GPU (pure).

Reads only the report: its node sections (``Report.sections``, analysis/sections.py: the stack classes
analysis folded, each node's NVML rows) and the deployments' culprits. Prints nothing when neither is there.

Drawn in every format (render/views.py): ``render`` the terminal's -v table, ``html`` the body of this
layer's section of a node in the HTML report, ``markdown`` its lines in the Markdown report; the latter
two read the same sections through ``report_data`` (a ``NodeData``).
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report
from vllmdiag.render import report_data as rd
from vllmdiag.render.html_layers import h, tag
from vllmdiag.render.md_report import md, md_block
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


# ---- HTML: the body of this layer's section of a node (render/html_layers.py) ----
def html(node: rd.NodeData) -> str:
    classes = rd.stack_classes(node)
    out = ""
    if classes:
        out += "<table class='stacks'><tr><th>ranks / process</th><th>class</th><th>backend</th><th>where</th></tr>"
        for c in classes:
            stack = "".join(f"{h(f)}\n" for f in c["stack"])
            detail = (f"<details><summary>full stack ({len(c['stack'])} frames, innermost first)</summary>"
                      f"<pre>{stack}</pre></details>") if c["stack"] else ""
            mark = " class='culprit-row'" if c["culprit"] else ""
            out += (f"<tr{mark}><td><span class='mono{' culprit' if c['culprit'] else ''}'>{h(c['label'])}</span>"
                    f"{' ' + tag('culprit', 'culprit') if c['culprit'] else ''}</td><td>{h(c.get('class'))}</td>"
                    f"<td>{h(c.get('backend') or '')}</td><td class=mono>{h(c.get('where') or '')}{detail}</td></tr>")
        out += "</table>"
    gpus = rd.gpus(node)
    if gpus:
        out += ("<table class='gpus'><tr><th>GPU</th><th>rank(s)</th><th>util %</th><th>power W</th><th>memory GiB</th>"
                "<th>ECC unc.</th><th>Xid</th></tr>")
        for g in gpus:
            mem = g.get("memory_used_bytes"), g.get("memory_total_bytes")
            out += (f"<tr><td>{h(g.get('index'))}</td><td>{h(', '.join(f'TP{r}' for r in g['ranks']) or '-')}</td>"
                    f"<td>{h(g.get('util_pct'))}</td><td>{h(g.get('power_w'))}</td>"
                    f"<td>{h(_gib_html(mem[0]))} / {h(_gib_html(mem[1]))}</td><td>{h(g.get('ecc_uncorrected_volatile'))}</td>"
                    f"<td>{h(', '.join(map(str, g.get('xid_events') or [])) or '-')}</td></tr>")
        out += "</table>"
    elif rd.nvml_probe(node):
        nvml = rd.nvml_probe(node) or {}
        out += f"<p class=muted>GPUs: NVML {h(nvml.get('status'))}: {h(nvml.get('reason'))}</p>"
    return out


def _gib_html(v: Any) -> str:
    return "?" if v is None else f"{float(v) / (1 << 30):.1f}"


# ---- Markdown: the lines of this layer's section of a node (render/md_report.py) ----
def markdown(node: rd.NodeData) -> list[str]:
    """Stack classes, then one line per GPU (the Markdown report's gpu section)."""
    out = []
    for c in rd.stack_classes(node):
        mark = " **culprit**" if c["culprit"] else ""
        out.append(f"- {md_block(c['label'])}{mark}: {md(c.get('class'))} in {md(c.get('where'))}")
    for g in rd.gpus(node):
        out.append(f"- GPU {md(g.get('index'))} (ranks {md(g['ranks'])}): util {md(g.get('util_pct'))} %, "
                   f"ECC unc. {md(g.get('ecc_uncorrected_volatile'))}")
    return out + [""]
