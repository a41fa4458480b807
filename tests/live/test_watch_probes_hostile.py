"""/livez and /readyz under hostile clients (issue 34 item 5), on a real `vllmdiag watch` process.

While slow clients trickle requests, one sends a megabyte of header, others send POST/PUT/DELETE,
garbage and bursts of hundreds of connections, a kubelet-style probe (period 0.25 s, timeout 2 s,
failureThreshold 3) never fires, the watcher's passes go on, nothing is answered but GET and HEAD,
and nothing is written to the log but one bounded line a minute (no traceback).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from kubelet import Probe
from test_watch_probes import listening

ROOT = Path(__file__).resolve().parent.parent.parent


def _raw(host: str, port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection((host, port), timeout=timeout) as c:
        try:
            c.sendall(data)
        except OSError:
            pass  # the exporter may close before a huge request is all sent: that is the point
        out = b""
        try:
            while chunk := c.recv(4096):
                out += chunk
        except OSError:
            pass
        return out


def _passes(host: str, port: int) -> int:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
        m = re.search(r"^vllmdiag_watch_passes_total\{[^}]*\} (\d+)$", resp.read().decode(), re.M)
    assert m
    return int(m.group(1))


def test_hostile_clients_never_fire_the_probe_nor_stop_the_passes(tmp_path: Path, reliability: Any) -> None:
    log = tmp_path / "watch.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "vllmdiag", "watch", "--out", str(tmp_path / "out"),
                                 "--interval", "0.2", "--metrics-port", "0", "--select", "VLLM_VLLMDIAG_TEST=none"],
                                stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                start_new_session=True)
    slow: list[socket.socket] = []
    probe: Probe | None = None
    try:
        host, port = listening(log, proc)
        # timeout 2 s as the recipes' probes (at least): the test machine is shared and saturated at times
        probe = Probe(host, port, "/livez", period_s=0.25, timeout_s=2.0, failure_threshold=3).start()
        time.sleep(1.0)
        before = _passes(host, port)
        # Methods other than GET and HEAD, on both probes.
        for method in (b"POST", b"PUT", b"DELETE", b"OPTIONS", b"PATCH"):
            for path in (b"/livez", b"/readyz"):
                assert _raw(host, port, method + b" " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                            ).startswith(b"HTTP/1.1 405 "), method
        head = _raw(host, port, b"HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 ") and head.endswith(b"\r\n\r\n"), "HEAD: the status and no body"
        # A megabyte of header: refused at the request bound, never read whole.
        huge = _raw(host, port, b"GET /livez HTTP/1.1\r\nX-Big: " + b"a" * (1 << 20) + b"\r\n\r\n")
        assert huge == b"" or huge.startswith(b"HTTP/1.1 431 "), huge[:80]
        assert _raw(host, port, b"\x00\xff garbage\r\n\r\n").startswith(b"HTTP/1.1 405 ")
        assert _raw(host, port, b"GET /livez?deployment=%ff%fe HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        # Slowloris: 40 clients, a byte of /livez every 0.2 s each; then bursts of 200 idle connections.
        stop = threading.Event()
        slow = [socket.create_connection((host, port), timeout=5) for _ in range(40)]

        def trickle() -> None:
            req = b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
            for i in range(len(req)):
                if stop.is_set():
                    return
                for c in slow:
                    try:
                        c.send(req[i:i + 1])
                    except OSError:
                        pass
                time.sleep(0.2)

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        for _ in range(3):
            burst = []
            for _ in range(200):
                try:
                    burst.append(socket.create_connection((host, port), timeout=2))
                except OSError:
                    break
            time.sleep(1.0)
            for c in burst:
                c.close()
        time.sleep(2.0)
        stop.set()
        t.join(5)
        after = _passes(host, port)
        fired = probe.fired()
        reliability.case(hang=fired is not None)
        assert fired is None, f"the kubelet would have acted: {probe.failures()[:5]}"
        assert len(probe.results) >= 20 and all(r.code == 200 for r in probe.results if r.code is not None)
        assert after - before >= 3, f"passes went on under attack: {before} -> {after}"
    finally:
        if probe is not None:
            probe.stop()
        for c in slow:
            c.close()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    reliability.case(traceback="Traceback" in text)
    assert "Traceback" not in text, text[-3000:]
    assert len(text.splitlines()) < 12, text


def _thread_cpu_s(tid: int) -> float:
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


FLOOD = """
import socket, sys, time
host, port, until, n = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3]), 0
while time.monotonic() < until:
    try:
        with socket.create_connection((host, port), timeout=2) as c:
            c.sendall(b"GET /livez HTTP/1.0\\r\\n\\r\\n")
            n += c.recv(4096).startswith(b"HTTP/1.1 200")
    except OSError:
        pass
print(n)
"""


def test_a_flood_cannot_make_the_real_time_answerer_a_hog() -> None:
    """The exporter's thread answers at SCHED_FIFO (as root): a flood of requests (other processes, so
    no GIL slows them) must neither hold a core (it rests as long as it worked: at most about half of
    one) nor run it 5 s without blocking, which RLIMIT_RTTIME would answer by killing the whole watcher.
    Measured as a share of the flood's wall time."""
    from vllmdiag.watch.exporter import Exporter

    exp = Exporter("127.0.0.1", 0, lambda: [], routes={"/livez": lambda dep: (200, "ok")})
    exp.start()
    host, port = exp.address
    floods: list[subprocess.Popen[str]] = []
    try:
        tid = exp.thread.native_id or 0
        cpu0, t0 = _thread_cpu_s(tid), time.monotonic()
        floods = [subprocess.Popen([sys.executable, "-c", FLOOD, host, str(port), "3"], stdout=subprocess.PIPE,
                                   text=True) for _ in range(4)]
        answered = sum(int(f.communicate(timeout=60)[0] or 0) for f in floods)
        share = (_thread_cpu_s(tid) - cpu0) / (time.monotonic() - t0)
        print(f"flood: {answered} answers, the answerer used {share:.0%} of a core")
        assert answered > 100, answered
        assert share < 0.6, f"the answerer took {share:.0%} of a core under a flood"
        assert exp.thread.is_alive() and _raw(host, port, b"GET /livez HTTP/1.0\r\n\r\n").endswith(b"ok\n")
    finally:
        for f in floods:
            if f.poll() is None:
                f.kill()
                f.wait()
        exp.close()
