"""The kubelet's view of `vllmdiag watch` on the real `vllm serve` (issue 34): one run, measured.

Shared by tests/live/test_watch_probes_real.py (which asserts on it) and bench/bench_liveness.py (which
reports it). One real server (TP=1, under the shared lock, held through the restart) and one watcher:

1. the watcher starts first (nothing to watch yet), then the server starts: /livez stays 200;
2. load (server.load) for ``load_s``: /livez and /readyz stay 200 once ready;
3. a restart in the middle (every process of the server ended, `vllm serve` started again, the lock
   kept): /livez stays 200, /readyz 503 until the new server answers;
4. load again, then, under load, a real hang held in the forward (server.hang("all")): /readyz 503 at
   the next pass, /livez 503 only once the snapshot is on disk.

Probes run like a kubelet's (tests/kubelet.py): a GET every ``period_s`` with a 1 s timeout.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kubelet import Probe, Result

ROOT = Path(__file__).resolve().parent.parent


def _cpu_s(pid: int) -> float:
    """utime + stime of the watcher and its waited-for children (each cheap pass is a forked child)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _listening(log: Path, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> tuple[str, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = re.search(r"metrics on http://([\d.]+):(\d+)/", log.read_text(errors="replace"))
        if m:
            return m.group(1), int(m.group(2))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise RuntimeError("the watcher did not serve:\n" + log.read_text(errors="replace")[-2000:])


def restart(server: Any) -> None:
    """End every process of the server and start `vllm serve` again, keeping the shared lock (another
    run must not take the machine in between) and the port, model and directories."""
    lock, server._lock = server._lock, None
    try:
        notes = server.stop()
    finally:
        server._lock = lock
    if [n for n in notes if n.startswith("left running")]:
        raise RuntimeError(f"the server did not stop: {notes}")
    server.segments = set()
    with open(server.log, "ab") as log:
        server.proc = subprocess.Popen(server.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env=server._env(), cwd=str(server.root), start_new_session=True)
    server.sid = server.proc.pid
    server._wait_healthy()
    server.remember_segments()


def run(tmp: Path, *, interval_s: float = 2.0, confirm_s: float = 5.0, load_s: float = 30.0,
        period_s: float = 1.0, gone_grace_s: float = 120.0, note: Any = print) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from real_vllm.server import RealServer, make_root, remove_root

    root = make_root(1)
    server = RealServer(1, root)
    out, log = tmp / "watch-out", tmp / "watch.log"
    argv = [sys.executable, "-m", "vllmdiag", "watch", "--out", str(out), "--interval", str(interval_s),
            "--confirm", str(confirm_s), "--metrics-port", "0", "--node", "livenode", "--gone-grace", str(gone_grace_s),
            "--select", f"VLLM_RPC_BASE_PATH={server.rpc}"]
    probes: list[Probe] = []
    m: dict[str, Any] = {"interval_s": interval_s, "confirm_s": confirm_s, "period_s": period_s, "load_s": load_s}
    with open(log, "wb") as err:
        watcher = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        host, port = _listening(log, watcher)
        live = Probe(host, port, "/livez", period_s=period_s, timeout_s=1.0, failure_threshold=3).start()
        ready = Probe(host, port, "/readyz", period_s=period_s, timeout_s=1.0, failure_threshold=1).start()
        probes += [live, ready]
        t0 = time.monotonic()
        server.start()
        first_start = server.started_at
        m["start_s"] = round(time.monotonic() - t0, 1)
        note(f"server up in {m['start_s']} s")
        if ready.wait_for(lambda r: r.code == 200, 60) is None:
            raise RuntimeError(f"/readyz never 200 after the start: {ready.results[-1:]}")
        windows = [_loaded(server, ready, load_s, watcher.pid, m, "first")]
        t1 = time.monotonic()
        restart(server)
        m["restart_s"] = round(time.monotonic() - t1, 1)
        note(f"restarted in {m['restart_s']} s")
        back = ready.wait_for(lambda r: r.code == 200, 60)
        if back is None:
            raise RuntimeError(f"/readyz never 200 after the restart: {ready.results[-1:]}")
        m["ready_again_after_restart_s"] = round(back.at - t1, 1)
        windows.append(_loaded(server, ready, load_s / 2, watcher.pid, m, "second"))
        # From the moment `vllm serve` runs: before, RealServer.start waited for the shared lock (another run's
        # server), and a watcher that sees no deployment for --gone-grace fails /livez by design.
        m["livez_503_while_waiting_for_the_lock"] = len(live.failures(0, first_start))
        before = live.failures(first_start)
        # A 503 is the watcher's answer; no answer within the probe's 1 s (the kubelet's default timeoutSeconds)
        # is the machine's: 2 cores saturated by vLLM and its clients can keep the watcher off the CPU that long.
        m["livez_503_before_hang"] = sum(1 for r in before if r.code == 503)
        m["livez_no_answer_in_1s_before_hang"] = sum(1 for r in before if r.code is None)
        m["livez_failures_before_hang"] = [(round(r.at - first_start, 1), r.code, r.body[:200]) for r in before]
        m["livez_fired_before_hang"] = live.fired(first_start) is not None
        m["livez_probes_before_hang"] = sum(1 for r in live.results if r.at >= first_start)
        wrong = [r for a, b in windows for r in ready.failures(a, b)]
        m["readyz_false_503"] = sum(1 for r in wrong if r.code == 503)
        m["readyz_no_answer_in_1s_under_load"] = sum(1 for r in wrong if r.code is None)
        m["readyz_failures_under_load"] = [(r.code, r.body[:200]) for r in wrong]
        _hang(server, live, ready, out, m, note)
    finally:
        for p in probes:
            p.stop()
        with contextlib.suppress(OSError):
            watcher.send_signal(signal.SIGTERM)
        try:
            m["watcher_exit"] = watcher.wait(timeout=60)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
        server.release()
        notes = server.stop()
        remove_root(root)
        m["stop_notes"] = notes
    m["watcher_traceback"] = "Traceback" in log.read_text(errors="replace")
    return m


def _loaded(server: Any, ready: Probe, seconds: float, pid: int, m: dict[str, Any], name: str) -> tuple[float, float]:
    """Load for ``seconds``; the watcher's CPU over it (percent of one core)."""
    start, cpu0 = time.monotonic(), _cpu_s(pid)
    with server.load(clients=2, seconds=seconds + 30) as done:
        time.sleep(seconds)
    spent = time.monotonic() - start
    m[f"{name}_load_completions"] = done[0]
    m[f"{name}_load_watcher_cpu_pct"] = round(100 * (_cpu_s(pid) - cpu0) / spent, 2)
    return start, start + seconds


def _hang(server: Any, live: Probe, ready: Probe, out: Path, m: dict[str, Any], note: Any) -> None:
    """The hang lands under load, as real ones do: vLLM's running/waiting gauges are set from the engine's
    step stats, so a forward that never returns leaves them at their last value (requests in flight) while
    the token counters stay flat. (A hang of the first request after an idle spell leaves them at 0: the
    cheap pass cannot see that one; docs/liveness.md.)"""
    with server.load(clients=2, seconds=240) as done:
        deadline = time.monotonic() + 60
        while done[0] < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        server.hang("all")
        hung = time.monotonic()
        seen: list[tuple[Result, bool]] = []

        def saved_first(r: Result) -> bool:
            if r.code == 200:
                return False
            path = re.search(r"evidence=(\S+)", r.body)
            seen.append((r, bool(path) and Path(path.group(1)).is_file()))  # type: ignore[union-attr]
            return True

        first_live = live.wait_for(saved_first, 150)
        if first_live is not None:  # held on until the kubelet would act (failureThreshold in a row)
            live.wait_for(lambda _r: live.fired(hung) is not None, (live.failure_threshold + 1) * live.period_s + 5)
        first_ready = ready.first_failure(hung)
        fired = live.fired(hung)
        m["readyz_503_after_hang_s"] = round(first_ready.at - hung, 2) if first_ready else None
        m["livez_503_after_hang_s"] = round(first_live.at - hung, 2) if first_live else None
        m["livez_fired_after_hang_s"] = round(fired.at - hung, 2) if fired else None
        m["evidence_on_disk_at_first_livez_503"] = bool(seen and seen[0][1])
        m["livez_body"] = first_live.body if first_live else (live.results[-1].body if live.results else "")
        m["evidence_files"] = sorted(p.name for p in out.glob("vllmdiag-watch-*"))
        note(f"hang: /readyz 503 after {m['readyz_503_after_hang_s']} s, /livez 503 after {m['livez_503_after_hang_s']} s")
        server.release()
