"""`sweep --ship` reads stacks on the node (issue 16): a simulated node whose rank 1 is a straggler is
swept with the self-contained bundle (and its py-spy), and the verdict names that rank at the gpu layer
from stack evidence, the node's `stacks` probe having run (status ok), not been blind. The node is a
simulated deployment in its own PID+mount namespaces, reached through ClusterShell's exec worker with
nsenter (as tests/live/test_fleet_confirm_live.py does)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.sweep.ship import local_py_spy

from fleet_fixtures import ns_init_pid, skip_reason

sim = pytest.importorskip("vllmdiag_sim.deployment")


def _sweep_shipped(tmp_path: Path) -> dict[str, Any]:
    deps: list[Any] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(sim.STATE_ENV, str(tmp_path / "sim"))
        try:
            deps.append(sim.Deployment.up(tp=2, namespace=True, fault="straggler", rank=1))
            (tmp_path / "gpu00").symlink_to(f"/proc/{ns_init_pid(deps[0].launcher_pid)}")
            exec_t = f"nsenter --pid={tmp_path}/%h/ns/pid --mount={tmp_path}/%h/ns/mnt --"
            proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "gpu00", "--exec", exec_t, "--ship", "--json"],
                                  capture_output=True, text=True, timeout=120)
        finally:
            for dep in deps:
                dep.down()
    assert proc.stdout, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


@pytest.mark.root
@pytest.mark.slow
def test_shipped_sweep_names_the_straggler_from_its_stacks(tmp_path: Path) -> None:
    if skip_reason() is not None:
        pytest.skip(skip_reason() or "")
    if local_py_spy() is None:
        pytest.skip("py-spy not installed here, so there is none to ship (pip install py-spy)")
    out = _sweep_shipped(tmp_path)
    assert [n["status"] for n in out["nodes"]] == ["ok"], out["nodes"]
    (snap,) = out["snapshots"]
    stacks = snap["probes"]["stacks"]
    assert stacks["status"] == "ok", stacks  # the bundle read the stacks itself, on the node
    v = out["verdict"]
    assert (v["status"], v["layer"]) == ("blocked", "gpu"), v["summary"]
    assert (v["culprits"][0]["node"], v["culprits"][0]["rank"]) == ("gpu00", 1), v["culprits"]
    (straggler,) = [f for f in out["findings"] if f["code"] == "gpu.rank_straggler"]
    assert (straggler["node"], straggler["severity"]) == ("gpu00", "critical"), straggler
    assert straggler["evidence"]["peer_stack"], straggler  # the peers' stacks, read on the node
    assert "never arrived" in v["culprits"][0]["reason"], v["culprits"]
