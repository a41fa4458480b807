"""Fleet analysis time at 384 and 3,840 GPUs (48 and 480 nodes of TP=8), plus midpoints to show it is linear.

The synthetic fleet is cloned from one real snapshot: a vLLM-titled TP=8 process tree (tests/data/bin/vllm)
collected by the real probes. One node in 16 carries a stopped worker, so classes and culprits are exercised.
Budget (DESIGN.md): 384 GPUs < 0.5 s, 3,840 GPUs < 5 s. Results: table on stdout, JSON under bench/results/.
Usage: python bench/bench_fleet_analysis.py [--runs 5]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet  # noqa: E402
from vllmdiag.analysis.bisect import analyze_snapshot  # noqa: E402
from vllmdiag.api import collect  # noqa: E402
from vllmdiag.model import Snapshot  # noqa: E402

from fake_tree import fake_tree  # noqa: E402

BUDGET_S = {48: 0.5, 480: 5.0}


def sim_snapshot() -> Snapshot | None:
    """A simulated TP=8 vLLM 0.33 node (rings, sockets, stacks) in its own namespace, all probes (root only)."""
    import os
    import subprocess
    import tempfile

    try:
        from vllmdiag_sim import deployment as sim
    except ImportError:
        return None
    if os.geteuid() != 0:
        return None
    with tempfile.TemporaryDirectory(prefix="vllmdiag-bench-") as tmp:
        os.environ[sim.STATE_ENV] = tmp
        with sim.Deployment.up(tp=8, namespace=True) as dep:
            init = int(Path(f"/proc/{dep.launcher_pid}/task/{dep.launcher_pid}/children").read_text().split()[0])
            out = subprocess.run(["nsenter", "-t", str(init), "-p", "-m", sys.executable, "-m", "vllmdiag", "collect",
                                  "--json", "--node", "gpu"], capture_output=True, timeout=60, check=True)
    return Snapshot.from_dict(json.loads(out.stdout))


def base_snapshot() -> Snapshot:
    snap = sim_snapshot()
    if snap is not None:
        return snap
    with fake_tree(tp=8) as tree:
        snap = collect(probes=["processes", "host", "sockets", "shm"], budget_s=5.0)
        mine = set(tree.all_pids)
    snap.data("processes")["processes"] = [p for p in snap.data("processes")["processes"] if p["pid"] in mine]
    return snap


def fleet(base: Snapshot, nodes: int) -> list[Snapshot]:
    out = []
    for i in range(nodes):
        snap = copy.deepcopy(base)
        snap.node = f"gpu{i:03d}"
        if i % 16 == 5:  # a stopped worker: a blocked node among healthy ones
            next(p for p in snap.data("processes")["processes"] if (p.get("ranks") or {}).get("tp") == 3)["state"] = "T"
        out.append(snap)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    base = base_snapshot()
    source = "simulated vLLM node, all probes" if "stacks" in base.probes else "fake tree, process/host/socket/shm probes"
    print(f"base snapshot: {source}; {len(json.dumps(base.to_dict())) >> 10} KiB per node")
    rows: list[dict[str, Any]] = []
    for nodes in (48, 96, 240, 480):
        snaps = fleet(base, nodes)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            report = analyze_fleet(snaps)
            times.append(time.perf_counter() - start)
        assert report.verdict.status == "blocked" and len(report.fleet.classes) == 2, report.verdict.summary
        med = statistics.median(times)
        start = time.perf_counter()
        for snap in snaps:  # the single-node engine alone: what the fleet layer adds is the difference
            analyze_snapshot(snap)
        engine_s = time.perf_counter() - start
        budget = BUDGET_S.get(nodes)
        rows.append({"nodes": nodes, "gpus": nodes * 8, "median_s": round(med, 4), "per_node_ms": round(med / nodes * 1e3, 3),
                     "budget_s": budget, "budget_ratio": round(med / budget, 3) if budget else None,
                     "engine_s": round(engine_s, 4), "fleet_layer_s": round(max(0.0, med - engine_s), 4)})
    print(f"{'GPUs':>6} {'nodes':>6} {'median s':>9} {'ms/node':>8} {'budget s':>9} {'of budget':>10} "
          f"{'node engine s':>14} {'fleet layer s':>14}")
    for r in rows:
        shown = f"{r['budget_s']:.1f}" if r["budget_s"] else "-"
        ratio = f"{r['budget_ratio']:.2f}x" if r["budget_ratio"] is not None else "-"
        print(f"{r['gpus']:>6} {r['nodes']:>6} {r['median_s']:>9.3f} {r['per_node_ms']:>8.2f} {shown:>9} {ratio:>10} "
              f"{r['engine_s']:>14.3f} {r['fleet_layer_s']:>14.3f}")
    linear = rows[-1]["per_node_ms"] / rows[0]["per_node_ms"]
    print(f"linearity: per-node cost at 480 nodes is {linear:.2f}x the cost at 48 nodes (1.0 = linear)")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    result = {"runs": args.runs, "source": source, "rows": rows, "linearity": round(linear, 3)}
    (out / "fleet_analysis.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
