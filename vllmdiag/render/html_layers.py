"""One HTML section per layer of one node, in bisection order, evidence drawn where people look.

Every string from the report (titles, paths, frames, messages: all untrusted) goes through `h()`.
"""

from __future__ import annotations

from html import escape
from typing import Any

from vllmdiag.render import report_data as rd
from vllmdiag.render.safe import clean

MAX_ENDPOINTS = 200
MAX_CONNECTIONS = 50


def h(value: object) -> str:
    """Control characters made visible (an ANSI escape must not survive into a file), HTML-escaped."""
    return escape(clean("" if value is None else value), quote=True)


def h_lines(items: list[str]) -> str:
    """One line per item, for a <pre> block of commands: each is escaped on its own, since h() turns a
    newline inside a string into a visible \\x0a (a title cannot forge a line) and would do the same to
    the newlines that separate the commands."""
    return "\n".join(h(s) for s in items)


def tag(text: str, kind: str) -> str:
    return f"<span class='tag {h(kind)}'>{h(text)}</span>"


def layer_sections(node: rd.NodeData, anchor: str, layer: str | None) -> str:
    parts = []
    for name, build in (("process", process_tree), ("handshake", endpoints_section), ("queue", rings_section),
                        ("gpu", gpu_section), ("client", http_section)):
        body = build(node)
        mark = " " + tag("blocked here", "blocked") if name == layer else ""
        parts.append(f"<section id='{h(anchor)}-{name}' data-layer='{name}'><h3>{name}{mark}</h3>"
                     f"{body or '<p class=muted>nothing to show for this layer</p>'}</section>")
    return "\n".join(parts)


# ---- process ----------------------------------------------------------------------------------------
def process_tree(node: rd.NodeData) -> str:
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


# ---- handshake --------------------------------------------------------------------------------------
def endpoints_section(node: rd.NodeData) -> str:
    rows = rd.endpoints(node)[:MAX_ENDPOINTS]
    if not rows:
        return ""
    bad = [r for r in rows if r["problem"]]
    good = [r for r in rows if not r["problem"]]
    head = "<tr><th>endpoint</th><th>held by</th><th>peers</th><th>type</th><th>ZMTP</th><th>ms</th><th>meaning</th></tr>"
    out = f"<p>{len(rows)} ZMQ listeners; {len(bad)} with a problem.</p>"
    if bad:
        out += f"<table class='endpoints problems'>{head}{''.join(_endpoint_row(node, r) for r in bad)}</table>"
    if good:
        out += (f"<details><summary>{len(good)} endpoints without a problem</summary>"
                f"<table class='endpoints'>{head}{''.join(_endpoint_row(node, r) for r in good)}</table></details>")
    return out


def _endpoint_row(node: rd.NodeData, r: dict[str, Any]) -> str:
    procs = node.procs()
    holders = ", ".join(f"{rd.short_name(procs.get(p))} ({p})" for p in r["holders"][:12])
    kind = "critical" if r["problem"] else ("ok" if r["status"] == "ok" else "info")
    return (f"<tr><td class=mono>{h(r['endpoint'])}</td><td>{h(holders)}</td><td>{h(r['accepted'])}</td>"
            f"<td>{h(r['type'])}</td><td>{tag(r['status'], kind)}</td><td>{h(r['ms'] if r['ms'] is not None else '')}</td>"
            f"<td>{h(r['note'])}</td></tr>")


# ---- queue ------------------------------------------------------------------------------------------
def rings_section(node: rd.NodeData) -> str:
    rings = rd.rings(node)
    if not rings:
        return ""
    out = ["<p>Shared-memory rings: one bar per ring, one cell per reader; the cell fills with the slots it has "
           "not read yet (of the ring's chunks); a red frame marks the reader the ring waits on.</p>"]
    # Response rings (one per worker) that are fully read say one thing together: fold them.
    quiet = [r for r in rings if r.role == "response" and not r.laggards and not any(r.unread)]
    out += [_ring(r) for r in rings if r not in quiet]
    if quiet:
        out.append(f"<details><summary>{len(quiet)} response rings fully read (writers "
                   f"{h(', '.join(r.writer for r in quiet))})</summary>{''.join(_ring(r) for r in quiet)}</details>")
    return "".join(out)


def _ring(r: rd.RingView) -> str:
    cells = "".join(_reader_cell(r, i) for i in range(len(r.unread)))
    return (f"<div class='ring' data-ring='{h(r.name)}'><div><b>{h(r.role)}</b> <span class=mono>{h(r.name)}</span>"
            f"<br><span class=muted>writer {h(r.writer)}; {h(r.state)}</span></div>"
            f"<div class='bar'>{cells} {_sparkline(r)}</div></div>")


def _reader_cell(r: rd.RingView, i: int) -> str:
    value = r.unread[i]
    pct = 0 if not r.max_chunks else min(100, round(100 * value / r.max_chunks))
    fill = "#f4a6a6" if i in r.laggards or value == r.max_chunks else ("#f5d37a" if value else "#eaeef2")
    lag = " laggard" if i in r.laggards else ""
    title = f"{r.readers[i]}: {value} of {r.max_chunks} slots unread"
    return (f"<span class='cell{lag}' style='--pct:{pct}%;--fill:{fill}' title='{h(title)}'>{h(r.readers[i])} "
            f"{value}/{r.max_chunks}{' &#9664; waits on this reader' if lag else ''}</span>")


def _sparkline(r: rd.RingView) -> str:
    """Unread slots of the most-behind reader over the ring's samples, labelled with what is plotted, its
    axis (0 to the ring's chunks) and the samples' count and span (an inline SVG: no script, no asset)."""
    samples = [s for s in r.samples if isinstance(s, dict)][:200]
    series = [max([int(u or 0) for u in s.get("unread") or [0]] or [0]) for s in samples]
    if len(series) < 2:
        return ""
    top = max(r.max_chunks, max(series), 1)
    w, ht, left = 120, 26, 18
    pts = " ".join(f"{round(left + i * (w - left - 2) / (len(series) - 1), 1)},{round(ht - 3 - v * (ht - 6) / top, 1)}"
                   for i, v in enumerate(series))
    times = [float(s["t_s"]) for s in samples if isinstance(s.get("t_s"), (int, float))]
    span = f" over {times[-1] - times[0]:.2f} s" if len(times) == len(series) else ""
    flat = f", all {series[0]}" if len(set(series)) == 1 else f": {', '.join(map(str, series[:20]))}"
    caption = f"unread slots of the most-behind reader (0 to {top}), {len(series)} samples{span}{flat}"
    axis = (f"<text x='{left - 3}' y='8' font-size='8' text-anchor='end' fill='#6e7781'>{top}</text>"
            f"<text x='{left - 3}' y='{ht - 1}' font-size='8' text-anchor='end' fill='#6e7781'>0</text>"
            f"<line x1='{left}' y1='2' x2='{left}' y2='{ht - 2}' stroke='#d0d7de'/>"
            f"<line x1='{left}' y1='{ht - 3}' x2='{w}' y2='{ht - 3}' stroke='#d0d7de'/>")
    return (f"<span class='spark-box'><svg class='spark' width='{w}' height='{ht}' role='img' aria-label='{h(caption)}'>"
            f"<title>{h(caption)}</title>{axis}<polyline fill='none' stroke='#0969da' stroke-width='1.5' points='{pts}'/>"
            f"</svg><span class='spark-label muted'>{h(caption)}</span></span>")


# ---- gpu --------------------------------------------------------------------------------------------
def gpu_section(node: rd.NodeData) -> str:
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
                    f"<td>{h(_gib(mem[0]))} / {h(_gib(mem[1]))}</td><td>{h(g.get('ecc_uncorrected_volatile'))}</td>"
                    f"<td>{h(', '.join(map(str, g.get('xid_events') or [])) or '-')}</td></tr>")
        out += "</table>"
    elif rd.nvml_probe(node):
        nvml = rd.nvml_probe(node) or {}
        out += f"<p class=muted>GPUs: NVML {h(nvml.get('status'))}: {h(nvml.get('reason'))}</p>"
    return out


def _gib(v: Any) -> str:
    return "?" if v is None else f"{float(v) / (1 << 30):.1f}"


# ---- client -----------------------------------------------------------------------------------------
def http_section(node: rd.NodeData) -> str:
    out = ""
    for s in rd.http_servers(node):
        health = s.get("health") or {}
        out += f"<p><b>HTTP {h(s.get('address'))}</b>: /health {h(health.get('status') or health.get('error') or '-')}</p>"
        samples = s.get("metrics") or []
        if samples:
            out += "<table class='metrics'><tr><th>at s</th><th>running</th><th>waiting</th><th>generated tokens</th></tr>"
            out += "".join(f"<tr><td>{h(m.get('at_s'))}</td><td>{h(m.get('running'))}</td><td>{h(m.get('waiting'))}</td>"
                           f"<td>{h(m.get('generation_tokens'))}</td></tr>" for m in samples[:20]) + "</table>"
        conns = sorted(s.get("connections") or [], key=lambda c: -max([q or 0 for q in c.get("send_q") or [0]] or [0]))
        if conns:
            out += "<table class='connections'><tr><th>client</th><th>Send-Q (samples)</th><th>client Recv-Q</th></tr>"
            for c in conns[:MAX_CONNECTIONS]:
                sq = [q for q in c.get("send_q") or [] if q is not None]
                grow = len(sq) >= 2 and 0 < sq[0] <= sq[-1]
                out += (f"<tr><td class=mono>{h(c.get('remote'))}</td><td{' class=culprit' if grow else ''}>"
                        f"{h(' → '.join(map(str, sq)))}</td>"
                        f"<td>{h(' → '.join(str(q) for q in c.get('peer_recv_q') or [] if q is not None))}</td></tr>")
            out += "</table>"
    return out
