"""The Markdown incident report (`--report x.md`): the HTML report's sections as text.

Built from the JSON contract only. No raw HTML: every value is escaped for Markdown (`md()`), and
code blocks use a fence longer than any backtick run inside them, so nothing from a snapshot can
open a tag, a link or end a block early.
"""

from __future__ import annotations

import re
from typing import Any

from vllmdiag.render import report_data as rd
from vllmdiag.render import views
from vllmdiag.render.culprits import limited as culprit_lines
from vllmdiag.render.safe import clean, md_escape


def md(value: object) -> str:
    """A value inside a line (after other text): control characters made visible, then escaped for what
    Markdown would act on there (render/safe.py), so `vllmdiag 0.1.0` stays as written."""
    return md_escape("" if value is None else value, line_start=False)


def md_block(value: object) -> str:
    """A value that starts a line or a list item: a leading `#`, `-`, `1.` ... is escaped too."""
    return md_escape("" if value is None else value)


def fence(lines: list[str]) -> list[str]:
    """A code block: shown verbatim, so only what could break out of it is neutralised: control
    characters, a backtick run as long as the fence (the fence grows past it), and < (some renderers
    pass raw HTML through even near code; shown as an entity). A > opens nothing, so a command's
    `2>/dev/null` stays as it must be pasted (issue 35 item 5)."""
    body = [clean(s).replace("<", "&lt;") for s in lines]
    ticks = "`" * max(3, 1 + max((len(m) for s in body for m in re.findall(r"`+", s)), default=0))
    return [ticks + "text", *body, ticks]


def to_markdown(d: dict[str, Any], argv: list[str] | None = None) -> str:
    v = d.get("verdict") or {}
    nodes = rd.nodes(d)
    lines = [f"# vllmdiag: {md(v.get('status'))}" + (f" at the {md(v['layer'])} layer" if v.get("layer") else ""), "",
             md_block(v.get("summary")), ""]
    lines += _culprits(v) + _meta(d, nodes, argv)
    evidence = rd.unsaid_evidence(v)  # the summary is said once (issue 35 item 8)
    if evidence:
        lines += ["## Evidence", ""] + [f"- {md_block(e)}" for e in evidence] + [""]
    if v.get("next_steps"):  # commands in a fence, a step that is prose as a sentence (issue 35 item 5)
        steps = [str(s) for s in v["next_steps"]]
        cmds = [s for s in steps if rd.is_command(s)]
        lines += ["## Next read-only steps", "", *[f"{md_block(s)}\n" for s in steps if not rd.is_command(s)],
                  *(fence(cmds) + [""] if cmds else [])]
    lines += _findings(d)
    if "nodes" in d:
        lines += _fleet(d)
    for n in nodes:
        lines += _node(n, len(nodes) > 1)
    return "\n".join(lines) + "\n"


def _culprits(v: dict[str, Any]) -> list[str]:
    rows = v.get("culprits") or []
    if not rows:
        return []
    lines, more = culprit_lines(rows, 12)  # alike workers folded; the rest named, never dropped (issue 35 item 2)
    unseen = [c for c in lines if c.kind != "culprit"]  # nodes the sweep could not read: not blamed
    lines = [c for c in lines if c.kind == "culprit"]
    out = (["## Culprits", ""] if lines else []) + (["## Not reached", ""] if not lines and unseen else [])
    out += [f"- {md(c.kind)}: **{md(c.title)}** ({md(c.reason)})" for c in unseen]
    for c in lines:
        why = "" if rd.said(c.reason, v.get("summary")) else f": {md(c.reason)}"
        out.append(f"- **{md(c.title)}** on {md(c.node)}, {c.where}{why}")
    return out + ([f"- {md_block(more)}"] if more else []) + [""]


def _meta(d: dict[str, Any], nodes: list[rd.NodeData], argv: list[str] | None) -> list[str]:
    snaps = rd.collection(d)
    times = sorted(str(s.collected_at) for s in snaps if s.collected_at)
    budget = rd.budget(snaps)
    took = max((float(s.duration_s or 0) for s in snaps), default=0.0)
    names = rd.report_hosts(d, nodes)
    out = ["## Collection", "", f"- confidence: {md((d.get('verdict') or {}).get('confidence'))}",
           f"- host{'s' if len(names) > 1 else ''}: {md(rd.hosts(names) or '?')}",
           f"- collected: {md(times[0] if times else '?')}",
           f"- tool version: vllmdiag {md(', '.join(sorted({str(s.vllmdiag_version) for s in snaps})) or '?')}",
           f"- collection took {took:.2f} s" + (f" of a {budget} budget" if budget else "")]
    if argv:
        out += ["- command:", "", *fence([" ".join(argv)])]
    blind = rd.not_seen(d, snaps)
    out += ["- timed out / not seen: " + ("; ".join(md(b) for b in blind[:30]) or "nothing, every probe saw what it looked for")]
    return out + [""]


def _findings(d: dict[str, Any]) -> list[str]:
    from vllmdiag.playbooks.playbook import load_playbooks

    books = load_playbooks()
    out = ["## Findings", ""]
    for f, where in rd.folded_findings(list(d.get("findings") or [])):
        out.append(f"### {md(f.get('severity'))}: {md(f.get('code'))} ({md(f.get('layer'))}, {md(where)})")
        out += ["", md_block(f.get("message")), ""]
        book = books.get(str(f.get("code")))
        if book:
            out += [f"*Playbook:* {md(book.get('title'))}. {md(book.get('meaning'))}", ""]
            confirm = rd.confirm_commands(d, f)
            if confirm:
                out += ["Confirm (read-only):", "", *fence(confirm), ""]
    return out if len(out) > 2 else out + ["No findings.", ""]


def _fleet(d: dict[str, Any]) -> list[str]:
    out = ["## Fleet: nodes x GPUs", "", "GPU cells: `.` healthy, `b` in a blocked deployment, `X` culprit, `d` degraded, "
           "`?` inconclusive.", "", "| node | state | GPUs | why |", "|---|---|---|---|"]
    healthy: dict[str, list[str]] = {}  # one line for the healthy nodes of each GPU picture
    for n in d.get("nodes") or []:
        state = str(n.get("verdict") or "ok") if n.get("status") == "ok" else str(n.get("status"))
        gpus = md(n.get("gpus") or "-").replace("\\|", "").replace("`", "")
        if state == "healthy":
            healthy.setdefault(gpus, []).append(str(n.get("name")))
            continue
        out.append(f"| {md(n.get('name'))} | {md(state)} | `{gpus}` | {md(rd.node_why(d, n))} |")
    for gpus, names in healthy.items():
        out.append(f"| {md(rd.fold(names))} | healthy ({len(names)} node{'s' if len(names) > 1 else ''}) | `{gpus}` | |")
    return out + [""]


def _node(n: rd.NodeData, fleet: bool) -> list[str]:
    over_time = [line for dep in n.deployments for line in _strip(dep) + _timeline(dep)]
    if not fleet:
        return (["## Ranks and passes", "", *over_time] if over_time else []) + _layers(n, ["## Layers, in bisection order", ""])
    return _layers(n, [f"## Node {md(n.name)}", "", *over_time])


def _strip(dep: dict[str, Any]) -> list[str]:
    """The rank strip as one line: each rank and its stack class, the culprit in bold and said in words."""
    cells = rd.rank_strip(dep)
    if not cells:
        return []
    def cell(c: dict[str, Any]) -> str:
        state = f" (state {md(c['state'])})" if c.get("state") in ("T", "t", "Z", "D", "X") else ""
        return f"{md(c.get('label'))} {md(c.get('stack_class') or 'no stack')}{state}"
    said = [f"**{cell(c)} ← culprit**" if c.get("culprit") else cell(c) for c in cells[:512]]
    return [f"### ranks of {md(dep.get('id'))}", "", " · ".join(said), ""]


def _timeline(dep: dict[str, Any]) -> list[str]:
    tl = rd.timeline(dep)
    if not tl or not tl["rows"]:
        return []
    passes = len(tl["passes"]) or 1
    out = [f"### timeline of the passes of {md(dep.get('id'))}", "",
           f"Looked at over {tl['window_s']:.2f} s ({passes} pass{'es' if passes != 1 else ''}, beginning at "
           f"{', '.join(f'{p:.2f}' for p in tl['passes'][:20]) or '0.00'} s); times in s after the first pass began.", "",
           "| what | looked at (s) | changed at (s) | last moved |", "|---|---|---|---|"]
    for r in tl["rows"][:200]:
        last = rd.last_moved(r)
        out.append(f"| {md(r['kind'])} {md(r['name'])} | {_times(r['looks'])} | {_times(r['moved']) or '-'} | "
                   + (f"at {last:.2f} s" if last is not None else "never") + " |")
    return out + [""]


def _times(ts: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in ts[:16]) + (f" and {len(ts) - 16} more" if len(ts) > 16 else "")


def _layers(n: rd.NodeData, out: list[str]) -> list[str]:
    """One section per view that draws Markdown (``<name>_view.py`` with ``markdown(node)``, render/views.py),
    in the views' order: the layers' in bisection order, then the others by name."""
    for name, draw in views.drawing("markdown"):
        out += [f"### {name}", "", *draw(n)]
    return out
