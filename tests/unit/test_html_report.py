"""The incident report in a real headless Chromium (Debian's `chromium`): every section is there, the
culprit is marked where it appears, nothing tries to load (a CSP forbids every load; the browser logs
any attempt), and it prints to PDF and PNG. Also: every untrusted string is escaped, in HTML and
Markdown alike."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from vllmdiag.render.html_report import to_html
from vllmdiag.render.md_report import to_markdown

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-dev-shm-usage", "--enable-logging=stderr", "--v=0"]


def chromium(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless run with a fresh profile (removed after), bounded in time."""
    profile = tempfile.mkdtemp(prefix="vllmdiag-chromium-")
    try:
        return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                              capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class Dom(HTMLParser):
    """The rendered DOM as (tag, attrs, text-inside) for the few assertions we make."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict[str, Any]] = []
        self.stack: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = {"tag": tag, "attrs": dict(attrs), "text": ""}
        self.elements.append(el)
        if tag not in ("meta", "br", "img", "link", "input", "polyline"):
            self.stack.append(el)

    def handle_endtag(self, tag: str) -> None:
        while self.stack:
            if self.stack.pop()["tag"] == tag:
                break

    def handle_data(self, data: str) -> None:
        for el in self.stack:
            el["text"] += data

    def having(self, cls: str) -> list[dict[str, Any]]:
        return [e for e in self.elements if cls in (e["attrs"].get("class") or "").split()]


# What a person sees and copies: the page's rendered text (innerText honours <pre>, CSS and hidden parts), read
# from a copy to which a tiny script is added (the report's CSP forbids scripts; the copy drops it) that opens
# every <details> and swaps the body for its own text, then dumped by --dump-dom.
TEXT_SCRIPT = ("<script>document.querySelectorAll('details').forEach(d => d.open = true);"
               "const t = document.body.innerText; document.body.textContent = ''; const p = document.createElement('pre');"
               "p.id = 'rendered-text'; p.textContent = t; document.body.appendChild(p);</script>")


def rendered_text(page: Path) -> str:
    import html as _html

    probe = page.with_name(page.stem + ".text-probe.html")
    probe.write_text(re.sub(r"<meta http-equiv='Content-Security-Policy'[^>]*>", "", page.read_text())
                     .replace("</body>", TEXT_SCRIPT + "</body>"))
    try:
        out = chromium(probe, "--dump-dom")
    finally:
        probe.unlink()
    assert out.returncode == 0, out.stderr[-2000:]
    found = re.search(r"<pre id=\"rendered-text\">(.*?)</pre>", out.stdout, re.S)
    assert found, out.stdout[-2000:]
    return _html.unescape(found.group(1))


HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>\x1b[31m`| [x](http://evil) **b** &lt;"


def _hostile_report() -> dict[str, Any]:
    proc = {"pid": 7, "ppid": 1, "role": "worker", "rank": 0, "ranks": {"tp": 0}, "title": HOSTILE, "state": "S"}
    culprit = {"node": HOSTILE, "pid": 7, "role": "worker", "rank": 0, "title": HOSTILE, "reason": HOSTILE}
    verdict = {"status": "blocked", "layer": "gpu", "culprits": [culprit], "summary": HOSTILE, "evidence": [HOSTILE],
               "next_steps": [HOSTILE], "confidence": "high"}
    return {"schema_version": 1, "verdict": verdict,
            "deployments": [{"id": HOSTILE, "node": HOSTILE, "root_pid": 7, "processes": [proc], "verdict": verdict,
                             "rank_strip": [{"label": HOSTILE, "pid": 7, "stack_class": HOSTILE, "culprit": True}],
                             "timeline": {"window_s": 1.0, "passes": [0.0], "rows": [
                                 {"kind": HOSTILE, "name": HOSTILE, "looks": [0.0, 0.5], "moved": [0.5]}]}}],
            "findings": [{"code": "gpu.rank_straggler", "layer": "gpu", "severity": "critical", "node": HOSTILE,
                          "pids": [7], "message": HOSTILE, "evidence": {"ring": HOSTILE}}],
            "snapshot": {"node": HOSTILE, "collected_at": HOSTILE, "vllmdiag_version": HOSTILE, "probes": {
                "nvml": {"status": "error", "reason": HOSTILE},
                "stacks": {"status": "ok", "data": {"dumps": [{"pid": 7, "threads": [
                    {"name": "MainThread", "frames": [[HOSTILE, HOSTILE, 1]]}]}]}}}}}


def test_hostile_strings_are_escaped_in_html() -> None:
    page = to_html(_hostile_report(), [HOSTILE])
    dom = Dom()
    dom.feed(page)
    assert not [e for e in dom.elements if e["tag"] in ("script", "img", "a", "iframe")]
    assert not [k for e in dom.elements for k in e["attrs"] if k.startswith("on")]
    assert "\x1b" not in page  # a report someone cats in a terminal cannot recolour it
    assert page.count("&lt;script&gt;") >= 5


def test_hostile_strings_are_escaped_in_markdown() -> None:
    text = to_markdown(_hostile_report(), [HOSTILE])
    outside_fences = re.sub(r"(`{3,})text\n.*?\n\1", "", text, flags=re.S)
    # A tag needs its "<"; a lone ">" opens nothing and stays as written (issue 35 item 8).
    assert not re.search(r"(?<!\\)<", outside_fences), "a tag outside code blocks would be raw HTML"
    assert not re.search(r"(?<!\\)\]\(http", outside_fences) and HOSTILE.split("<img")[0] not in outside_fences
    assert "\x1b" not in text and "rank None" not in text


REAL = Path(__file__).parent.parent / "data" / "vllm-real" / "snap-d-worker-tp1-sigstop.json"


def _real_report() -> Any:
    import json

    from vllmdiag.analysis.bisect import analyze
    from vllmdiag.api import snapshots_from_json

    return analyze(snapshots_from_json(json.loads(REAL.read_text()), "real"))


def test_markdown_report_has_the_html_sections_as_text() -> None:
    from vllmdiag.render.files import to_html, to_markdown

    report = _real_report()
    culprit = report.verdict.culprits[0]
    md = to_markdown(report, ["vllmdiag", "analyze", "x.json", "--report", "x.md"])
    headings = [line for line in md.splitlines() if line.startswith("#")]
    for section in ("## Culprits", "## Collection", "## Findings", "### process", "### handshake", "### queue", "### gpu",
                    "### client"):
        assert section in headings, (section, headings)
    assert "rank None" not in md and "pid None" not in md
    assert f"pid {culprit.pid}" in md and "← culprit" in md
    assert "vllmdiag analyze x.json --report x.md" in md  # the command line, in the header
    page = to_html(report, ["vllmdiag", "analyze", "x.json"])
    assert page.count("data-layer=") == 5 and f"class='mono culprit' data-pid='{culprit.pid}'" in page


def test_gpus_per_rank_and_an_unreachable_node_in_the_fleet_grid() -> None:
    workers = [{"pid": 100 + r, "ppid": 9, "role": "worker", "rank": r, "ranks": {"tp": r}, "title": f"VLLM::Worker_TP{r}",
                "state": "S"} for r in range(2)]
    verdict: dict[str, Any] = {"status": "healthy", "layer": None, "culprits": [], "summary": "ok", "evidence": [],
                               "next_steps": [], "confidence": "high"}
    gpus = [{"index": i, "util_pct": 97, "processes": [{"pid": 100 + i}], "ecc_uncorrected_volatile": 0} for i in range(2)]
    snap = {"node": "gpu00", "probes": {"nvml": {"status": "ok", "data": {"gpus": gpus}}}}
    d: dict[str, Any] = {"verdict": verdict, "findings": [], "snapshots": [snap],
         "deployments": [{"id": "gpu00:9", "node": "gpu00", "root_pid": 9, "processes": workers, "verdict": verdict}],
         "nodes": [{"name": "gpu00", "status": "ok", "verdict": "healthy", "gpus": ".."},
                   {"name": "gpu01", "status": "unreachable", "reason": "ssh: connect timed out", "gpus": ""}]}
    # Which rank runs on which GPU is analysis' reading of the nvml data (the node's section); render formats it.
    from vllmdiag.analysis.sections import collection_row
    from vllmdiag.analysis.sections import gpu_rows as section_gpus
    from vllmdiag.model import DeploymentReport, NodeSection, Snapshot

    snapshot = Snapshot.from_dict({"schema_version": 1, "node": "gpu00", **{k: v for k, v in snap.items() if k != "node"}})
    deps = [DeploymentReport.from_dict(x, "deployment") for x in d["deployments"]]
    d["sections"] = {"gpu00": NodeSection("gpu00", gpus=section_gpus(snapshot, deps))}
    d["collection"] = [collection_row(snapshot)]
    dom = Dom()
    dom.feed(to_html(d))
    gpu_rows = [e["text"] for e in dom.elements if e["tag"] == "tr" and "97" in e["text"]]
    assert any("TP0" in row for row in gpu_rows) and any("TP1" in row for row in gpu_rows)
    rows = {e["attrs"]["data-node"]: e for e in dom.elements if e["tag"] == "tr" and "data-node" in e["attrs"]}
    assert "connect timed out" in rows["gpu01"]["text"] and "unreachable" in rows["gpu01"]["text"]
    links = [e["attrs"]["href"] for e in dom.elements if e["tag"] == "a"]
    assert links == ["#node-gpu00"], "only nodes that answered have a section to link to"
    md = to_markdown(d)
    assert "util 97 %" in md and "| gpu01 | unreachable |" in md


def test_a_newline_inside_one_command_stays_visible_on_its_line() -> None:
    """The fix joins commands with newlines after escaping each: a newline a hostile string carries inside one
    command still cannot forge a second line."""
    report = _hostile_report()
    report["verdict"]["next_steps"] = ["py-spy dump --pid 7\nrm -rf /", "py-spy dump --native --pid 7"]
    dom = Dom()
    dom.feed(to_html(report))
    pre = next(e["text"] for e in dom.elements if e["tag"] == "pre" and "py-spy" in e["text"])
    assert pre.splitlines() == ["py-spy dump --pid 7\\x0arm -rf /", "py-spy dump --native --pid 7"]
    md = to_markdown(report)
    assert "py-spy dump --pid 7\\x0arm -rf /" in md.splitlines() and "rm -rf /" not in md.splitlines()



def _fleet_report() -> Any:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet
    from vllmdiag.api import load_snapshots
    from vllmdiag.model import NodeOutcome

    data = Path(__file__).parent.parent / "data" / "vllm-real"
    snaps = [load_snapshots(data / "snap-a-healthy.json")[0] for _ in range(3)] + \
        [load_snapshots(data / "snap-b-worker-tp2-stuck.json")[0]]
    for i, s in enumerate(snaps):
        s.node = f"gpu0{i}"
    return analyze_fleet(snaps, [*(NodeOutcome(s.node, "ok", None, 1.0) for s in snaps),
                                 NodeOutcome("gpu04", "unreachable", "ssh: connect timed out", 5.0)])


def test_fleet_html_folds_the_healthy_nodes_and_says_why_for_every_other() -> None:
    """Issue 26: every healthy node got a full section and its own grid row, and the blocked node's "why" was
    empty. One line (a <details>) for the healthy nodes, in the grid and among the sections; why for the rest."""
    from vllmdiag.render.files import to_html, to_markdown

    report = _fleet_report()
    why = {n.name: n.why for n in report.nodes or []}
    assert why["gpu00"] == why["gpu01"] == why["gpu02"] == "" and why["gpu04"] == "ssh: connect timed out"
    culprit = report.verdict.culprits[0]
    grid = {r.state: r.reason for r in report.fleet.grid}  # the terminal's why: layer and culprit, no pid (folds)
    assert grid == {"blocked": f"{report.verdict.layer} layer, {culprit.title}", "unreachable": "ssh", "healthy": ""}
    assert why["gpu03"].startswith(f"{report.verdict.layer} layer, {culprit.title} (pid {culprit.pid}")
    page = to_html(report)
    dom = Dom()
    dom.feed(page)
    rows = {e["attrs"]["data-node"]: e for e in dom.elements if e["tag"] == "tr" and "data-node" in e["attrs"]}
    whys = {name: next(e["text"] for e in dom.elements if e["tag"] == "td" and "why" in (e["attrs"].get("class") or "")
                       and e["text"] in row["text"]) for name, row in rows.items()}
    assert whys["gpu03"] == why["gpu03"] and whys["gpu04"] == "ssh: connect timed out" and not whys["gpu00"]
    fold = dom.having("healthy-fold")
    assert len(fold) == 1 and "3 healthy nodes: gpu[00-02]" in fold[0]["text"]
    folded_rows = [e["attrs"]["data-node"] for e in dom.elements if e["tag"] == "tr" and "data-node" in e["attrs"]
                   and e["text"] in fold[0]["text"]]
    assert sorted(folded_rows) == ["gpu00", "gpu01", "gpu02"], "each healthy node still opens to its row"
    folded = dom.having("healthy-nodes")
    assert len(folded) == 1 and "3 healthy nodes (gpu[00-02])" in folded[0]["text"]
    start, end = page.index("<details class='healthy-nodes'>"), page.rindex("</details>")
    at = {name: page.index(f"<section class='node' id='node-{name}'>") for name in ("gpu00", "gpu01", "gpu02", "gpu03")}
    assert all(start < at[n] < end for n in ("gpu00", "gpu01", "gpu02")) and at["gpu03"] < start
    md = to_markdown(report)
    assert "| gpu[00-02] | healthy (3 nodes) |" in md and md.count("| healthy") == 1, md
    assert "Worker_TP2 (pid" in next(line for line in md.splitlines() if line.startswith("| gpu03 |"))


def test_an_older_fleet_report_without_why_still_says_why() -> None:
    d = _fleet_report().to_dict()
    for n in d["nodes"]:
        del n["why"]
    dom = Dom()
    dom.feed(to_html(d))
    row = next(e for e in dom.elements if e["attrs"].get("data-node") == "gpu03")
    assert "Blocked at the" in row["text"] and "connect timed out" in next(
        e for e in dom.elements if e["attrs"].get("data-node") == "gpu04")["text"]


def test_timeline_says_when_a_thing_moved_in_html_and_markdown() -> None:
    from judged import judged
    from test_gpu_progress import ENGINE_WAITING, all_reduce, snapshot
    from test_report_timeline import EXECUTING, _with_ring

    from vllmdiag.render.files import to_html, to_markdown

    first = _with_ring(snapshot([all_reduce()] * 2, ENGINE_WAITING, 0), "1111 0000", 1)
    later = _with_ring(snapshot([EXECUTING, all_reduce()], ENGINE_WAITING, 2, tokens=130), "1111 1111", 2)
    report = judged(first, later)
    dom = Dom()
    dom.feed(to_html(report))
    said = [" ".join(e["text"].split()) for e in dom.elements if e["tag"] == "tr" and "data-kind" in e["attrs"]]
    assert any(k.startswith("rank TP0") and k.endswith("at 2.00 s (2 looks)") for k in said), said
    assert any(k.startswith("counter generation tokens") and k.endswith("at 2.10 s (4 looks)") for k in said), said
    md = to_markdown(report).splitlines()
    assert "| rank TP0 | 0.00, 2.00 | 2.00 | at 2.00 s |" in md
    assert "| ring psm_rpc (rpc_broadcast_mq) | 0.00, 0.10, 2.00, 2.10 | 2.00 | at 2.00 s |" in md
    assert any(line.startswith("TP0 executing · TP1 collective:all_reduce") for line in md), md
