"""Sweep wall time over N namespaced loopback nodes vs one node's collect + ssh connect, and vs clush.

Each node is a PID+mount namespace with a vLLM-titled TP=8 process tree and its own sshd on 127.0.0.x
(tests/fleet_fixtures.py). Three things run the *same* collect command on the same nodes, interleaved,
median of --runs each:
  one    `ssh NODE <collect>` for one node (connect + collect),
  sweep  `vllmdiag sweep NODES --json` (ClusterShell fan-out + parse + fleet analysis + JSON out),
  clush  `clush -w NODES -f FANOUT <collect>` (ClusterShell's own CLI, output discarded).
Root only (namespaces, sshd). Results: ratio table on stdout, JSON under bench/results/.
Usage: python bench/bench_sweep.py [--nodes 4,16,48] [--runs 3] [--probes processes,host,sockets,shm]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fleet_fixtures import Fleet, NodeSpec, fleet, skip_reason  # noqa: E402

TP8 = ["fake/model", "--tensor-parallel-size", "8"]


def ssh_config(fl: Fleet) -> Path:
    """The inventory as an ssh config file, so `ssh` and `clush` reach the same nodes the same way."""
    inv = json.loads(fl.inventory.read_text())
    d = inv["defaults"]
    lines = []
    for name, n in inv["nodes"].items():
        lines += [f"Host {name}", f"  HostName {n['address']}", f"  Port {n['port']}", f"  User {d['user']}",
                  f"  IdentityFile {d['identity_file']}", "  IdentitiesOnly yes", f"  UserKnownHostsFile {d['known_hosts_file']}",
                  "  StrictHostKeyChecking accept-new", "  BatchMode yes", "  LogLevel ERROR", "  ConnectTimeout 5"]
    path = fl.tmp / "ssh_config"
    path.write_text("\n".join(lines) + "\n")
    return path


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, timeout=300)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{argv[:4]}... exit {proc.returncode}: {proc.stderr.decode()[-400:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="4,16,48", help="node counts to measure (comma separated)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--fanout", type=int, default=64)
    parser.add_argument("--probes", default="processes,host,sockets,shm", help="'all' for every default probe")
    args = parser.parse_args()
    if skip_reason():
        print(f"skipped: {skip_reason()}")
        return 0
    counts = sorted(int(n) for n in args.nodes.split(","))
    probes = [] if args.probes == "all" else [a for p in args.probes.split(",") for a in ("--probe", p)]
    collect = [sys.executable, "-m", "vllmdiag", "collect", "--json", "--budget", "8", *probes]
    specs = [NodeSpec(f"gpu{i:02d}", f"127.0.{1 + i // 200}.{2 + i % 200}", TP8) for i in range(counts[-1])]
    start = time.perf_counter()
    rows = []
    with fleet(specs) as fl:
        print(f"{len(specs)} namespaced nodes (TP=8 tree + sshd each) up in {time.perf_counter() - start:.1f} s")
        cfg = ssh_config(fl)
        one = ["ssh", "-F", str(cfg), "gpu00", shlex.join(collect)]
        for n in counts:
            nodeset = f"gpu[00-{n - 1:02d}]" if n > 1 else "gpu00"
            sweep = [sys.executable, "-m", "vllmdiag", "sweep", nodeset, "--inventory", str(fl.inventory), "--remote-cmd",
                     f"{sys.executable} -m vllmdiag", *probes, "--fanout", str(args.fanout), "--no-confirm", "--json"]
            clush = ["clush", "-w", nodeset, "-f", str(args.fanout), "-o", f"-F {cfg}", "-t", "10", "-u", "60",
                     shlex.join(collect)]
            t: dict[str, list[float]] = {"one": [], "sweep": [], "clush": []}
            timed(sweep)  # warm the page cache and known_hosts once
            for _ in range(args.runs):
                for name, argv in (("one", one), ("sweep", sweep), ("clush", clush)):
                    t[name].append(timed(argv))
            med = {k: statistics.median(v) for k, v in t.items()}
            rows.append({"nodes": n, "gpus": 8 * n, **{f"{k}_s": round(v, 3) for k, v in med.items()},
                         "sweep_vs_one": round(med["sweep"] / med["one"], 2),
                         "sweep_vs_clush": round(med["sweep"] / med["clush"], 2),
                         "clush_vs_one": round(med["clush"] / med["one"], 2)})
    print(f"{'nodes':>5} {'one s':>7} {'sweep s':>8} {'clush s':>8} {'sweep/one':>10} {'sweep/clush':>12} {'clush/one':>10}")
    for r in rows:
        print(f"{r['nodes']:>5} {r['one_s']:>7.2f} {r['sweep_s']:>8.2f} {r['clush_s']:>8.2f} {r['sweep_vs_one']:>9.2f}x "
              f"{r['sweep_vs_clush']:>11.2f}x {r['clush_vs_one']:>9.2f}x")
    print("budget (DESIGN.md): sweep of 48 <= 1.3x one node, <= clush. All nodes share this machine's CPUs, so sweep/one "
          "grows with N here; sweep/clush is the like-for-like ratio.")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"runs": args.runs, "probes": args.probes, "fanout": args.fanout,
                                                "cpus": __import__("os").cpu_count(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
