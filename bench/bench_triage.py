"""Triage of a simulated TP=8 node vs `py-spy dump` of the same processes one after another.

Target (DESIGN.md): ratio <= 1.0, i.e. everything besides the stacks (/proc, sockets, rings sampled
twice, ZMTP, HTTP, NVML) hides behind the stack dumps. Also: collect peak RSS (target < 80 MB).
Also CPU time vs that of the sequential py-spy dumps: the collector's (the forked child that runs the
probes, with its py-spy and NVML children; target <= 2x) and the whole CLI's (interpreter, imports,
analysis and JSON too). Reported as ratios and medians measured side by side in one run, with the
1-minute load average at the end (2 shared cores: a loaded machine stretches every number); never
asserted in tests.

    python bench/bench_triage.py [--tp 8] [--runs 5] [--faults healthy,straggler]

Per fault it reports the CLI end to end (interpreter start, imports, collection, analysis, JSON) and
the same triage called in-process (what the probes and analysis cost without the interpreter start).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from vllmdiag_sim.deployment import Deployment

RESULTS = Path(__file__).parent / "results"
RSS_SNIPPET = (
    "import sys\n"
    "from vllmdiag.cli.app import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
    "sys.stderr.write(f'VMHWM_KB={hwm}\\n')\n"
)


# An installed tool has its bytecode cached (pip compiles it at install); this sandbox sets
# PYTHONDONTWRITEBYTECODE, which would make every CLI start recompile every module.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


PYTHON = sys.executable  # --python


def command() -> list[str]:
    """The installed `vllmdiag` command next to the interpreter (what a user types), else `-m`."""
    script = Path(PYTHON).parent / "vllmdiag"
    return [str(script)] if script.is_file() and os.access(script, os.X_OK) else [PYTHON, "-m", "vllmdiag"]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _wall(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run (CPU of the command and every process it waited for: py-spy, NVML child)."""
    start, cpu = time.perf_counter(), _children_cpu()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, check=False, env=ENV)
    return time.perf_counter() - start, _children_cpu() - cpu


def _sequential_pyspy(pyspy: str, pids: list[int]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), _children_cpu()
    for pid in pids:
        subprocess.run([pyspy, "dump", "--json", "--pid", str(pid)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60, check=False)
    return time.perf_counter() - start, _children_cpu() - cpu


def _collect_rss_kb(root: int) -> int:
    out = subprocess.run([sys.executable, "-c", RSS_SNIPPET, "collect", "--json", "--pid", str(root)],
                         capture_output=True, text=True, timeout=120, env=ENV)
    line = next(x for x in out.stderr.splitlines() if x.startswith("VMHWM_KB="))
    return int(line.split("=")[1])


def _in_process(root: int) -> tuple[float, float]:
    """Wall of the same triage called in-process, and the CPU of its collector: the forked child that
    runs the probes, with the py-spy (and NVML) processes it waited for; this process's own CPU
    (imports already done, analysis) is not in it."""
    from vllmdiag.api import triage

    start, cpu = time.perf_counter(), _children_cpu()
    triage(pids=[root])
    return time.perf_counter() - start, _children_cpu() - cpu


def measure(tp: int, fault: str, runs: int, pyspy: str) -> dict[str, object]:
    rank = tp // 2 if fault in ("straggler", "collective-mismatch", "rpc-ring-full") else None
    with Deployment.up(tp=tp, fault=fault, rank=rank) as dep:
        pids = [p["pid"] for p in dep.processes if p["role"] in ("api_server", "engine_core", "worker")]
        cli = [*command(), "triage", "--json", "--pid", str(dep.root_pid)]
        seq, tri, inproc = [], [], []
        _wall(cli)  # warm caches once
        for _ in range(runs):
            seq.append(_sequential_pyspy(pyspy, pids))
            tri.append(_wall(cli))
            inproc.append(_in_process(dep.root_pid))
        rss_kb = _collect_rss_kb(dep.root_pid)
    s, t, i = (statistics.median(w for w, _ in seq), statistics.median(w for w, _ in tri),
               statistics.median(w for w, _ in inproc))
    sc, tc = statistics.median(c for _, c in seq), statistics.median(c for _, c in tri)
    cc = statistics.median(c for _, c in inproc)
    return {"tp": tp, "fault": fault, "processes": len(pids), "runs": runs, "pyspy_sequential_s": round(s, 3),
            "triage_cli_s": round(t, 3), "triage_in_process_s": round(i, 3), "ratio_cli": round(t / s, 2),
            "ratio_in_process": round(i / s, 2), "pyspy_cpu_s": round(sc, 3), "triage_cli_cpu_s": round(tc, 3),
            "ratio_cpu": round(tc / sc, 2), "collector_cpu_s": round(cc, 3), "ratio_collector_cpu": round(cc / sc, 2),
            "collect_peak_rss_mb": round(rss_kb / 1024, 1),
            "load_1m": round(os.getloadavg()[0], 2)}


def measure_stall(tp: int, fault: str, runs: int, confirm_s: float) -> dict[str, object]:
    """A stalled node: the verdict must arrive within the confirm window plus 1 s (issue 13)."""
    with Deployment.up(tp=tp, fault=fault) as dep:
        cli = [*command(), "triage", "--json", "--pid", str(dep.root_pid),
               "--confirm", str(confirm_s)]
        walls, status = [], ""
        for _ in range(runs):
            start = time.perf_counter()
            out = subprocess.run(cli, capture_output=True, text=True, timeout=120, env=ENV)
            walls.append(time.perf_counter() - start)
            verdict = json.loads(out.stdout)["verdict"]
            status = f"{verdict['status']}/{verdict['layer']}"
    w = statistics.median(walls)
    return {"tp": tp, "fault": fault, "runs": runs, "confirm_s": confirm_s, "verdict": status,
            "verdict_cli_s": round(w, 2), "over_window_s": round(w - confirm_s, 2), "max_s": round(max(walls), 2)}


def _table(rows: list[dict[str, object]]) -> None:
    keys = list(rows[0])
    print("  ".join(f"{k:>{max(len(k), 9)}}" for k in keys))
    for row in rows:
        print("  ".join(f"{row[k]!s:>{max(len(k), 9)}}" for k in keys))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--faults", default="healthy,straggler")
    ap.add_argument("--stalled", default="uniform-collective,uniform-sync",
                    help="faults with no odd one out: time to the verdict vs the confirm window ('' = skip)")
    ap.add_argument("--confirm", type=float, default=10.0)
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter whose installed vllmdiag to time (e.g. a venv with the built wheel: no "
                         "editable-install finder, no other .pth hooks)")
    args = ap.parse_args()
    global PYTHON
    PYTHON = args.python
    from vllmdiag.probes.stacks import find_py_spy

    pyspy = find_py_spy() or "py-spy"  # the binary the triage uses: a pyenv shim on PATH adds a bash start per dump
    rows = [measure(args.tp, fault, args.runs, pyspy) for fault in args.faults.split(",") if fault]
    stalls = [measure_stall(args.tp, fault, min(args.runs, 3), args.confirm) for fault in args.stalled.split(",") if fault]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "triage.json").write_text(json.dumps(rows + stalls, indent=2) + "\n")
    for table in (rows, stalls):
        if table:
            _table(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
