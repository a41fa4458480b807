"""`sweep --confirm S`: a node whose quick pass sees work in flight and nothing moving watches on the
node itself (triage's confirm window, `collect --confirm S`), so a uniform hang in a fleet is a block,
not a "suspected" stall. Nodes are simulated deployments in their own PID+mount namespaces, reached
through ClusterShell's exec worker with nsenter (as `vllmdiag demo --fleet` does)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_fixtures import ns_init_pid, skip_reason
from sim_fixtures import two_node_group

sim = pytest.importorskip("vllmdiag_sim.deployment")
NODES = [pytest.mark.root, pytest.mark.slow]  # the sim-node tests (the first one is neither)
CONFIRM = "5"  # > HELD_S (3 s) plus start-up: the window counts from the collector process's start (issue 24)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    if skip_reason() is not None:
        pytest.skip(skip_reason() or "")
    from vllmdiag_sim.demo import inject

    tmp = tmp_path_factory.mktemp("confirm-fleet")
    deps: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(sim.STATE_ENV, str(tmp / "sim"))
        try:
            for name in ("gpu00", "gpu01"):
                deps[name] = sim.Deployment.up(tp=2, namespace=True)
            inject(deps["gpu01"], "uniform-collective", None)
            for name, dep in deps.items():
                (tmp / name).symlink_to(f"/proc/{ns_init_pid(dep.launcher_pid)}")
            yield {"tmp": tmp, "exec": f"nsenter --pid={tmp}/%h/ns/pid --mount={tmp}/%h/ns/mnt --"}
        finally:
            for dep in deps.values():
                dep.down()


def sweep(fl: dict[str, Any], *args: str) -> tuple[int, dict[str, Any], float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "gpu00,gpu01", "--exec", fl["exec"],
                           "--remote-cmd", f"{sys.executable} -m vllmdiag", "--json", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout), time.monotonic() - start


def blocked_on_gpu01(rc: int, out: dict[str, Any]) -> None:
    v = out["verdict"]
    assert [n["status"] for n in out["nodes"]] == ["ok", "ok"], out["nodes"]
    assert (rc, v["status"], v["layer"]) == (1, "blocked", "gpu"), v["summary"]
    assert {c["node"] for c in v["culprits"]} == {"gpu01"}, v["culprits"]
    assert "TP[0-1]" in v["culprits"][0]["title"], v["culprits"]  # the whole group, folded
    assert any(f["code"] == "gpu.uniform_hang" and f["node"] == "gpu01" for f in out["findings"])
    assert not [f for f in out["findings"] if f["node"] == "gpu00" and f["severity"] == "critical"]


@NODES[0]
@NODES[1]
def test_uniform_hang_on_one_node_is_blocked_and_analyze_agrees(fleet: dict[str, Any], tmp_path: Path) -> None:
    rc, out, _ = sweep(fleet, "--confirm", CONFIRM, "--save", str(tmp_path / "saved"))
    blocked_on_gpu01(rc, out)
    snaps = {s["node"]: s for s in out["snapshots"]}
    assert snaps["gpu01"]["options"]["confirm"]["watched_s"] >= 3 and snaps["gpu01"].get("passes")
    assert "confirm" not in snaps["gpu00"]["options"] and not snaps["gpu00"].get("passes")  # healthy: no window
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(tmp_path / "saved"), "--json"],
                          capture_output=True, text=True, timeout=60)
    again = json.loads(proc.stdout)
    assert proc.returncode == rc
    assert {k: again["verdict"][k] for k in ("status", "layer")} == {k: out["verdict"][k] for k in ("status", "layer")}
    assert [c["node"] for c in again["verdict"]["culprits"]] == [c["node"] for c in out["verdict"]["culprits"]]


@NODES[0]
@NODES[1]
def test_without_the_window_it_stays_a_suspicion(fleet: dict[str, Any]) -> None:
    rc, out, _ = sweep(fleet, "--confirm", "0")
    assert out["verdict"]["status"] != "blocked", out["verdict"]["summary"]  # what the window adds above
    assert not any(s.get("passes") for s in out["snapshots"])


@NODES[0]
@NODES[1]
def test_ship_bundle_watches_too(fleet: dict[str, Any]) -> None:
    rc, out, _ = sweep(fleet, "--ship", "--no-ship-py-spy", "--confirm", CONFIRM)
    blocked_on_gpu01(rc, out)


@NODES[0]
@NODES[1]
def test_a_given_sweep_timeout_stays_hard(fleet: dict[str, Any]) -> None:
    rc, out, wall = sweep(fleet, "--confirm", "30", "--timeout", "10", "--sweep-timeout", "16")
    assert wall < 16 + 3, wall  # the window was cut to fit (16 - 10 - 1 = 5 s), not the deadline stretched
    blocked_on_gpu01(rc, out)
    sick = next(s for s in out["snapshots"] if s["node"] == "gpu01")
    assert sick["options"]["confirm"]["requested_s"] == 5.0


@NODES[0]
@NODES[1]
def test_a_rank_odd_across_nodes_outranks_the_waiting_shares_uniform_hang(tmp_path: Path) -> None:
    """TP=4 over two nodes, rank 3 (node B) a straggler: node A's share waits alike in the collective,
    which its own window would call a uniform hang; across nodes the culprit is rank 3 on node B."""
    with two_node_group(tmp_path, "straggler", 3) as deps:
        for name, dep in zip(("gpu00", "gpu01"), deps, strict=True):
            (tmp_path / name).symlink_to(f"/proc/{ns_init_pid(dep.launcher_pid)}")
        rc, out, _ = sweep({"exec": f"nsenter --pid={tmp_path}/%h/ns/pid --mount={tmp_path}/%h/ns/mnt --"},
                           "--confirm", CONFIRM)
    v = out["verdict"]
    assert (v["status"], v["layer"], v["culprits"][0]["node"], v["culprits"][0]["rank"]) == ("blocked", "gpu", "gpu01", 3)
    assert not [f for f in out["findings"] if f["code"] == "gpu.uniform_hang"], v["summary"]
    assert any(s.get("passes") for s in out["snapshots"] if s["node"] == "gpu00")  # the share did watch
