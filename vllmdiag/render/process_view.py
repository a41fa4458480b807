"""Process view: each deployment's process tree, the culprit marked, in the HTML and Markdown reports.

The terminal draws the processes in its deployment tree (render/text.py), so this view has no
``render``; reads only the report (``report_data``), never the snapshot.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.render import report_data as rd
from vllmdiag.render.html_layers import h, tag
from vllmdiag.render.md_report import fence, md


# ---- HTML: the body of this layer's section of a node (render/html_layers.py) ----
def html(node: rd.NodeData) -> str:
    out = []
    for dep in node.deployments:
        procs = dep.get("processes", [])
        pids = {p["pid"] for p in procs}
        kids: dict[Any, list[dict[str, Any]]] = {}
        for p in procs:
            kids.setdefault(p["ppid"] if p["ppid"] in pids else None, []).append(p)
        status = (dep.get("verdict") or {}).get("status", "?")
        version = rd.vllm_label(dep)
        out.append(f"<p><b>deployment {h(dep.get('id'))}</b> {tag(status, status)}"
                   + (f" <span class='muted'>{h(version)}</span>" if version else "") + "</p>"
                   f"<ul class='tree'>{_branch(node, kids, None, 0)}</ul>")
    return "".join(out)


def _branch(node: rd.NodeData, kids: dict[Any, list[dict[str, Any]]], parent: Any, depth: int) -> str:
    if depth > 32:
        return ""
    items = []
    for p in sorted(kids.get(parent, []), key=lambda p: (p.get("rank") is None, p.get("rank") or 0, p["pid"])):
        culprit = rd.is_culprit(node, p)
        state = str(p.get("state") or "?")
        top = parent is None and depth == 0 and p.get("role") != "api_server"
        orphan = f" <span class=muted>(ppid {h(p['ppid'])})</span>" if top else ""
        label = (f"<span class='mono{' culprit' if culprit else ''}' data-pid='{h(p['pid'])}'>{h(p.get('title'))}</span> "
                 f"pid {h(p['pid'])} <span class='state-{h(state)}'>{h(state)}</span>{orphan}"
                 + (" " + tag("culprit", "culprit") if culprit else ""))
        sub = _branch(node, kids, p["pid"], depth + 1)
        items.append(f"<li>{label}{f'<ul>{sub}</ul>' if sub else ''}</li>")
    return "".join(items)


# ---- Markdown: the lines of this layer's section of a node (render/md_report.py) ----
def markdown(node: rd.NodeData) -> list[str]:
    """Each deployment's processes, one line each, in a fence (the Markdown report's process section)."""
    out: list[str] = []
    for dep in node.deployments:
        version = rd.vllm_label(dep)
        out += [f"Deployment {md(dep.get('id'))}: {md((dep.get('verdict') or {}).get('status'))}"
                + (f" ({md(version)})" if version else ""), ""]
        out += fence([_proc_line(node, p) for p in dep.get("processes", [])]) + [""]
    return out


def _proc_line(n: rd.NodeData, p: dict[str, Any]) -> str:
    rank = f" rank {p['rank']}" if p.get("rank") is not None else ""
    mark = "  ← culprit" if rd.is_culprit(n, p) else ""
    return f"pid {p.get('pid')} ppid {p.get('ppid')} {p.get('state')} {p.get('title')}{rank}{mark}"
