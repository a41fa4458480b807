"""Ring view: one bar per shm ring of the reported deployments, readers as cells, the laggard in red.

Reads only the report's node sections (``Report.sections``, analysis/sections.py): each ring's role,
size, writer and readers, unread slots per reader, the readers a finding blames and the sampling words
were decided there; never collects nor decides, never reads the snapshot.

Drawn in every format (render/views.py): ``render`` the terminal's -v table, ``html`` the body of this
layer's section of a node in the HTML report, ``markdown`` its lines in the Markdown report; the latter
two read the same sections through ``report_data`` (a ``NodeData``).
"""

from __future__ import annotations

from typing import Any

from vllmdiag.model import Report
from vllmdiag.model.report import RingRow
from vllmdiag.render import report_data as rd
from vllmdiag.render.html_layers import h
from vllmdiag.render.md_report import md, md_block

ROLE_NAMES = {"rpc_broadcast_mq": "rpc", "worker_response_mq": "response", "group_broadcaster": "group bcast",
              "unknown": "?"}


def render(report: Report, console: Any) -> None:
    rows = []
    for node, section in report.sections.items():
        if section.rings_error is not None:
            raise section.rings_error  # the guarded view says it could not draw (untrusted data)
        rows += [(node, r) for r in section.rings]
    if not rows:
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title="shm rings (unread slots per reader; sampled)", show_lines=False)
    for col in ("ring", "role", "writer", "readers", "state"):
        table.add_column(col, overflow="fold", min_width=4 if col != "readers" else None)
    for _, ring in sorted(rows, key=lambda x: (x[0], x[1].kind, x[1].name)):
        table.add_row(Text(ring.name), Text(f"{ROLE_NAMES.get(ring.kind, ring.kind)} {ring.size}"), Text(ring.term_writer),
                      bar(ring), Text(ring.term_state))
    console.print(table)


def bar(ring: RingRow) -> Any:
    """`|TP0 0|TP1 0|TP2 10|TP3 0|`: green caught up, yellow behind, red reverse the blamed reader."""
    from rich.text import Text

    k = ring.max_chunks
    text = Text("|")
    for i, (who, value) in enumerate(zip(ring.term_readers, ring.term_unread, strict=True)):
        style = "bold white on red" if i in ring.laggards else ("green" if value == 0 else "yellow")
        text.append(f"{who} {value}{'/' + str(k) if value == k else ''}", style=style)
        text.append("|")
    return text


# ---- HTML: the body of this layer's section of a node (render/html_layers.py) ----
def html(node: rd.NodeData) -> str:
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


# ---- Markdown: the lines of this layer's section of a node (render/md_report.py) ----
def markdown(node: rd.NodeData) -> list[str]:
    """One line per ring (the Markdown report's queue section)."""
    return [_ring_line(r) for r in rd.rings(node)] + [""]


def _ring_line(r: rd.RingView) -> str:
    cells = " | ".join(f"{md(name)} {u}/{r.max_chunks}" + (" **(waits on this reader)**" if i in r.laggards else "")
                       for i, (name, u) in enumerate(zip(r.readers, r.unread, strict=False)))
    series = [max([int(u or 0) for u in s.get("unread") or [0]] or [0]) for s in r.samples if isinstance(s, dict)][:20]
    over = (f"; unread slots of the most-behind reader (0 to {r.max_chunks}) over {len(series)} samples: "
            f"{', '.join(map(str, series))}" if len(series) > 1 else "")
    return f"- {md_block(r.role)} {md(r.name)} (writer {md(r.writer)}; {md(r.state)}): {cells}{over}"
