"""The incident report (`--report x.html`): one self-contained page to attach to a ticket.

Built from `report.render_dict()` only (the JSON contract, the sections analysis attached). Header
(verdict, layer, confidence, hosts, time, tool version, command, collection budget and what did not
fully see), findings by severity with their playbooks inline, the fleet grid for a fleet, then one
section per node and layer in bisection order. No script, no link out, no external asset; every string escaped.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.render import report_data as rd
from vllmdiag.render.culprits import limited
from vllmdiag.render.html_css import CSS
from vllmdiag.render.html_layers import h, h_lines, layer_sections, tag
from vllmdiag.render.html_timeline import strip_and_timeline

CELL_CLASS = {".": "ok", "X": "culprit", "b": "blocked", "d": "degraded", "?": "unknown"}
CELL_WORD = {".": "ok", "X": "culprit", "b": "blocked", "d": "degraded", "?": "unknown"}


def to_html(d: dict[str, Any], argv: list[str] | None = None) -> str:
    v = d.get("verdict") or {}
    nodes = rd.nodes(d)
    title = f"vllmdiag: {v.get('status', '?')}" + (f" at the {v['layer']} layer" if v.get("layer") else "")
    body = [header(d, nodes, argv)]
    if "nodes" in d:
        body.append(fleet_grid(d))
    body.append(findings_section(d))
    fleet = len(nodes) > 1
    healthy = [n for n in nodes if fleet and n.deployments and rd.node_status(n) == "healthy"]
    body += [node_section(n, fleet, v.get("layer")) for n in nodes if n not in healthy]
    if healthy:  # said in one line; each still opens (the grid links into it, and a browser opens it there)
        body.append(f"<details class='healthy-nodes'><summary>{len(healthy)} healthy node{'s' if len(healthy) > 1 else ''}"
                    f" ({h(rd.fold([n.name for n in healthy]))}): their sections</summary>"
                    + "".join(node_section(n, fleet, v.get("layer")) for n in healthy) + "</details>")
    body.append("<footer>Written by vllmdiag, a read-only tool: nothing was sent to a vLLM socket, nothing was "
                "written to /dev/shm, no process was signalled.</footer>")
    # The CSP forbids every load and every script: the page is complete as written, and even a string
    # that escaped escaping could not run or call out.
    return ("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>{h(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def header(d: dict[str, Any], nodes: list[rd.NodeData], argv: list[str] | None) -> str:
    v = d.get("verdict") or {}
    status = str(v.get("status", "?"))
    layer = f" at the <b>{h(v['layer'])}</b> layer" if v.get("layer") else ""
    out = [f"<header class='banner {h(status)}' id='verdict'><h1><span class='status {h(status)}'>{h(status.upper())}</span>"
           f"{layer}</h1><p>{h(v.get('summary'))}</p>", culprits(v)]
    out.append(f"<dl class='meta'>{meta_rows(d, nodes, argv)}</dl></header>")
    evidence = rd.unsaid_evidence(v)
    if evidence:
        out.append("<h2>Evidence</h2><ul>" + "".join(f"<li>{h(e)}</li>" for e in evidence) + "</ul>")
    if v.get("next_steps"):
        out.append("<h2>Next read-only steps</h2>" + steps_html([str(s) for s in v["next_steps"]]))
    return "\n".join(out)


def steps_html(steps: list[str]) -> str:
    """Commands in a block that copies as commands: the `$` prompt is drawn by CSS (.cmd::before, not text,
    so neither a copy nor the page's text carries it); a step that is prose is a sentence, not a command
    (issue 35 item 5)."""
    prose = "".join(f"<p>{h(s)}</p>" for s in steps if not rd.is_command(s))
    cmds = [s for s in steps if rd.is_command(s)]
    return prose + ("<pre class='cmds'>" + "\n".join(f"<span class='cmd'>{h(s)}</span>" for s in cmds) + "</pre>"
                    if cmds else "")


def culprits(v: dict[str, Any]) -> str:
    rows = v.get("culprits") or []
    if not rows:
        return ""
    lines, more = limited(rows, 12)  # alike workers folded; the rest named, never dropped (issue 35 item 2)
    summary = v.get("summary")
    unseen = "".join(f"<li>{h(c.kind)}: <span class='mono'>{h(c.title)}</span> ({h(c.reason)})</li>"
                     for c in lines if c.kind != "culprit")  # nodes the sweep could not read: not blamed
    blamed = [c for c in lines if c.kind == "culprit"]
    items = "".join(f"<li><span class='mono culprit'>{h(c.title)}</span> on {h(c.node)}, {h(c.where)}"
                    + ("" if rd.said(c.reason, summary) else f": {h(c.reason)}") + "</li>"
                    for c in blamed) + (f"<li>{h(more)}</li>" if more else "")
    head = f"<p><b>Culprit{'s' if len(blamed) > 1 else ''}</b></p>" if blamed else "<p><b>Not reached</b></p>"
    return f"{head}<ul class='culprits'>{items}{unseen}</ul>"


def meta_rows(d: dict[str, Any], nodes: list[rd.NodeData], argv: list[str] | None) -> str:
    snaps = rd.collection(d)
    v = d.get("verdict") or {}
    times = sorted(str(s.collected_at) for s in snaps if s.collected_at)
    versions = sorted({str(s.vllmdiag_version) for s in snaps if s.vllmdiag_version})
    budget = rd.budget(snaps)
    took = max((float(s.duration_s or 0) for s in snaps), default=0.0)
    blind = rd.not_seen(d, snaps)
    names = rd.report_hosts(d, nodes)
    rows = [("confidence", v.get("confidence", "?")), ("host" + ("s" if len(names) > 1 else ""), rd.hosts(names) or "?"),
            ("collected", " … ".join(dict.fromkeys([times[0], times[-1]])) if times else "?"),
            ("tool version", "vllmdiag " + (", ".join(versions) or "?")),
            ("command", " ".join(argv) if argv else "(not recorded)"),
            ("collection", f"took {took:.2f} s" + (f" of a {budget} budget" if budget else ""))]
    out = "".join(f"<dt>{h(k)}</dt><dd>{h(val)}</dd>" for k, val in rows)
    limits = "".join(f"<li>{h(b)}</li>" for b in blind[:30]) or "<li>every probe saw what it looked for</li>"
    return out + f"<dt>timed out / not seen</dt><dd><ul>{limits}</ul></dd>"


def findings_section(d: dict[str, Any]) -> str:
    from vllmdiag.playbooks.playbook import load_playbooks

    books = load_playbooks()
    items: list[str] = []
    quiet: list[str] = []
    for f, where in rd.folded_findings(list(d.get("findings") or [])):
        sev = str(f.get("severity"))
        book = books.get(str(f.get("code"))) or {}
        confirm = rd.confirm_commands(d, f)
        opened = " open" if sev == "critical" else ""
        playbook = (f"<details{opened}><summary>playbook: {h(book.get('title', f.get('code')))}</summary>"
                    f"<p>{h(book.get('meaning', ''))}</p>" + (f"<p>Confirm (read-only):</p><pre>{h_lines(confirm)}</pre>"
                                                              if confirm else "") + "</details>") if book else ""
        (quiet if sev == "info" else items).append(
            f"<div class='finding {h(sev)}' data-code='{h(f.get('code'))}'>{tag(sev, sev)} <b class=mono>"
            f"{h(f.get('code'))}</b> <span class=muted>{h(f.get('layer'))} · {h(where)}</span>"
            f"<p>{h(f.get('message'))}</p>{playbook}</div>")
    if quiet:
        items.append(f"<details class='info-findings'><summary>{len(quiet)} informational finding(s)</summary>"
                     f"{''.join(quiet)}</details>")
    return "<h2>Findings, most severe first</h2>" + ("".join(items) or "<p>No findings.</p>")


def fleet_grid(d: dict[str, Any]) -> str:
    """Node x GPU grid: one row per node that is not healthy, one cell per GPU (worker), coloured by state,
    culprit framed, with why; the healthy nodes folded into one row that opens to theirs."""
    nodes = sorted(d.get("nodes") or [], key=lambda n: (rd.STATUS_ORDER.get(_state(n), 5), str(n.get("name"))))
    healthy = [n for n in nodes if _state(n) == "healthy"]
    rows = [_grid_row(d, n) for n in nodes if _state(n) != "healthy"]
    if healthy:
        names = rd.fold([str(n.get("name")) for n in healthy])
        rows.append(f"<tr class='healthy-fold'><td colspan='4'><details><summary>{len(healthy)} healthy node"
                    f"{'s' if len(healthy) > 1 else ''}: {h(names)}</summary><table class='grid'>"
                    f"{''.join(_grid_row(d, n) for n in healthy)}</table></details></td></tr>")
    legend = "".join(f"<span><span class='gpu {c}'></span> {w}</span>" for c, w in
                     (("ok", "healthy"), ("blocked", "in a blocked deployment"), ("culprit", "culprit"),
                      ("degraded", "degraded"), ("unknown", "inconclusive")))
    return (f"<h2>Fleet: nodes × GPUs</h2><p class='legend'>{legend}</p>"
            f"<table class='grid'>{''.join(rows)}</table>")


def _grid_row(d: dict[str, Any], n: dict[str, Any]) -> str:
    name, state = str(n.get("name")), _state(n)
    cells = "".join(f"<span class='gpu {CELL_CLASS.get(ch, 'unknown')}' title='{h(name)} GPU {i}: "
                    f"{CELL_WORD.get(ch, '?')}'>{i}</span>" for i, ch in enumerate(str(n.get("gpus") or "")))
    cells = cells or "<span class='gpu none'>–</span>"
    link = f"<a href='#node-{h(_anchor(name))}'>{h(name)}</a>" if n.get("status") == "ok" else h(name)
    return (f"<tr data-node='{h(name)}'><td>{link}</td><td>{tag(state, state)}</td><td>{cells}</td>"
            f"<td class='why'>{h(rd.node_why(d, n))}</td></tr>")


def _state(n: dict[str, Any]) -> str:
    return str(n.get("verdict") or "ok") if n.get("status") == "ok" else str(n.get("status"))


def _anchor(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)[:120]


def node_section(node: rd.NodeData, fleet: bool, layer: str | None) -> str:
    anchor = f"node-{_anchor(node.name)}"
    statuses = sorted({str((dep.get("verdict") or {}).get("status")) for dep in node.deployments}) or ["no-deployment"]
    title = f"Node {h(node.name)} " + " ".join(tag(s, s) for s in statuses) if fleet else "Layers, in bisection order"
    node_layer = next((dep["verdict"].get("layer") for dep in node.deployments if (dep.get("verdict") or {}).get("layer")), None)
    over_time = strip_and_timeline(node)
    if over_time and not fleet:  # one node: the ranks and the passes get their own heading, above the layers
        return (f"<section class='node' id='{h(anchor)}'><h2>Ranks and passes</h2>{over_time}<h2>{title}</h2>"
                f"{layer_sections(node, anchor, layer)}</section>")
    return (f"<section class='node' id='{h(anchor)}'><h2>{title}</h2>{over_time}"
            f"{layer_sections(node, anchor, node_layer if fleet else layer)}</section>")
