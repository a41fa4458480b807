"""The live tests of tests/unit/test_ray_multinode.py, which says what they check: these start something."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from fleet_fixtures import ns_init_pid, skip_reason
from sim_fixtures import two_node_ray


def on_sim_nodes(test: Any) -> Any:
    """Root, slow: the tests that run the two-node Ray cluster in namespaces."""
    for mark in (pytest.mark.root, pytest.mark.slow,
                 pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")):
        test = mark(test)
    return test


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", *args, "--json"], capture_output=True, text=True,
                          timeout=150)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module", params=["healthy", "straggler", "uniform-collective"])
def swept(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp(f"ray-{request.param}")
    # A uniform hang is only called after the engine's node watched its ranks not move (sweep --confirm).
    confirm = ["--confirm", "5"] if request.param == "uniform-collective" else []
    with two_node_ray(tmp, request.param, None if request.param == "healthy" else 3) as deps:
        for name, dep in zip(("gpu00", "gpu01"), deps, strict=True):
            (tmp / name).symlink_to(f"/proc/{ns_init_pid(dep.launcher_pid)}")
        rc, out = run_json("sweep", "gpu00,gpu01", "--exec", f"nsenter --pid={tmp}/%h/ns/pid --mount={tmp}/%h/ns/mnt --",
                           "--remote-cmd", f"{sys.executable} -m vllmdiag", "--save", str(tmp / "saved"), *confirm)
    yield {"fault": request.param, "rc": rc, "out": out, "saved": tmp / "saved"}


@on_sim_nodes
def test_sweep_ties_node_b_workers_to_the_engine_and_judges_the_whole_group(swept: dict[str, Any]) -> None:
    out, v = swept["out"], swept["out"]["verdict"]
    assert [n["status"] for n in out["nodes"]] == ["ok", "ok"], out["nodes"]
    assert [g["nodes"] for g in out["fleet"]["groups"]] == [["gpu00", "gpu01"]], out["fleet"]["groups"]
    ranks = {(d["node"], p["ranks"].get("tp")) for d in out["deployments"] for p in d["processes"] if p["role"] == "worker"}
    assert ranks == {("gpu00", 0), ("gpu00", 1), ("gpu01", 2), ("gpu01", 3)}, ranks
    if swept["fault"] == "healthy":
        assert (swept["rc"], v["status"]) == (0, "healthy"), v["summary"]
        return
    assert (swept["rc"], v["status"], v["layer"]) == (1, "blocked", "gpu"), v["summary"]
    if swept["fault"] == "uniform-collective":  # every rank on both nodes in one all_reduce: the whole group
        assert {f["node"] for f in out["findings"] if f["code"] == "fleet.uniform_hang"} == {"gpu00", "gpu01"}
        assert [n["verdict"] for n in out["nodes"]] == ["blocked", "blocked"]
        assert {c["rank"] for c in v["culprits"]} == {None} and "gpu01:TP[2-3]" in v["summary"], v["summary"]
        return
    assert [(c["node"], c["rank"]) for c in v["culprits"]] == [("gpu01", 3)], v["culprits"]
    odd = [f for f in out["findings"] if f["code"] == "fleet.rank_straggler"]
    assert odd and odd[0]["evidence"]["waiting"] == "gpu00:TP[0-1],gpu01:TP2", odd
    assert not [f for f in out["findings"] if f["severity"] != "info" and f["node"] == "gpu00"]


@on_sim_nodes
def test_saved_sweep_gives_the_same_verdict(swept: dict[str, Any]) -> None:
    rc, again = run_json("analyze", str(swept["saved"]))
    v, first = again["verdict"], swept["out"]["verdict"]
    assert (rc, v["status"], v["layer"]) == (swept["rc"], first["status"], first["layer"]), v["summary"]
    assert [(c["node"], c["rank"]) for c in v["culprits"]] == [(c["node"], c["rank"]) for c in first["culprits"]]


@on_sim_nodes
def test_node_b_alone_says_the_engine_is_elsewhere_and_blames_no_rank_by_a_wrong_number(swept: dict[str, Any]) -> None:
    rc, out = run_json("analyze", str(swept["saved"] / "gpu01.json"))
    v = out["verdict"]
    assert v["status"] != "healthy" and rc != 0, v["summary"]
    elsewhere = [f for f in out["findings"] if f["code"] == "process.engine_elsewhere"]
    assert elsewhere and "another node" in elsewhere[0]["message"] and "sweep" in elsewhere[0]["message"]
    # Alone, a worker node knows only the order of its ranks, not their numbers: none is made up.
    assert all(c["rank"] is None for c in v["culprits"]), v["culprits"]
    assert not [p for d in out["deployments"] for p in d["processes"] if p["role"] == "worker" and p["ranks"]]
    if swept["fault"] == "healthy":
        assert v["status"] == "inconclusive" and not v["culprits"], v["summary"]


@on_sim_nodes
def test_node_a_alone_says_ranks_run_elsewhere_never_healthy_or_missing(swept: dict[str, Any]) -> None:
    rc, out = run_json("analyze", str(swept["saved"] / "gpu00.json"))
    v = out["verdict"]
    assert v["status"] != "healthy" and rc != 0, v["summary"]
    assert not [f for f in out["findings"] if f["code"] == "process.rank_missing"]
    elsewhere = [f for f in out["findings"] if f["code"] == "process.ranks_elsewhere"]
    assert elsewhere and elsewhere[0]["evidence"]["world"] == 4 and elsewhere[0]["evidence"]["local_ranks"] == 2
    assert not v["culprits"], v["culprits"]  # its ranks wait for one elsewhere: no uniform hang is claimed
    if swept["fault"] == "healthy":
        assert v["status"] == "inconclusive" and "other node" in v["summary"], v["summary"]
    else:
        assert v["status"] == "degraded" and "other nodes" in v["summary"], v["summary"]


def _without_sockets(saved: Any, jobs: dict[str, str]) -> list[Any]:
    """The saved snapshots as a node would send them with its sockets unreadable, each Ray actor carrying
    the ``RAY_JOB_ID`` its raylet gives it (the sim forks actors, so their environ lacks it)."""
    from vllmdiag.model import Snapshot

    out = []
    for node, job in jobs.items():
        data = json.loads((saved / f"{node}.json").read_text())
        data["probes"]["sockets"] = {"status": "error", "duration_s": 0.0, "reason": "permission denied", "data": {}}
        for p in data["probes"]["processes"]["data"]["processes"]:
            if p.get("executor") == "ray":
                p.setdefault("environ", {})["RAY_JOB_ID"] = job
        out.append(Snapshot.from_dict(data))
    return out


@on_sim_nodes
def test_without_sockets_the_ray_job_of_one_cluster_ties_them_and_another_job_does_not(swept: dict[str, Any]) -> None:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet

    same = analyze_fleet(_without_sockets(swept["saved"], {"gpu00": "01000000", "gpu01": "01000000"}))
    assert [g.nodes for g in same.fleet.groups] == [["gpu00", "gpu01"]] if same.fleet else False
    if swept["fault"] == "straggler":
        assert [(c.node, c.rank) for c in same.verdict.culprits] == [("gpu01", 3)], same.verdict.summary
    other = analyze_fleet(_without_sockets(swept["saved"], {"gpu00": "01000000", "gpu01": "02000000"}))
    assert other.fleet is not None and other.fleet.groups == []  # another driver's job: not this engine's workers
    assert other.verdict.status != "healthy", other.verdict.summary
