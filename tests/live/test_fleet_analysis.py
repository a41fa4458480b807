"""Fleet analysis on synthetic fleets built from one real snapshot (a real titled process tree, TP=8)."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest

from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet
from vllmdiag.api import analyze_files, collect
from vllmdiag.model import NodeOutcome, Snapshot
from vllmdiag.render.files import to_html, to_markdown
from vllmdiag.sweep.sweep_api import FleetResult, save

from fake_tree import fake_tree

MULTI = ["--nnodes", "2", "--master-addr", "10.1.0.1", "--master-port", "29500"]


@pytest.fixture(scope="module")
def base() -> Snapshot:
    """One real node: a vLLM-titled TP=8 tree, collected by the real probes, other processes dropped."""
    with fake_tree(tp=8) as tree:
        snap = collect(probes=["processes", "host"], budget_s=5.0)
        mine = set(tree.all_pids)
    procs = snap.data("processes")
    procs["processes"] = [p for p in procs["processes"] if p["pid"] in mine]
    assert len(procs["processes"]) == 10
    return snap


def node(base: Snapshot, name: str, *, stopped: int | None = None, ranks: list[int] | None = None,
         extra_args: list[str] | None = None) -> Snapshot:
    snap = copy.deepcopy(base)
    snap.node = name
    procs = snap.data("processes")["processes"]
    keep = []
    for p in procs:
        tp = (p.get("ranks") or {}).get("tp")
        if ranks is not None and tp is not None and tp not in ranks:
            continue
        if tp is not None and tp == stopped:
            p["state"] = "T"
        if p.get("role") == "api_server" and extra_args:
            p["cmdline"] = list(p["cmdline"]) + extra_args
        keep.append(p)
    snap.data("processes")["processes"] = keep
    return snap


def fleet_of(base: Snapshot, n: int, sick: dict[int, int] | None = None) -> list[Snapshot]:
    return [node(base, f"gpu{i:0{len(str(n - 1))}d}", stopped=(sick or {}).get(i)) for i in range(max(n, 2))][:n]


def test_healthy_fleet_folds_into_one_class(base: Snapshot) -> None:
    report = analyze_fleet(fleet_of(base, 48))
    assert report.verdict.status == "healthy"
    assert [(c["nodes"], c["status"]) for c in report.to_dict()["fleet"]["classes"]] == [("gpu[00-47]", "healthy")]
    assert {n["gpus"] for n in report.to_dict()["nodes"]} == {"." * 8}
    assert report.to_dict()["schema_version"] == 1 and len(report.to_dict()["snapshots"]) == 48


def test_one_blocked_node_named_with_process_and_rank(base: Snapshot) -> None:
    report = analyze_fleet(fleet_of(base, 48, {12: 5}))
    v = report.verdict
    assert v.status == "blocked" and v.layer == "process"
    assert (v.culprits[0].node, v.culprits[0].rank, v.culprits[0].title) == ("gpu12", 5, "VLLM::Worker_TP5")
    classes = [(c["nodes"], c["status"]) for c in report.to_dict()["fleet"]["classes"]]
    assert classes == [("gpu12", "blocked"), ("gpu[00-11,13-47]", "healthy")]
    assert v.summary.startswith("gpu12: Blocked at the process layer") and "gpu[00-11,13-47] healthy" in v.summary
    assert next(n for n in report.to_dict()["nodes"] if n["name"] == "gpu12")["gpus"] == "bbbbbXbb"
    assert FleetResult(report=report).exit_code == 1


@pytest.mark.parametrize("nodes", [48, 480])  # 384 and 3,840 GPUs; timing lives in bench/bench_fleet_analysis.py
def test_scaling_sets_fold_identical_faults(base: Snapshot, nodes: int) -> None:
    sick = {3: 2, nodes // 2: 2, nodes - 1: 2}
    report = analyze_fleet(fleet_of(base, nodes, sick))
    assert sum(len(n["gpus"]) for n in report.to_dict()["nodes"]) == nodes * 8
    classes = report.to_dict()["fleet"]["classes"]
    assert len(classes) == 2 and classes[0]["count"] == 3 and classes[1]["count"] == nodes - 3
    assert {c.node for c in report.verdict.culprits} == {f"gpu{i:0{len(str(nodes - 1))}d}" for i in sick}


def test_multinode_group_joined_across_nodes(base: Snapshot) -> None:
    a = node(base, "gpu-a", ranks=[0, 1, 2, 3], extra_args=[*MULTI, "--node-rank", "0"])
    b = node(base, "gpu-b", ranks=[4, 5, 6, 7], extra_args=[*MULTI, "--node-rank", "1", "--headless"])
    alone = analyze_fleet([a, node(base, "gpu-c", ranks=[0, 1, 2, 3])])
    assert any(f.code == "process.rank_missing" for f in alone.findings)  # no group: a real gap
    report = analyze_fleet([a, b])
    assert report.verdict.status == "healthy", report.verdict.summary
    assert report.to_dict()["fleet"]["groups"] == [{"key": "10.1.0.1:29500", "nodes": ["gpu-a", "gpu-b"], "nnodes": 2}]
    b_missing = node(base, "gpu-b", ranks=[4, 5, 7], extra_args=[*MULTI, "--node-rank", "1", "--headless"])
    report = analyze_fleet([a, b_missing])
    assert report.verdict.status == "blocked"
    assert [f.evidence["missing_tp_ranks"] for f in report.findings if f.code == "fleet.rank_missing"] == [[6]]


def test_ranks_on_an_unreachable_node_are_attributed_to_it(base: Snapshot) -> None:
    a = node(base, "gpu-a", ranks=[0, 1, 2, 3], extra_args=[*MULTI, "--node-rank", "0"])
    status = [NodeOutcome("gpu-a", "ok", None, 1.0), NodeOutcome("gpu-b", "unreachable", "connection timed out", 5.0)]
    report = analyze_fleet([a], status)
    unseen = [f for f in report.findings if f.code == "fleet.ranks_unseen"]
    assert unseen and unseen[0].evidence["missing_tp_ranks"] == [4, 5, 6, 7]
    assert {(c.node, c.rank) for c in report.verdict.culprits} >= {("gpu-b", 4), ("gpu-b", 7)}
    assert [n["status"] for n in report.to_dict()["nodes"]] == ["ok", "unreachable"]


def test_save_then_analyze_dir_gives_the_same_verdict(base: Snapshot, tmp_path: Path) -> None:
    snaps = fleet_of(base, 6, {4: 1})
    status = [NodeOutcome(s.node, "ok", None, 1.0) for s in snaps] + [NodeOutcome("gpu9", "timeout", "no answer", 5)]
    first = FleetResult(report=analyze_fleet(snaps, status))
    save(first, tmp_path / "sweep")
    again = analyze_files([tmp_path / "sweep"])
    assert again.report.verdict.to_dict() == first.report.verdict.to_dict()
    assert [n["name"] for n in again.report.to_dict()["nodes"] if n["status"] == "timeout"] == ["gpu9"]
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir())[:2] == ["gpu0.json", "gpu1.json"]


def test_views_render_folded_classes(base: Snapshot) -> None:
    from vllmdiag.render.fleet_view import render_fleet
    from vllmdiag.render.text import make_console

    report = analyze_fleet(fleet_of(base, 48, {12: 5}), [NodeOutcome("gpu48", "unreachable", "refused", 0.1)])
    out = io.StringIO()
    render_fleet(report, make_console(out))
    text = out.getvalue()
    assert "gpu[00-11,13-47]" in text and "gpu12" in text and "gpu48" in text
    page = to_html(report)
    assert "gpu12" in page and "gpu48" in page and "<script" not in page
    assert any("gpu48 | unreachable" in line for line in to_markdown(report).splitlines())


def test_nodes_without_vllm(base: Snapshot) -> None:
    empty = [node(base, f"cpu{i}") for i in range(3)]
    for snap in empty:
        snap.data("processes")["processes"] = []
    only_empty = analyze_fleet(empty)
    assert only_empty.verdict.status == "no-deployment" and FleetResult(report=only_empty).exit_code == 3
    assert only_empty.verdict.summary == "No vLLM deployment found on cpu[0-2]."
    mixed = analyze_fleet(empty + fleet_of(base, 2))
    assert mixed.verdict.status == "healthy", mixed.verdict.summary  # a spare node is not a fault


def test_untrusted_node_names_from_saved_snapshots(base: Snapshot) -> None:
    names = ["a,b", "x[1-2]", "@g", "<script>", "n1"]
    report = analyze_fleet([node(base, n, stopped=1 if n == "@g" else None) for n in names])
    assert report.verdict.culprits[0].node == "@g"
    assert "&lt;script&gt;" in to_html(report) and "<script>" not in to_html(report)
