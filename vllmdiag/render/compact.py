"""The default terminal view's layer sections: what is wrong in full, what is fine folded into a line.

A healthy TP=8 node fits one 80-column screen; `-v` prints every row (the `*_view.py` tables).
Built from the JSON contract via `report_data`, like the report files. Every red cell says why.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.render import report_data as rd
from vllmdiag.render.text import escape
from vllmdiag.vocab.stack_classes import COLLECTIVE, ENGINE_BUSY, ENGINE_IDLE, EXECUTING, IDLE, SYNC_POINT, UNKNOWN

CLASS_STYLE = {COLLECTIVE: "yellow", SYNC_POINT: "yellow", EXECUTING: "", IDLE: "dim", ENGINE_IDLE: "dim",
               ENGINE_BUSY: "bold red", UNKNOWN: "magenta"}
CULPRIT = "bold white on red"


def render(d: dict[str, Any], console: Any) -> None:
    nodes = rd.nodes(d)
    for node in nodes:
        if not node.deployments:
            continue
        if len(nodes) > 1:
            console.print(f"[bold]node {escape(node.name)}[/]")
        for line in [*handshake(node), *queue(node)]:
            console.print(line)
        stacks(node, console)
        for line in [*client(node), *timeline(node)]:
            console.print(line)


def _head(layer: str) -> str:
    return f"[bold]{layer:<9}[/] "


def handshake(node: rd.NodeData) -> list[str]:
    rows = rd.endpoints(node)
    if not rows:
        return []
    bad = [r for r in rows if r["problem"]]
    greeted = sum(1 for r in rows if r["status"] == "ok")
    silent = [r for r in rows if not r["problem"] and r["status"] == "timeout"]
    undialled = [r for r in rows if r["status"] == "-"]
    line = _head("handshake") + f"{len(rows)} listeners: {greeted} answer the ZMTP greeting"
    if silent:
        line += f", {len(silent)} TCP silent [dim](not ZMQ: TCPStore/NCCL bootstrap; fine)[/]"
    if undialled:
        line += f", {len(undialled)} not dialled [dim](HTTP or torch/NCCL TCP: not ZMQ)[/]"
    if bad:
        line += f", [bold red]{len(bad)} do not answer[/]"
    out = [line]
    procs = node.procs()
    for r in bad[:10]:
        holders = ", ".join(f"{rd.short_name(procs.get(p))} ({p})" for p in r["holders"][:4])
        out.append(f"  [red]{escape(r['status'])}[/] {escape(r['endpoint'])} of {escape(holders)}: {escape(r['note'])}")
    return out


def queue(node: rd.NodeData) -> list[str]:
    rings = rd.rings(node)
    if not rings:
        return []
    quiet = [r for r in rings if r.role == "response" and not r.laggards and not any(r.unread)]
    out = [_head("queue") + f"{len(rings)} shm rings" + (f"; {len(quiet)} response rings fully read" if quiet else "")]
    for r in rings:
        if r in quiet:
            continue
        state = r.state.replace(" samples / ", " samples, ").replace("still ", "still (").replace("moving ", "moving (")
        out.append(f"  {escape(r.role)} {escape(r.writer)} → " + _bar(r) + f" [dim]{escape(state)})[/]")
    return out


def _bar(r: rd.RingView) -> str:
    """`TP0 0 TP1 0 ...`, or `TP[0-7] 0/10` when every reader is at the same count and none is blamed."""
    if not r.laggards and len(set(r.unread)) == 1 and len(r.unread) > 2:
        return f"{escape(_fold(r.readers))} {r.unread[0]}/{r.max_chunks} unread" + (" [green]✓[/]" if not r.unread[0] else "")
    cells = []
    for i, (name, value) in enumerate(zip(r.readers, r.unread, strict=False)):
        style = CULPRIT if i in r.laggards else ("green" if value == 0 else "yellow")
        cells.append(f"[{style}]{escape(name)} {value}[/]")
    # Named in words: only the HTML report frames the cell, and without colour nothing else marks it here.
    waited = [r.readers[i] for i in sorted(r.laggards) if i < len(r.readers)]
    lag = f" [bold red]◀ waits on {escape(', '.join(waited))}[/]" if waited else ""
    return " ".join(cells) + f" [dim]/{r.max_chunks}[/]" + lag


def timeline(node: rd.NodeData) -> list[str]:
    """The timeline of the passes in one line (the report files draw it): what moved last, or that nothing did."""
    out = []
    kinds = {"rank": "ranks' stacks", "ring": "rings", "counter": "/metrics counters"}
    for dep in node.deployments:
        tl = rd.timeline(dep)
        if not tl or not tl["rows"]:
            continue
        n = len(tl["passes"]) or 1
        moved = sorted(((rd.last_moved(r) or 0.0, str(r["name"])) for r in tl["rows"] if r["moved"]), key=lambda m: -m[0])
        looked = ", ".join(w for k, w in kinds.items() if any(r["kind"] == k for r in tl["rows"]))
        said = ("last moved: " + ", ".join(f"{name} at {t:.2f} s" for t, name in moved[:4])
                + (f" and {len(moved) - 4} more" if len(moved) > 4 else "") if moved else f"nothing moved ({looked})")
        span = max(t for r in tl["rows"] for t in r["looks"])
        out.append(_head("timeline") + f"{n} pass{'es' if n != 1 else ''}, looks from 0 to {span:.2f} s: {escape(said)}")
    return out


def _fold(names: list[str]) -> str:
    ranks = [n[2:] for n in names if n.startswith("TP") and n[2:].isdigit()]
    if len(ranks) == len(names) and ranks:
        nums = sorted(int(x) for x in ranks)
        if nums == list(range(nums[0], nums[-1] + 1)):
            return f"TP[{nums[0]}-{nums[-1]}]"
    return ",".join(names)


def stacks(node: rd.NodeData, console: Any) -> None:
    classes = rd.stack_classes(node)
    if not classes:
        return
    from rich.table import Table

    table = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    table.add_column("who", overflow="fold")
    table.add_column("class", overflow="fold")
    table.add_column("where", overflow="fold")
    for c in classes:
        who = escape(c["label"]) if "ranks" in c else escape(_who(node, c))
        cls = str(c.get("class") or "?") + (f" ({c['backend']})" if c.get("backend") else "")
        style = CULPRIT if c["culprit"] else CLASS_STYLE.get(cls.split(":")[0], "")
        mark = " ◀ culprit" if c["culprit"] else ""
        table.add_row(f"[{style}]{who}{mark}[/]" if style else who, f"[{style}]{escape(cls)}[/]" if style else escape(cls),
                      f"[dim]{escape(_short_where(c.get('where')))}[/]")
    from rich.padding import Padding

    console.print(_head("gpu") + "stack classes (py-spy):")
    console.print(Padding(table, (0, 0, 0, 2)))
    gpus = rd.gpus(node)
    if gpus:
        hot = [g for g in gpus if (g.get("ecc_uncorrected_volatile") or 0) or g.get("xid_events")]
        errors = f", [bold red]{len(hot)} with ECC/Xid errors[/]" if hot else ", no ECC/Xid errors"
        console.print(f"  {len(gpus)} GPUs (NVML){errors} [dim](-v: one row per GPU)[/]")


def _who(node: rd.NodeData, c: dict[str, Any]) -> str:
    proc = node.procs().get(int(c.get("pid") or 0))
    return f"{rd.short_name(proc) if proc else c.get('title')} ({c.get('pid')})"


def _short_where(where: Any) -> str:
    """`_prepare_inputs (gpu_model_runner.py:39)`: the file's name is enough on a screen (-v: full path)."""
    text = str(where or "")
    if "(" in text and "/" in text:
        func, _, loc = text.partition(" (")
        return f"{func} ({loc.rsplit('/', 1)[-1]}"
    return text


def client(node: rd.NodeData) -> list[str]:
    out = []
    for s in rd.http_servers(node):
        health = s.get("health") or {}
        samples = [m for m in s.get("metrics") or [] if m.get("status") == 200]
        trend = ""
        if samples:
            first, last = samples[0], samples[-1]
            trend = "; " + ", ".join(f"{name} {_n(first.get(k))}→{_n(last.get(k))}"
                                     for k, name in (("running", "running"), ("waiting", "waiting"),
                                                     ("generation_tokens", "tokens")))
        conns = s.get("connections") or []
        backed = [c for c in conns if _growing(c)]
        line = _head("client") + f"HTTP {escape(s.get('address'))} /health {escape(health.get('status') or health.get('error'))}"
        line += escape(trend) + f"; {len(conns)} client connection(s)"
        line += f", [bold red]{len(backed)} not reading (Send-Q grows)[/]" if backed else ", none backed up"
        out.append(line)
        out += [f"  [red]{escape(c.get('remote'))}[/] Send-Q {escape(' → '.join(map(str, c.get('send_q') or [])))}"
                for c in backed[:5]]
    return out


def _growing(c: dict[str, Any]) -> bool:
    sq = [q for q in c.get("send_q") or [] if q is not None]
    return len(sq) >= 2 and 0 < sq[0] <= sq[-1]


def _n(v: Any) -> str:
    return "?" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))
