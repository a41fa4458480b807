"""Process layer on real process trees titled like vLLM: healthy, stopped, zombie, orphaned, missing rank."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.api import TriageResult, analyze_files, triage

from fake_tree import fake_tree, wait_state

PROBES = ["processes"]  # the process layer needs nothing else; keeps these tests fast and focused


def _triage(pid: int) -> TriageResult:
    return triage(pids=[pid], probes=PROBES, budget_s=5)


def test_healthy_tree_is_healthy_and_complete() -> None:
    with fake_tree(tp=4) as t:
        res = _triage(t.api)
        rep = res.report
        assert rep.verdict.status == "healthy", rep.verdict.summary
        # Only the processes were looked at (--probe processes): no "idle", since nothing looked for work.
        assert "Idle" not in rep.verdict.summary and "Progress not judged: stacks, rings, http not run" in rep.verdict.summary
        partial = triage(pids=[t.api], probes=["processes", "http"], budget_s=5).report.verdict  # idle as far as seen
        assert "Idle: no work in flight (no request running or waiting; not looked at: stacks, rings (not run))" \
            in partial.summary and partial.confidence == "medium", partial.summary
        assert rep.verdict.confidence == "medium"
        assert res.exit_code == 0
        assert len(rep.deployments) == 1
        dep = rep.deployments[0]
        assert dep.root_pid == t.api
        assert dep.configured == {"tp": 4}
        roles = {p.pid: (p.role, p.ranks.get("tp")) for p in dep.processes}
        assert roles[t.api] == ("api_server", None)
        assert roles[t.engine] == ("engine_core", None)
        assert {roles[pid] for pid in t.workers.values()} == {("worker", r) for r in range(4)}


def test_stopped_worker_is_the_culprit() -> None:
    with fake_tree(tp=4) as t:
        victim = t.workers[2]
        os.kill(victim, signal.SIGSTOP)
        wait_state(victim, "T")
        v = _triage(t.api).report.verdict
        assert (v.status, v.layer) == ("blocked", "process")
        assert v.culprits[0].pid == victim
        assert v.culprits[0].rank == 2
        assert "stopped" in v.summary


def test_killed_worker_zombie_is_the_culprit_with_its_rank() -> None:
    with fake_tree(tp=4) as t:
        victim = t.workers[1]
        os.kill(victim, signal.SIGKILL)
        wait_state(victim, "Z")
        v = _triage(t.api).report.verdict
        assert (v.status, v.layer) == ("blocked", "process")
        assert v.culprits[0].pid == victim
        codes = {f.code for f in _triage(t.api).report.findings}
        assert {"process.zombie", "process.rank_missing"} <= codes
        rank_culprits = [c for f in _triage(t.api).report.findings if f.code == "process.rank_missing" for c in f.culprits]
        assert [(c.pid, c.rank) for c in rank_culprits] == [(victim, 1)]


def test_engine_killed_workers_orphaned_names_missing_engine() -> None:
    with fake_tree(tp=2) as t:
        os.kill(t.engine, signal.SIGKILL)
        wait_state(t.engine, "Z")
        for w in t.workers.values():
            deadline_ok = _reparented(w, t.engine)
            assert deadline_ok
        rep = _triage(t.api).report
        v = rep.verdict
        assert (v.status, v.layer) == ("blocked", "process")
        assert v.culprits[0].role == "engine_core"
        orphaned = [f for f in rep.findings if f.code == "process.workers_orphaned"]
        assert orphaned and sorted(orphaned[0].pids) == sorted(t.workers.values())
        # the orphans still belong to their deployment (joined by process group)
        assert set(t.workers.values()) <= rep.deployments[0].pids


def _reparented(pid: int, old_parent: int) -> bool:
    import time

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as fh:
            if int(fh.read().rsplit(")", 1)[1].split()[1]) != old_parent:
                return True
        time.sleep(0.02)
    return False


def test_missing_rank_is_named() -> None:
    with fake_tree(tp=4, ranks=[0, 1, 3]) as t:
        v = _triage(t.api).report.verdict
        assert (v.status, v.layer) == ("blocked", "process")
        assert (v.culprits[0].rank, v.culprits[0].pid) == (2, None)
        assert "TP2" in v.summary


def test_saved_snapshot_reanalyzes_to_the_same_verdict(tmp_path: Path) -> None:
    with fake_tree(tp=2) as t:
        os.kill(t.workers[1], signal.SIGSTOP)
        wait_state(t.workers[1], "T")
        out = subprocess.run([sys.executable, "-m", "vllmdiag", "triage", "--json", "--pid", str(t.api),
                              "--probe", "processes", "--save", str(tmp_path / "snap.json")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1, out.stderr
        live = json.loads(out.stdout)
        again = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", "--json", "--pid", str(t.api),
                                str(tmp_path / "snap.json")], capture_output=True, text=True, timeout=60)
        assert again.returncode == 1, again.stderr
        assert json.loads(again.stdout)["verdict"] == live["verdict"]
        assert analyze_files([tmp_path / "snap.json"], [t.api]).report.verdict.to_dict() == live["verdict"]


def test_no_deployment_exit_code_3(tmp_path: Path) -> None:
    snap = {"schema_version": 1, "node": "n1", "collected_at": "", "vllmdiag_version": "x", "duration_s": 0.1,
            "probes": {"processes": {"status": "ok", "duration_s": 0.0, "data": {"processes": []}}}}
    f = tmp_path / "s.json"
    f.write_text(json.dumps(snap))
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(f)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3


# ---- state D: stuck in the kernel, or passing through it ----------------------------------------
RANK = Path(__file__).parent.parent / "data" / "stacks"


def _d_codes(snap: dict[str, Any], tmp_path: Path, pid: int) -> tuple[str, dict[str, str]]:
    f = tmp_path / f"snap-{len(list(tmp_path.iterdir()))}.json"
    f.write_text(json.dumps(snap))
    rep = analyze_files([f], [pid]).report
    return rep.verdict.status, {x.code: x.severity for x in rep.findings if x.code == "process.d_state"}


def test_one_look_in_d_is_not_a_stuck_process(tmp_path: Path) -> None:
    """CI, a healthy simulated DP worker on a busy node: the processes probe read it in D once (a page fault
    or a disk read passes through D) and the verdict said stuck in the kernel. Only D held over the later
    looks (the stacks probe reads each target's state before and after its dump) is stuck."""
    with fake_tree(tp=2) as t:
        snap = triage(pids=[t.api], probes=["processes", "stacks"], budget_s=8).report.snapshots[0].to_dict()
        victim = t.workers[1]
    procs = snap["probes"]["processes"]["data"]["processes"]
    next(p for p in procs if p["pid"] == victim)["state"] = "D"
    dumps = [d for d in snap["probes"]["stacks"]["data"]["dumps"] if d["pid"] == victim]
    assert dumps and all(d["state_before"] in ("R", "S") for d in dumps)
    assert _d_codes(snap, tmp_path, t.api) == ("healthy", {})  # it left D by the stacks' look
    for d in dumps:
        d["state_before"] = d["state_after"] = "D"
    assert _d_codes(snap, tmp_path, t.api) == ("blocked", {"process.d_state": "critical"})  # held
    del snap["probes"]["stacks"]
    status, codes = _d_codes(snap, tmp_path, t.api)  # one look, no later one: said, never critical
    assert codes == {"process.d_state": "warning"} and status == "degraded"


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the vfork helper")
def test_a_worker_held_in_d_is_blocked_at_the_process_layer(tmp_path: Path) -> None:
    """A real D-state process (vfork's parent waits in the kernel until its child dies), titled like a
    lone worker: every look sees D, so it is named stuck."""
    lib, ready = tmp_path / "vfork_hold.so", tmp_path / "ready"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(RANK / "vfork_hold.c")], check=True)
    proc = subprocess.Popen([sys.executable, str(RANK / "fake_rank.py"), "VLLM::Worker_TP0", "executing",
                             "--ready", str(ready), "--ttl", "40", "--hold-lib", str(lib)])
    try:
        wait_state(proc.pid, "D", timeout=15)
        rep = triage(pids=[proc.pid], probes=["processes", "stacks"], budget_s=8).report
        assert rep.verdict.status == "blocked"
        assert [(f.severity, f.culprits[0].pid) for f in rep.findings if f.code == "process.d_state"] == \
            [("critical", proc.pid)]
    finally:
        for child in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split():
            os.kill(int(child), signal.SIGKILL)  # the vfork child first: then its parent can die
        proc.kill()
        proc.wait(timeout=10)
