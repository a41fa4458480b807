"""The live tests of tests/unit/test_pd.py, which says what they check: these start something."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest

from vllmdiag.vocab.stack_classes import KV_TRANSFER

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root to read the simulator's stacks")


@needs_root
def test_decode_instance_waiting_for_kv_names_the_producer_and_never_messages_the_side_channel() -> None:
    from vllmdiag.api import triage

    sim = pytest.importorskip("vllmdiag_sim.deployment")
    with sim.Deployment.up(tp=1, fault="kv-wait", shape="pd") as dep:
        report = triage(pids=[dep.root_pid], budget_s=8, confirm_s=5.0).report
        snap = report.snapshots[0]
        api = next(p for p in snap.data("processes")["processes"] if p["pid"] == dep.root_pid)
        port = api["environ"]["VLLM_NIXL_SIDE_CHANNEL_PORT"]  # kept by the processes probe (VLLM_*)
        looked = [z for z in snap.data("endpoints")["zmtp"] if z["endpoint"] == f"tcp://127.0.0.1:{port}"]
        # the ZMTP look reached the ROUTER and hung up before READY: no message reached the listener
        assert looked and looked[0]["peer_socket_type"] == "ROUTER", snap.data("endpoints")["zmtp"]
        assert not (dep.path / "acks" / "nixl-side-channel-message").exists()
        v = report.verdict
        assert (v.status, v.layer, v.confidence) == ("degraded", "queue", "medium"), v.summary
        assert v.culprits[0].role == "kv_producer" and v.culprits[0].pid is None
        info = next(f for f in report.findings if f.code == "queue.kv_connector")
        assert info.evidence["side_channel_listening"] is True and info.evidence["role"] == "kv_consumer"
        # no layer blames a local process: nothing critical, no warning with a local culprit
        loud = [f for f in report.findings if f.severity != "info"]
        assert [f.code for f in loud] == ["queue.kv_transfer_waiting"], [f.message for f in loud]
        assert all(not f.culprits for f in report.findings if f.code == "client.requests_stuck_waiting")


@needs_root
def test_empty_steps_of_a_decode_instance_waiting_for_kv_are_not_movement() -> None:
    """At TP=2 the rpc ring's flags change on every 0-token step: the quick pass saw them "move" and
    called the deployment healthy, so the confirm window never opened (the accuracy matrix under a CPU
    hog). Polling is no movement: only a counter would be."""
    from vllmdiag.analysis.views.deployments import find_deployments
    from vllmdiag.analysis.views.progress import all_passes, deployment_progress
    from vllmdiag.api import collect_node

    sim = pytest.importorskip("vllmdiag_sim.deployment")
    with sim.Deployment.up(tp=2, fault="kv-wait", shape="pd") as dep:
        for _ in range(3):
            snap = collect_node(options={"pids": [dep.root_pid]}, budget_s=8)
            mine = [d for d in find_deployments(snap) if d.root_pid == dep.root_pid]
            progress = deployment_progress(all_passes(snap), mine)[0]
            assert progress.work_in_flight
            assert not any(m.startswith(("ring ", "stacks ")) for m in progress.moved_what), progress.moved_what
            assert not progress.moved, progress.moved_what


def test_a_decode_rank_polling_its_kv_connector_is_never_a_rank_stuck_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Caught in the connector's poll while its peer idles and the EngineCore waits, and held at the
    second look (a loaded CI run: `blocked/gpu, VLLM::Worker_TP1 stays in kv_transfer`): that is the
    decode instance waiting for its producer's KV, which the queue layer names after the confirm
    window; the gpu layer must not call it a stuck rank."""
    from vllmdiag.analysis import facts as facts_module
    from vllmdiag.analysis.layers.gpu import lone_rank
    from vllmdiag.analysis.views.deployments import find_deployments
    from vllmdiag.analysis.views.kv_wait import kv_wait
    from vllmdiag.analysis.views.stack_match import classify_snapshot
    from vllmdiag.api import triage

    sim = pytest.importorskip("vllmdiag_sim.deployment")
    with sim.Deployment.up(tp=2, fault="kv-wait", shape="pd") as dep:
        snap = triage(pids=[dep.root_pid], budget_s=8, confirm_s=5).report.snapshots[0]
        workers = {p["pid"] for p in dep.processes if p["role"] == "worker"}
    # The picture of that run, whatever this one caught: the TP1 worker in the connector's poll.
    pid = max(workers)
    real = classify_snapshot

    def caught(snapshot: Any, rules: Any = None) -> dict[int, Any]:
        out = dict(real(snapshot, rules))
        if pid in out:
            out[pid] = dataclasses.replace(out[pid], name=KV_TRANSFER)
        return out
    monkeypatch.setattr(facts_module, "classify_snapshot", caught)
    mine = [d for d in find_deployments(snap) if d.root_pid == dep.root_pid]
    wait = kv_wait(facts_module.Facts.of(snap, mine), mine[0])
    assert wait is not None and pid in wait["polling_pids"]  # the queue layer's finding holds: it waits for KV
    rank = next(p for p in mine[0].processes if p["pid"] == pid)
    monkeypatch.setattr(lone_rank, "lone_rank", lambda procs, cls: rank)  # alone busy,
    monkeypatch.setattr(lone_rank, "held", lambda pid, first, again: True)  # held at the second look,
    monkeypatch.setattr(lone_rank, "rings_still", lambda snapshot, dep: True)  # rings still
    assert [f.code for f in lone_rank.analyze(facts_module.Facts.of(snap, mine))] == []
