"""The watcher's own CPU cost on a simulated TP=8 node, and how soon it saves a hang.

Target (issue 18): < 1% of one core at a 5 s interval. Measured two ways, side by side:
- in process: cheap passes back to back, CPU (getrusage, all threads) per pass, divided by the
  interval: what a pass costs without the idle time between passes;
- end to end: `vllmdiag watch --interval 5` as a real process for --duration seconds, CPU seconds
  read from its own exporter (vllmdiag_watch_cpu_seconds_total) after the first pass and at the end.
Then the latency: a healthy streaming TP=8 deployment gets the straggler fault while the watcher
runs; reported: inject -> the saved snapshot's collection time, and inject -> the STALL line,
next to the bound interval + confirm. Never asserted in tests.

By default the deployment is a simulated *node*: its own PID + mount namespace (own /proc, own
/dev/shm), and the watcher runs inside it (nsenter), so it sees that node's processes only, as on a
real TP=8 node; `--host` measures on this machine as it is (with whatever else runs on it).

    python bench/bench_watch.py [--tp 8] [--duration 60] [--interval 5] [--confirm 10] [--host]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from vllmdiag_sim.deployment import Deployment

RESULTS = Path(__file__).parent / "results"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def in_process(passes: int, select: dict[str, str]) -> dict[str, float]:
    from vllmdiag.watch.watcher import WatchConfig, Watcher

    with tempfile.TemporaryDirectory(prefix="bench-watch-out-") as out:
        w = Watcher(WatchConfig(out_dir=Path(out), select=select, err=io.StringIO()))
        w.step()  # imports and first-pass setup are paid once per watcher, not per pass
        cpu0, wall0 = _cpu(), time.monotonic()
        for _ in range(passes):
            w.step()
        n = max(1, passes)
        cpu, wall = (_cpu() - cpu0) / n, (time.monotonic() - wall0) / n
    procs = w.prev[0].data("processes") if w.prev else {}
    # The pass reads every vLLM process of the machine (not only the selected deployment's) and
    # every pid's stat/cmdline: on a shared machine (--host) both are larger than on a real TP=8 node.
    return {"cpu_per_pass_s": cpu, "wall_per_pass_s": wall, "deployments": len(w.tracker.deps),
            "vllm_processes": len(procs.get("processes", [])), "pids": procs.get("pid_count", 0)}


def _scrape(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    raise RuntimeError(f"{name} not exported")


def _cpu_total(url: str) -> float:
    """The watcher's own CPU plus its reaped children's (a pass moves into a child while a probe is stuck)."""
    return _scrape(url, "vllmdiag_watch_cpu_seconds_total") + _scrape(url, "vllmdiag_watch_children_cpu_seconds_total")


def _start(args: argparse.Namespace, out: Path, prefix: list[str],
           confirm: float) -> tuple[subprocess.Popen[str], str, list[str]]:
    argv = [*prefix, sys.executable, "-m", "vllmdiag", "watch", "--out", str(out), "--interval", str(args.interval),
            "--confirm", str(confirm), "--metrics-port", "0", *args.select]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    lines: list[str] = []
    url: list[str] = []

    def read(pipe: object) -> None:
        for line in pipe:  # type: ignore[attr-defined]
            lines.append(line)
            m = re.search(r"metrics on (\S+)", line)
            if m:
                url.append(m.group(1))

    for pipe in (proc.stdout, proc.stderr):
        threading.Thread(target=read, args=(pipe,), daemon=True).start()
    while not url:
        time.sleep(0.05)
    return proc, url[0], lines


def end_to_end(args: argparse.Namespace, prefix: list[str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        proc, url, _ = _start(args, Path(out), prefix, args.confirm)
        try:
            while _scrape(url, "vllmdiag_watch_passes_total") < 1:
                time.sleep(0.1)
            cpu0, t0 = _cpu_total(url), time.monotonic()
            time.sleep(args.duration)
            cpu1, t1 = _cpu_total(url), time.monotonic()
            passes = _scrape(url, "vllmdiag_watch_passes_total")
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return {"cpu_fraction_of_one_core": (cpu1 - cpu0) / (t1 - t0), "passes": passes}


def latency(args: argparse.Namespace, dep: Deployment, prefix: list[str], fault: str = "straggler") -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        proc, url, lines = _start(args, Path(out), prefix, args.confirm)
        try:
            time.sleep(2 * args.interval)  # it has seen the deployment moving
            dep.inject(fault, dep.tp - 1)
            injected = time.time()
            while not any(" STALL " in ln for ln in lines):
                if time.time() - injected > 10 * (args.interval + args.confirm) + 60:
                    raise RuntimeError("no stall saved:\n" + "".join(lines[-20:]))
                time.sleep(0.05)
            line_at = time.time()
            line = next(ln for ln in lines if " STALL " in ln)
            path = re.search(r"snapshot=(\S+)", line).group(1)  # type: ignore[union-attr]
            taken = dt.datetime.fromisoformat(json.loads(Path(path).read_text())["collected_at"]).timestamp()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return {"inject_to_snapshot_s": taken - injected, "inject_to_saved_line_s": line_at - injected,
            "bound_interval_plus_confirm_s": args.interval + args.confirm, "verdict_line": line.strip()}  # type: ignore[dict-item]


def _latency(args: argparse.Namespace, dep: Deployment, prefix: list[str], fault: str, rows: dict[str, object]) -> None:
    lat = latency(args, dep, prefix, fault)
    rows[f"latency_{fault}"] = lat
    print(f"{fault}: hang -> snapshot {lat['inject_to_snapshot_s']:.1f} s, -> saved "
          f"{lat['inject_to_saved_line_s']:.1f} s (bound interval + confirm = "
          f"{lat['bound_interval_plus_confirm_s']:.0f} s)\n  {lat['verdict_line']}")


def _inner(prefix: list[str], args: argparse.Namespace) -> dict[str, float]:
    """in_process() run where the watcher would run (inside the node's namespaces)."""
    argv = [*prefix, sys.executable, str(Path(__file__).resolve()), "--inner", str(args.passes), *args.select]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=ENV, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _prefix(dep: Deployment, host: bool) -> list[str]:
    if host:
        return []
    init = Path(f"/proc/{dep.launcher_pid}/task/{dep.launcher_pid}/children").read_text().split()[0]
    return ["nsenter", f"--pid=/proc/{init}/ns/pid", f"--mount=/proc/{init}/ns/mnt", "--"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--confirm", type=float, default=10.0)
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--host", action="store_true", help="no node namespace: watch this machine as it is")
    ap.add_argument("--inner", type=int, help=argparse.SUPPRESS)
    ap.add_argument("select", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner is not None:
        sel = dict(s.split("=", 1) for s in args.select if "=" in s)
        print(json.dumps(in_process(args.inner, sel)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-watch-rpc-") as rpc:
        os.environ["VLLM_RPC_BASE_PATH"] = ENV["VLLM_RPC_BASE_PATH"] = rpc
        measure(args, rpc)


def measure(args: argparse.Namespace, rpc: str) -> None:
    # On the host, other deployments may run: watch only ours. In a node namespace there is no other.
    args.select = ["--select", f"VLLM_RPC_BASE_PATH={rpc}"] if args.host else []
    rows: dict[str, object] = {"tp": args.tp, "interval_s": args.interval, "node_namespace": not args.host}
    for fault in ("healthy", "healthy-load"):
        with Deployment.up(tp=args.tp, fault=fault, namespace=not args.host) as dep:
            prefix = _prefix(dep, args.host)
            inp = _inner(prefix, argparse.Namespace(passes=args.passes,
                                                    select=[a.removeprefix("--select") for a in args.select[1:]]))
            e2e = end_to_end(args, prefix)
            rows[fault] = {**inp, "cpu_fraction_at_interval": inp["cpu_per_pass_s"] / args.interval, **e2e}
            print(f"{fault:13s} TP={args.tp}: {inp['cpu_per_pass_s'] * 1000:.1f} ms CPU per pass "
                  f"({inp['wall_per_pass_s'] * 1000:.0f} ms wall) = {100 * inp['cpu_per_pass_s'] / args.interval:.2f}% "
                  f"of one core at {args.interval:g} s; real watcher over {args.duration:g} s: "
                  f"{100 * e2e['cpu_fraction_of_one_core']:.2f}% ({e2e['passes']:.0f} passes); it saw "
                  f"{inp['vllm_processes']:.0f} vLLM processes and {inp['pids']:.0f} pids")
            if fault == "healthy-load":
                _latency(args, dep, prefix, "straggler", rows)
    # No odd one out: the triage's confirm window must hold the stall before it blames the group.
    with Deployment.up(tp=args.tp, fault="healthy-load", namespace=not args.host) as dep:
        _latency(args, dep, _prefix(dep, args.host), "uniform-collective", rows)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "watch.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
