"""Triage of a simulated TP=8 node vs `py-spy dump` of the same processes one after another.

Target (DESIGN.md): ratio <= 1.0, i.e. everything besides the stacks (/proc, sockets, rings sampled
twice, ZMTP, HTTP, NVML) hides behind the stack dumps. Also: collect peak RSS (target < 80 MB).
Reported as ratios and medians measured side by side in one run; never asserted in tests.

    python bench/bench_triage.py [--tp 8] [--runs 5] [--fault straggler]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from vllmdiag.sim.deployment import Deployment

RESULTS = Path(__file__).parent / "results"
RSS_SNIPPET = (
    "import sys\n"
    "from vllmdiag.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
    "sys.stderr.write(f'VMHWM_KB={hwm}\\n')\n"
)


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False)
    return time.perf_counter() - start


def _sequential_pyspy(pyspy: str, pids: list[int]) -> float:
    start = time.perf_counter()
    for pid in pids:
        subprocess.run([pyspy, "dump", "--json", "--pid", str(pid)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60, check=False)
    return time.perf_counter() - start


def _collect_rss_kb(root: int) -> int:
    out = subprocess.run([sys.executable, "-c", RSS_SNIPPET, "collect", "--json", "--pid", str(root)],
                         capture_output=True, text=True, timeout=120)
    line = next(x for x in out.stderr.splitlines() if x.startswith("VMHWM_KB="))
    return int(line.split("=")[1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fault", default="straggler")
    args = ap.parse_args()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    rank = args.tp // 2 if args.fault in ("straggler", "collective-mismatch", "rpc-ring-full") else None
    with Deployment.up(tp=args.tp, fault=args.fault, rank=rank) as dep:
        pids = [p["pid"] for p in dep.processes if p["role"] in ("api_server", "engine_core", "worker")]
        cli = [sys.executable, "-m", "vllmdiag", "triage", "--json", "--pid", str(dep.root_pid)]
        seq, tri = [], []
        _wall(cli)  # warm caches once
        for _ in range(args.runs):
            seq.append(_sequential_pyspy(pyspy, pids))
            tri.append(_wall(cli))
        rss_kb = _collect_rss_kb(dep.root_pid)
    res = {
        "tp": args.tp, "fault": args.fault, "processes": len(pids), "runs": args.runs,
        "pyspy_sequential_median_s": round(statistics.median(seq), 3),
        "triage_cli_median_s": round(statistics.median(tri), 3),
        "ratio_triage_over_sequential_pyspy": round(statistics.median(tri) / statistics.median(seq), 2),
        "collect_peak_rss_mb": round(rss_kb / 1024, 1),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "triage.json").write_text(json.dumps(res, indent=2) + "\n")
    width = max(len(k) for k in res)
    for key, value in res.items():
        print(f"{key:{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
