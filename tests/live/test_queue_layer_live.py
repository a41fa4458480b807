"""Queue layer: roles, culprits and /dev/shm health, from real segments mapped by titled process
trees, from saved-snapshot edits, and end to end on the simulator."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from test_queue_layer import MiB, only, queue_findings  # noqa: F401 - shared with the pure half
from test_rings_probe import DEV_SHM, collect, deployment_spec, segments_fixture  # noqa: F401
from test_rings_probe_live import tree_fixture  # noqa: F401

from vllmdiag.analysis.bisect import decide
from vllmdiag.analysis.views.deployments import find_deployments
from vllmdiag.analysis.views.ring_roles import ring_roles
from vllmdiag.model import Finding
from vllmdiag.playbooks.playbook import next_steps_for


def craft_rpc(path: Path, slots: list[tuple[int, ...]], chunk_mib: int = 16) -> Path:
    """A >= 0.12 rpc ring with the given flags; written slots carry an `execute_model` tuple."""
    k, n = len(slots), len(slots[0]) - 1
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, (chunk_mib * MiB + 1 + n) * k)
        for i, s in enumerate(slots):
            if s[0]:
                main = pickle.dumps(("execute_model", (i,), {}, 0), protocol=5)
                os.pwrite(fd, b"\x00\x00\x01" + len(main).to_bytes(4, "big") + main, i * chunk_mib * MiB)
        os.pwrite(fd, bytes(b for s in slots for b in s), chunk_mib * MiB * k)
    finally:
        os.close(fd)
    return path


def pid_of(proc: dict[str, Any] | None) -> int | None:
    """A ring role's writer or reader pid; None where no process was placed (the test then fails)."""
    return proc["pid"] if proc is not None else None


def test_real_fixtures_blame_worker_tp2_not_the_engine(segments, tree) -> None:
    rpc, resp, bcast = (segments(f) for f in ("rpc-tp4-reader2-stuck", "response-3-unread",
                                               "tp-broadcaster-3readers-2read"))
    t = tree(deployment_spec(rpc, resp, bcast))
    snap = collect(t["prefix"])
    roles = {r.name: r for r in ring_roles(snap, find_deployments(snap))}
    pids = t["pids"]
    assert roles[rpc.name].role == "rpc_broadcast_mq" and pid_of(roles[rpc.name].writer) == pids["EngineCore"]
    assert [pid_of(p) for p in roles[rpc.name].readers] == [pids[f"Worker_TP{r}"] for r in range(4)]
    assert roles[resp.name].role == "worker_response_mq" and pid_of(roles[resp.name].writer) == pids["Worker_TP0"]
    assert roles[bcast.name].role == "group_broadcaster" and pid_of(roles[bcast.name].writer) == pids["Worker_TP0"]
    assert [pid_of(p) for p in roles[bcast.name].readers] == [pids[f"Worker_TP{r}"] for r in (1, 2, 3)]
    found = queue_findings(snap)
    full = only(found, "queue.ring_full")
    assert full.severity == "critical" and [c.pid for c in full.culprits] == [pids["Worker_TP2"]]
    assert full.culprits[0].rank == 2 and full.evidence["stable_unread"] == [0, 0, 10, 0]
    # TP0's 3 unread replies are explained: the EngineCore is blocked writing the full rpc ring.
    assert only(found, "queue.response_unread").severity == "info"
    verdict = decide(snap, found)
    assert verdict.status == "blocked" and verdict.layer == "queue" and verdict.culprits[0].pid == pids["Worker_TP2"]
    assert f"py-spy dump --pid {pids['Worker_TP2']}" in next_steps_for(full)


def test_lagging_reader_not_full(tree) -> None:
    slots: list[tuple[int, ...]] = [*[(1, 1, 1, 1, 1)] * 2, *[(1, 1, 0, 1, 1)] * 3, *[(0, 0, 0, 0, 0)] * 5]
    rpc = craft_rpc(DEV_SHM / f"psm_{os.urandom(4).hex()}", slots)
    try:
        t = tree({"title": "EngineCore", "maps": [str(rpc)],
                  "children": [{"title": f"Worker_TP{r}", "maps": [str(rpc)]} for r in range(4)]})
        found = queue_findings(collect(t["prefix"]))
        lag = only(found, "queue.reader_lagging")
        assert lag.severity == "critical" and [c.pid for c in lag.culprits] == [t["pids"]["Worker_TP1"]]
        assert lag.evidence["writer_index"] == 5 and lag.evidence["last_method"] == "execute_model"
    finally:
        rpc.unlink(missing_ok=True)


def test_response_ring_unread_blames_the_engine(segments, tree) -> None:
    resp = segments("response-3-unread")
    t = tree({"title": "EngineCore", "maps": [str(resp)], "children": [{"title": "Worker_TP0", "maps": [str(resp)]}]})
    f = only(queue_findings(collect(t["prefix"])), "queue.response_unread")
    assert f.severity == "critical" and [c.pid for c in f.culprits] == [t["pids"]["EngineCore"]]
    assert f.culprits[0].role == "engine_core"


def test_every_reader_behind_has_no_single_culprit(tree) -> None:
    rpc = craft_rpc(DEV_SHM / f"psm_{os.urandom(4).hex()}", [(1, 0, 0)] * 10)
    try:
        t = tree({"title": "EngineCore", "maps": [str(rpc)],
                  "children": [{"title": f"Worker_TP{r}", "maps": [str(rpc)]} for r in range(2)]})
        f = only(queue_findings(collect(t["prefix"])), "queue.readers_all_behind")
        assert f.severity == "warning" and not f.culprits
    finally:
        rpc.unlink(missing_ok=True)


def test_leaked_segments_are_a_node_warning(segments, tree) -> None:
    leaked_ring = segments("tp-broadcaster-3readers-2read")
    dataloader = segments(data=os.urandom(4096), size=3 * 224 * 224 * 4)
    nccl = DEV_SHM / f"nccl-{os.urandom(3).hex()}"
    nccl.write_bytes(b"\0" * 4096)
    try:
        t = tree({"title": "EngineCore"})
        leak = only(queue_findings(collect(t["prefix"])), "queue.shm_leaked")
        names = {s["name"] for s in leak.evidence["segments"]}
        assert {leaked_ring.name, nccl.name} <= names
        assert dataloader.name not in names  # a psm_ that is not a vLLM ring is not ours to call leaked
        assert leak.severity == "warning" and leak.deployment is None
    finally:
        nccl.unlink(missing_ok=True)


# ---- end to end on the simulator ---------------------------------------------------------------------
sim = pytest.importorskip("vllmdiag_sim.deployment")


def shm_state(names: list[str]) -> dict[str, tuple[int, int, str]]:
    """size, mtime and a hash of the tail (the flags) of each named segment."""
    out = {}
    for name in names:
        p = DEV_SHM / name
        with open(p, "rb") as f:
            st = os.fstat(f.fileno())
            tail = os.pread(f.fileno(), 8192, max(0, st.st_size - 8192))
            out[name] = (st.st_size, st.st_mtime_ns, hashlib.sha256(tail).hexdigest())
    return out


def queue_of(result: Any) -> list[Finding]:
    return [f for f in result.report.findings if f.layer == "queue"]


def test_sim_rpc_ring_full_blames_the_stuck_worker_and_triage_writes_nothing() -> None:
    from vllmdiag.api import triage

    with sim.Deployment.up(tp=4, fault="rpc-ring-full", rank=2) as d:
        before = shm_state(d.segments)
        result = triage(pids=[d.root_pid])
        assert shm_state(d.segments) == before
        v = result.report.verdict
        assert v.status == "blocked" and v.layer == "queue", v.summary
        assert v.culprits[0].pid == d.worker_pid(2) and v.culprits[0].rank == 2


def test_sim_response_ring_unread_blames_the_engine() -> None:
    from vllmdiag.api import triage

    with sim.Deployment.up(tp=2, fault="response-ring-full", rank=0) as d:
        v = triage(pids=[d.root_pid]).report.verdict
        assert v.status == "blocked" and v.layer == "queue", v.summary
        assert v.culprits[0].pid == d.engine_pid() and v.culprits[0].role == "engine_core"


def test_sim_leaked_segments_degrade() -> None:
    from vllmdiag.api import triage

    with sim.Deployment.up(tp=2, fault="shm-leak") as d:
        result = triage(pids=[d.root_pid])
        leak = next(f for f in queue_of(result) if f.code == "queue.shm_leaked")
        assert set(d.leaked) <= {s["name"] for s in leak.evidence["segments"]}
        assert result.report.verdict.status == "degraded", result.report.verdict.summary
        assert not [f for f in queue_of(result) if f.severity == "critical"]


def test_sim_healthy_under_load_has_no_queue_finding() -> None:
    from vllmdiag.api import triage

    with sim.Deployment.up(tp=2, fault="healthy-load") as d:
        result = triage(pids=[d.root_pid])
        mine = [f for f in queue_of(result) if f.deployment is not None]
        assert mine == [], [f.message for f in mine]
