"""`vllmdiag sweep --gateway`: ClusterShell's tree mode through a namespaced gateway node.

The gateway is a node like the others (its own PID+mount namespace and sshd on 127.0.3.x); the root
reaches it over ssh, starts ClusterShell's gateway there, and the gateway runs the collect on the
nodes over its own ssh. Per-node addresses and ports travel as an ssh config file (inventory
defaults.ssh_config), the way a real gateway would hold them. The gateway's ClusterShell log shows
that it, not the root, reached the nodes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_fixtures import Fleet, NodeSpec, fleet, skip_reason

pytestmark = [pytest.mark.root, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]
ROOT = Path(__file__).resolve().parent.parent.parent
TP4 = ["fake/model", "--tensor-parallel-size", "4"]
FAST = ["--probe", "processes", "--probe", "host"]  # the fake tree has no sockets/rings: the process layer decides


@pytest.fixture(scope="module")
def tree_fleet() -> Iterator[tuple[Fleet, Path, Path]]:
    specs = [NodeSpec("tgw0", "127.0.3.10", None)]
    specs += [NodeSpec(f"tn{i}", f"127.0.3.{20 + i}", TP4, stop_ranks=[2] if i == 2 else []) for i in range(3)]
    with fleet(specs) as fl:
        inv = json.loads(fl.inventory.read_text())
        lines = []
        for name, conn in {**inv["nodes"], "tn9": {"address": "127.0.3.99", "port": 9}}.items():  # tn9: nothing listens
            lines += [f"Host {name}", f"  HostName {conn['address']}", f"  Port {conn['port']}", "  User root",
                      f"  IdentityFile {fl.tmp / 'client_key'}", "  IdentitiesOnly yes",
                      f"  UserKnownHostsFile {fl.tmp / 'known_hosts'}", "  StrictHostKeyChecking accept-new", ""]
        (fl.tmp / "ssh_config").write_text("\n".join(lines))
        tree_inv = fl.tmp / "tree.yaml"
        tree_inv.write_text(json.dumps({"defaults": {"ssh_config": str(fl.tmp / "ssh_config")}}))
        logs = fl.tmp / "gwlogs"
        logs.mkdir()
        yield fl, tree_inv, logs


def _sweep(fl: Fleet, inv: Path, logs: Path, *args: str) -> tuple[int, dict[str, Any], str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CLUSTERSHELL_GW_PYTHON_EXECUTABLE": sys.executable,
           "CLUSTERSHELL_GW_LOG_DIR": str(logs), "CLUSTERSHELL_GW_LOG_LEVEL": "DEBUG"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", *args, "--inventory", str(inv), "--json",
                           "--remote-cmd", fl.remote_cmd, *FAST], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr, time.monotonic() - start


def test_sweep_through_a_gateway_names_the_stuck_rank_and_times_each_node(tree_fleet: tuple[Fleet, Path, Path]) -> None:
    fl, inv, logs = tree_fleet
    rc, out, err, wall = _sweep(fl, inv, logs, "tn[0-2,9]", "--gateway", "tgw0", "--timeout", "20")
    status = {n["name"]: n["status"] for n in out["nodes"]}
    assert status == {"tn0": "ok", "tn1": "ok", "tn2": "ok", "tn9": "unreachable"}, (out["nodes"], err)
    v = out["verdict"]
    assert rc == 1 and v["status"] == "blocked" and v["layer"] == "process"
    assert (v["culprits"][0]["node"], v["culprits"][0]["rank"]) == ("tn2", 2)
    assert all(n["duration_s"] > 0 for n in out["nodes"]), "per-node timing"
    assert wall < 60
    # Each node saw its own namespace through the gateway: its own tree, namespace-local pids.
    assert all(len(s["probes"]["processes"]["data"]["processes"]) == 6 for s in out["snapshots"])
    gw_log = "\n".join(p.read_text(errors="replace") for p in logs.iterdir())
    # The gateway's own ClusterShell log: it ran the sessions and got each node's exit code.
    from ClusterShell.NodeSet import NodeSet

    ok = NodeSet.fromlist(re.findall(r"ClusterShell.Gateway DEBUG iter\(rc\): (\S+): rc=0", gw_log))
    assert set(ok) == {"tn0", "tn1", "tn2"}, gw_log[-2000:]
    assert "tn9: rc=255" in gw_log


def test_an_unreachable_gateway_is_reported_per_node_on_time(tree_fleet: tuple[Fleet, Path, Path]) -> None:
    fl, inv, logs = tree_fleet
    rc, out, err, wall = _sweep(fl, inv, logs, "tn[0-1]", "--gateway", "tn9", "--timeout", "8",
                                "--sweep-timeout", "20")
    assert {n["name"]: n["status"] for n in out["nodes"]}.keys() == {"tn0", "tn1"}
    assert all(n["status"] in ("unreachable", "timeout", "error") for n in out["nodes"]), out["nodes"]
    assert rc != 0 and wall < 40


@pytest.mark.parametrize("args,why", [
    (["tn0", "--gateway", "tgw0", "--exec", "kubectl exec %h --"], "--exec"),
    (["tn0", "--gateway", "tgw0", "--ship"], "--ship"),
    (["tn0", "--gateway", "tn0"], "both a gateway and a node"),
    (["tn0", "--gateway", "-oProxyCommand=x"], "invalid"),
])
def test_bad_tree_options_are_one_line_exit_2(tree_fleet: tuple[Fleet, Path, Path], args: list[str], why: str) -> None:
    fl, inv, logs = tree_fleet
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", *args, "--inventory", str(inv)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and why in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_topology_file_routes_through_its_gateway(tree_fleet: tuple[Fleet, Path, Path], tmp_path: Path) -> None:
    from vllmdiag.sweep.tree import local_name

    fl, inv, logs = tree_fleet
    topo = tmp_path / "topology.conf"
    topo.write_text(f"[routes]\n{local_name()}: tgw0\ntgw0: tn[0-2]\n")
    rc, out, err, _ = _sweep(fl, inv, logs, "tn[0-1]", "--topology", str(topo))
    assert {n["name"]: n["status"] for n in out["nodes"]} == {"tn0": "ok", "tn1": "ok"}, err
    assert rc == 0 and out["verdict"]["status"] == "healthy"
    bad = tmp_path / "bad.conf"
    bad.write_text("[routes]\nsomeone-else: tgw0\ntgw0: tn0\n")  # no route from this host
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "tn0", "--topology", str(bad), "--inventory",
                           str(inv)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and "topology" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
