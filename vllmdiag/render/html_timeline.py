"""The node report's rank strip and timeline of the passes (issue 26), drawn from what analysis put in each
deployment (``rank_strip``, ``timeline``: model/timeline.py); nothing is recomputed here.

Strip: one cell per rank, coloured by what its stack does (waiting in a collective or at a sync point,
executing, idle), the culprit framed and said in words. Timeline: one row per rank, ring and /metrics
counter; a dot per look on a time axis that starts when the first pass began, filled where the thing had
changed since the look before; the last column says when it last moved, in words (for a reader without
colour, and for the printed page). Inline SVG only: no script, no asset. Every string through `h()`.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.render import report_data as rd
from vllmdiag.render.html_layers import h
from vllmdiag.vocab import stack_classes as sc

TRACK_W, TRACK_H, PAD = 360, 16, 6
KIND = {sc.COLLECTIVE: "wait", sc.SYNC_POINT: "wait", sc.EXECUTING: "run", sc.ENGINE_BUSY: "run", sc.IDLE: "idle",
        sc.ENGINE_IDLE: "idle", sc.API_IDLE: "idle"}
ODD_STATES = ("T", "t", "Z", "D", "X")  # stopped, traced, zombie, uninterruptible, dead: said in the cell
LEGEND = (("wait", "waits in a collective / at a sync point"), ("run", "executing"), ("idle", "idle"),
          ("other", "another class"), ("none", "no stack read"))


def strip_and_timeline(node: rd.NodeData) -> str:
    out = []
    for dep in node.deployments:
        strip, tl = rd.rank_strip(dep), rd.timeline(dep)
        if not strip and not tl:
            continue
        head = f" <span class=muted>deployment {h(dep.get('id'))}</span>" if len(node.deployments) > 1 else ""
        if strip:
            out.append(f"<section class='ranks' data-deployment='{h(dep.get('id'))}'><h3>Ranks{head}</h3>"
                       f"{_strip(strip)}</section>")
        if tl and tl["rows"]:
            culprits = {str(c.get("label")) for c in strip if c.get("culprit")}
            out.append(f"<section class='timeline' data-deployment='{h(dep.get('id'))}'><h3>Timeline of the passes{head}</h3>"
                       f"{_timeline(tl, culprits)}</section>")
    return "".join(out)


def _kind(cls: Any) -> str:
    return "none" if not cls else KIND.get(str(cls).split(":")[0], "other")


def _strip(cells: list[dict[str, Any]]) -> str:
    items = []
    for c in cells[:512]:
        culprit = bool(c.get("culprit"))
        cls = c.get("stack_class")
        word = f"{c.get('label')} (pid {c.get('pid')}): {cls or 'no stack read'}" + (", the culprit" if culprit else "")
        items.append(f"<span class='rank {_kind(cls)}{' culprit' if culprit else ''}' data-rank='{h(c.get('label'))}' "
                     f"title='{h(word)}'><b>{h(c.get('label'))}</b><small>{h(cls or 'no stack')}</small>"
                     + (f"<small class='state-{h(c['state'])}'>state {h(c['state'])}</small>" if c.get("state") in ODD_STATES
                        else "") + ("<em>◀ culprit</em>" if culprit else "") + "</span>")
    legend = "".join(f"<span><span class='rank-key {k}'></span> {w}</span>" for k, w in LEGEND)
    return f"<div class='strip'>{''.join(items)}</div><p class='legend'>{legend}</p>"


def _timeline(tl: dict[str, Any], culprits: set[str]) -> str:
    span = max([float(tl.get("window_s") or 0.0), *(t for r in tl["rows"] for t in r["looks"])]) or 1.0
    passes = [float(p) for p in tl.get("passes") or [0.0]]
    head = (f"<tr><th>what</th><th>looked at, s after the first pass began ({len(passes)} pass"
            f"{'es' if len(passes) != 1 else ''})<br>{_axis(span, passes)}</th><th>last moved</th></tr>")
    rows = "".join(_row(r, span, passes, r["name"] in culprits) for r in tl["rows"][:200])
    watched = float(tl.get("window_s") or 0.0)
    return (f"<p>What the verdict's \"moved\" or \"nothing moved\" rests on: each rank's stack, each shared-memory ring's "
            f"flags and counts, each /metrics counter, looked at over {watched:.2f} s.</p>"
            f"<table class='timeline'>{head}{rows}</table><p class='legend muted'>● changed since the look before · "
            f"○ the same as the look before (or the first look) · blue tick: a pass began</p>")


def _x(t: float, span: float) -> float:
    return round(PAD + (TRACK_W - 2 * PAD) * min(max(t, 0.0), span) / span, 1)


def _axis(span: float, passes: list[float]) -> str:
    ticks = "".join(f"<line x1='{_x(t, span)}' y1='10' x2='{_x(t, span)}' y2='14' stroke='#6e7781'/>"
                    f"<text x='{_x(t, span)}' y='9' font-size='9' text-anchor='{anchor}' fill='#6e7781'>{t:.2f} s</text>"
                    for t, anchor in ((0.0, "start"), (span / 2, "middle"), (span, "end")))
    marks = "".join(f"<line x1='{_x(p, span)}' y1='12' x2='{_x(p, span)}' y2='18' stroke='#0969da' stroke-width='2'/>"
                    for p in passes)
    return (f"<svg class='axis' width='{TRACK_W}' height='18' role='img' aria-label='time axis, 0 to {span:.2f} s; "
            f"blue marks: a pass began'><line x1='{PAD}' y1='14' x2='{TRACK_W - PAD}' y2='14' stroke='#6e7781'/>"
            f"{ticks}{marks}</svg>")


def _row(r: dict[str, Any], span: float, passes: list[float], culprit: bool) -> str:
    moved = {round(float(t), 3) for t in r["moved"]}
    dots = "".join(f"<circle cx='{_x(float(t), span)}' cy='8' r='3.5' "
                   + ("fill='#0969da' stroke='#0969da'/>" if round(float(t), 3) in moved else
                      "fill='#fff' stroke='#6e7781'/>") for t in r["looks"][:400])
    lines = "".join(f"<line x1='{_x(p, span)}' y1='0' x2='{_x(p, span)}' y2='{TRACK_H}' stroke='#d0d7de'/>" for p in passes)
    last = max(moved) if moved else None
    n = len(r["looks"])
    said = (f"at {last:.2f} s" if last is not None else "never") + f" ({n} look{'s' if n != 1 else ''})"
    label = f"{r['name']}: {n} looks, " + (f"changed at {', '.join(f'{t:.2f}' for t in sorted(moved))} s" if moved
                                            else "never changed")
    svg = (f"<svg class='track' width='{TRACK_W}' height='{TRACK_H}' role='img' aria-label='{h(label)}'><title>{h(label)}"
           f"</title><line x1='{PAD}' y1='8' x2='{TRACK_W - PAD}' y2='8' stroke='#eaeef2'/>{lines}{dots}</svg>")
    mark = " class='culprit-row'" if culprit else ""
    return (f"<tr data-kind='{h(r['kind'])}'{mark}><td><span class=muted>{h(r['kind'])}</span> "
            f"<span class='mono{' culprit' if culprit else ''}'>{h(r['name'])}</span></td><td>{svg}</td>"
            f"<td class='{'moved' if moved else 'still'}'>{h(said)}</td></tr>")
