"""The fleet fault from DESIGN.md with the simulator: a TP group spans two namespaced nodes, one rank
on node B never reaches the collective; the sweep (all probes, over ssh into each node) names node B
and that rank, and a second sample confirms it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet_fixtures import NodeSpec, fleet, ns_init_pid, skip_reason
from sim_fixtures import two_node_group

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]
sim = pytest.importorskip("vllmdiag_sim.deployment", reason="waits for simulator (issue 3)")


CODES = {"straggler": "fleet.rank_straggler", "collective-mismatch": "fleet.collective_mismatch"}


def sweep_group(tmp_path: Path, fault: str, rank: int | None) -> tuple[int, dict[str, Any]]:
    with two_node_group(tmp_path, fault, rank) as (a, b):
        specs = [NodeSpec("gpu-a", "127.0.0.40", ns_pid=ns_init_pid(a.launcher_pid)),
                 NodeSpec("gpu-b", "127.0.0.41", ns_pid=ns_init_pid(b.launcher_pid))]
        with fleet(specs) as fl:
            proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "gpu-a,gpu-b", "--inventory",
                                   str(fl.inventory), "--remote-cmd", fl.remote_cmd, "--timeout", "25", "--json"],
                                  capture_output=True, text=True, timeout=90)
    out = json.loads(proc.stdout)
    assert [n["status"] for n in out["nodes"]] == ["ok", "ok"], out["nodes"]
    return proc.returncode, out


def test_healthy_two_node_group_is_healthy(tmp_path: Path) -> None:
    rc, out = sweep_group(tmp_path, "healthy", None)
    assert rc == 0 and out["verdict"]["status"] == "healthy", out["verdict"]["summary"]
    assert out["fleet"]["groups"][0]["nodes"] == ["gpu-a", "gpu-b"]


@pytest.mark.parametrize("fault", sorted(CODES))
def test_cross_node_odd_rank_names_node_b_and_the_rank(tmp_path: Path, fault: str) -> None:
    rc, out = sweep_group(tmp_path, fault, 3)
    v = out["verdict"]
    assert v["layer"] == "gpu" and v["status"] in ("blocked", "degraded"), v["summary"]
    assert (v["culprits"][0]["node"], v["culprits"][0]["rank"]) == ("gpu-b", 3), v["culprits"]
    odd = [f for f in out["findings"] if f["code"] == CODES[fault]]
    assert odd and odd[0]["evidence"]["waiting"] == "gpu-a:TP[0-1],gpu-b:TP2"
    assert not [f for f in out["findings"] if f["severity"] == "critical" and f["node"] == "gpu-a"]
    # confirmed by the second sample the sweep took on the group's nodes -> blocked, exit 1
    assert odd[0]["evidence"]["confirmed_by_resample"] and v["status"] == "blocked" and rc == 1
