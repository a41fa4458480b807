"""The live tests of tests/unit/test_html_report.py, which says what they check: these start something."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_html_report import CHROMIUM, HOSTILE, Dom, _hostile_report, _real_report, chromium, rendered_text  # noqa: F401 - shared with the pure half

from vllmdiag.render.html_report import to_html

needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy and namespaces need root")

LOAD_FAILURES = re.compile(r"INFO:CONSOLE|net::ERR_|Failed to load|Refused to")


def rendered_dom(page: Path) -> tuple[Dom, str]:
    out = chromium(page, "--dump-dom")
    assert out.returncode == 0, out.stderr[-2000:]
    dom = Dom()
    dom.feed(out.stdout)
    return dom, out.stderr


@needs_chromium
def test_the_load_check_catches_a_page_that_loads_something(tmp_path: Path) -> None:
    """The negative control: without it, "nothing failed to load" could pass by never looking."""
    bad = tmp_path / "bad.html"
    html = to_html({"verdict": {"status": "healthy"}, "findings": [], "deployments": []})
    bad.write_text(html.replace("</body>", "<img src='http://127.0.0.1:9/x.png'></body>"))
    _, log = rendered_dom(bad)
    assert LOAD_FAILURES.search(log), log[-1500:]


@needs_chromium
@needs_root
def test_blocked_tp4_node_report_in_chromium(tmp_path: Path) -> None:
    page, pdf, png = tmp_path / "node.html", tmp_path / "node.pdf", tmp_path / "node.png"
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "demo", "--tp", "4", "--report", str(page)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "VLLMDIAG_SIM_STATE": str(tmp_path / "sim")})
    assert out.returncode == 1, out.stdout[-1500:] + out.stderr
    culprit_pid = re.search(r"-> VLLM::Worker_TP3 rank 3, pid (\d+)", re.sub(r"\s+", " ", out.stdout))
    assert culprit_pid
    dom, log = rendered_dom(page)
    assert not LOAD_FAILURES.search(log), log[-1500:]
    layers = [e["attrs"]["data-layer"] for e in dom.elements if "data-layer" in e["attrs"]]
    assert layers == ["process", "handshake", "queue", "gpu", "client"]
    banner = next(e for e in dom.elements if e["attrs"].get("id") == "verdict")
    assert "BLOCKED" in banner["text"] and "gpu" in banner["text"] and "confidence" in banner["text"]
    marked = [e for e in dom.having("culprit") if e["attrs"].get("data-pid") == culprit_pid.group(1)]
    assert marked and "Worker_TP3" in marked[0]["text"], "the process tree marks the culprit"
    assert any("TP3" in e["text"] for e in dom.having("culprit-row")), "the stack class of the culprit is marked"
    assert dom.having("ring") and dom.having("cell"), "rings drawn as bars of reader cells"
    stacks = [e for e in dom.elements if e["tag"] == "details" and "full stack" in e["text"]]
    assert stacks and "_prepare_inputs" in " ".join(e["text"] for e in stacks)
    findings = [e["attrs"].get("class") for e in dom.having("finding")]
    assert findings[0] == "finding critical", findings
    assert chromium(page, f"--print-to-pdf={pdf}", "--no-pdf-header-footer").returncode == 0
    assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 10_000
    assert chromium(page, f"--screenshot={png}", "--window-size=1280,2000").returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
@needs_root
@pytest.mark.slow
def test_fleet_report_grid_marks_the_culprit_cell_and_links_each_node(tmp_path: Path) -> None:
    page = tmp_path / "fleet.html"
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "demo", "--fleet", "--report", str(page)], capture_output=True,
                         text=True, timeout=180, env={**os.environ, "VLLMDIAG_SIM_STATE": str(tmp_path / "sim")})
    assert out.returncode == 1, out.stdout[-1500:] + out.stderr
    dom, log = rendered_dom(page)
    assert not LOAD_FAILURES.search(log), log[-1500:]
    rows = {e["attrs"]["data-node"]: e for e in dom.elements if e["tag"] == "tr" and "data-node" in e["attrs"]}
    assert sorted(rows) == ["gpu00", "gpu01", "gpu02", "gpu03"]
    cells = [e for e in dom.having("gpu") if "title" in e["attrs"]]  # the legend's swatches have none
    assert len(cells) == 8, "4 nodes x 2 GPUs"
    culprit_cells = [e for e in cells if "culprit" in e["attrs"]["class"].split()]
    assert len(culprit_cells) == 1 and culprit_cells[0]["attrs"]["title"].startswith("gpu01 GPU 1")
    ids = {e["attrs"]["id"] for e in dom.elements if "id" in e["attrs"]}
    links = [e["attrs"]["href"] for e in dom.elements if e["tag"] == "a" and "href" in e["attrs"]]
    assert sorted(links) == [f"#node-gpu0{i}" for i in range(4)] and all(link[1:] in ids for link in links)
    assert "VLLM::Worker_TP1" in rows["gpu01"]["text"] and "gpu layer" in rows["gpu01"]["text"], "why it is blocked"
    fold = dom.having("healthy-fold")
    assert len(fold) == 1 and "3 healthy nodes: gpu[00,02-03]" in fold[0]["text"]
    text = rendered_text(page)  # as a person reads it: the blocked node in full, the healthy ones in one line each place
    assert text.count("3 healthy nodes") == 2 and "\\x0a" not in text


@needs_chromium
def test_hostile_report_runs_nothing_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "hostile.html"
    page.write_text(to_html(_hostile_report(), [HOSTILE]))
    dom, log = rendered_dom(page)
    assert not LOAD_FAILURES.search(log), log[-1500:]
    assert not [e for e in dom.elements if e["tag"] in ("script", "img", "a")]


@needs_chromium
def test_commands_read_one_per_line_in_the_rendered_page_and_the_markdown(tmp_path: Path) -> None:
    """Issue 26: the page's cleaner turned the newlines between commands into a visible \\x0a, so "Next
    read-only steps" and every "Confirm" block read as one line. Read back as Chromium draws them."""
    from vllmdiag.render.files import to_html, to_markdown

    report = _real_report()
    steps = report.verdict.next_steps
    assert len(steps) >= 2
    page = tmp_path / "node.html"
    page.write_text(to_html(report, ["vllmdiag", "analyze", "x.json"]))
    text = rendered_text(page)
    lines = [line.strip() for line in text.splitlines()]
    assert "\\x0a" not in text, [line for line in lines if "\\x0a" in line]
    for step in steps:  # the command itself: the "$" prompt is CSS, not text a copy takes along (issue 35 item 5)
        assert step in lines and f"$ {step}" not in lines, (step, lines)
    from vllmdiag.playbooks.playbook import load_playbooks
    from vllmdiag.render.report_data import confirm_commands

    books, d = load_playbooks(), report.to_dict()
    confirm = [c for f in d["findings"] if f["code"] in books for c in confirm_commands(d, f)]
    assert len(confirm) >= 2 and all(c in lines for c in confirm), (confirm, lines)
    md = to_markdown(report).splitlines()
    assert all(s in md for s in steps) and all(c in md for c in confirm) and "\\x0a" not in "\n".join(md)


@needs_chromium
def test_node_report_shows_ranks_timeline_and_labelled_sparklines_as_read(tmp_path: Path) -> None:
    """Issue 26: a single node's report had no rank strip or timeline, and each ring's sparkline was an
    unlabelled line. Read back from Chromium: one cell per rank with its class, the culprit said in words;
    a row per rank, ring and counter saying when it last moved; every sparkline says what it plots."""
    from vllmdiag.render.files import to_html

    report = _real_report()
    culprit = report.verdict.culprits[0]
    page = tmp_path / "node.html"
    page.write_text(to_html(report))
    lines = [line.strip() for line in rendered_text(page).splitlines() if line.strip()]
    assert lines.index("Ranks and passes") < lines.index("Layers, in bisection order")
    at = lines.index(f"TP{culprit.rank}")
    assert lines[at + 1:at + 4] == ["idle", "state T", "◀ culprit"], lines[at:at + 5]  # SIGSTOPped: said, not guessed
    assert [line for line in lines if line in ("TP0", "TP1", "TP2", "TP3")][:4] == ["TP0", "TP1", "TP2", "TP3"]
    rows = [line for line in lines if line.startswith(("rank ", "ring ", "counter "))]
    assert "rank TP1\t\tnever (1 look)" in rows and "ring 4 worker_response_mq rings\t\tnever (6 looks)" in rows, rows
    captions = [line for line in lines if line.startswith("unread slots of the most-behind reader (0 to ")]
    assert captions and all(re.search(r"\d+ samples over \d\.\d\d s", c) for c in captions), captions
