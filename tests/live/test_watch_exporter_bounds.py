"""The watcher's exporter under a hostile pod network (issue 25 items 2 and 8): a bounded number of
clients, a whole-request deadline (a byte a second holds nothing), no thread or fd per client, and
one rate-limited log line, never a traceback, for connections that reset."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from vllmdiag.watch.exporter import Exporter

ROOT = Path(__file__).resolve().parent.parent.parent
SLOW = 40  # more than the exporter's client limit


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _eof(sock: socket.socket) -> bool:
    """The server closed this connection (EOF or reset), without blocking."""
    sock.settimeout(None)  # MSG_DONTWAIT on a timeout-mode socket would first wait for the timeout
    try:
        return sock.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_slow_clients_hold_no_thread_no_fd_and_end_at_the_whole_request_deadline(reliability: Any) -> None:
    exp = Exporter("127.0.0.1", 0, lambda: [("vllmdiag_watch_passes_total", {"node": "n"}, 3)])
    exp.start()
    clients: list[socket.socket] = []
    try:
        host, port = exp.address
        threads0 = threading.active_count()
        for _ in range(SLOW):
            c = socket.create_connection((host, port), timeout=5)
            clients.append(c)
        fds0 = _fds()  # our own ends of the SLOW connections are in it already
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 40 + b"\r\n\r\n"
        most_threads = most_fds = 0
        sent = 0
        # One byte every 0.25 s each: the whole request would take ~20 s, four times the deadline.
        while sent < len(request) and not all(_eof(c) for c in clients):
            for c in clients:
                try:
                    c.send(request[sent:sent + 1])
                except OSError:
                    pass
            sent += 1
            most_threads = max(most_threads, threading.active_count() - threads0)
            most_fds = max(most_fds, _fds() - fds0)
            time.sleep(0.25)
        closed = sum(_eof(c) for c in clients)
        reliability.case(hang=closed < SLOW)
        assert closed == SLOW, f"{SLOW - closed} slow clients still held after {sent} bytes ({sent * 0.25:.0f} s)"
        assert sent < len(request), "the deadline must end a request that is still trickling in"
        assert most_threads == 0, f"{most_threads} threads for slow clients"
        assert most_fds <= 16 + 2, f"{most_fds} server-side fds for {SLOW} clients"
        for c in clients:
            c.close()
        clients.clear()
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:  # still serving
            assert 'vllmdiag_watch_passes_total{node="n"} 3' in resp.read().decode()
    finally:
        for c in clients:
            c.close()
        exp.close()


def test_clients_over_the_limit_are_closed_at_once_and_a_scrape_still_answers() -> None:
    exp = Exporter("127.0.0.1", 0, lambda: [("vllmdiag_watch_passes_total", {"node": "n"}, 1)])
    exp.start()
    held = []
    try:
        host, port = exp.address
        held = [socket.create_connection((host, port), timeout=5) for _ in range(SLOW)]
        time.sleep(0.5)  # the exporter accepts (and refuses) what is queued
        refused = [c for c in held if _eof(c)]
        assert len(refused) >= SLOW - 16, f"only {len(refused)} of {SLOW} refused at once"
        # Every slot held by a client that never sends its request: a scrape (the liveness probe) still gets in.
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as resp:
            assert 'vllmdiag_watch_passes_total{node="n"} 1' in resp.read().decode()
    finally:
        for c in held:
            c.close()
        exp.close()


def test_reset_connections_write_one_bounded_line_and_no_traceback(tmp_path: Path, reliability: Any) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "vllmdiag", "watch", "--out", str(tmp_path / "out"),
                             "--interval", "30", "--metrics-port", "0",
                             # watch no deployment of anyone else's on this machine: the exporter is the subject
                             "--select", "VLLM_VLLMDIAG_TEST=none"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            m = next((re.search(r"metrics on http://[^:]+:(\d+)/", x) for x in list(lines) if "metrics on" in x), None)
            port = int(m.group(1)) if m else None
            time.sleep(0.1)
        assert port is not None, "".join(lines)
        for i in range(60):
            c = socket.create_connection(("127.0.0.1", port), timeout=5)
            c.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" if i % 2 else b"GET /met")
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close()  # RST
        time.sleep(0.5)  # a burst fills the client slots for a moment; then scrapes are answered again
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(5)
    text = "".join(lines)
    reliability.case(traceback="Traceback" in text)
    assert "Traceback" not in text, text[-3000:]
    about = [x for x in lines if "connection" in x.lower() and "exporter" in x.lower()]
    assert len(about) <= 1, about
    assert len(lines) < 15, text
