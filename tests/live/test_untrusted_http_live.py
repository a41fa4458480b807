"""The live tests of tests/unit/test_untrusted_http.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
# Each answer is a whole response; the server then holds the connection open (the reader must end by
# framing, an error or its deadline, never by waiting for a close).
HOSTILE = {
    "negative-chunk": HEAD + b"-64\r\nabc\r\n",  # the old parser found this same line again, forever
    "negative-chunk-long": HEAD + b"-64\r\n" + b"x" * 200 + b"\r\n",
    "plus-sign": HEAD + b"+a\r\n0123456789\r\n0\r\n\r\n",
    "underscore": HEAD + b"1_0\r\n" + b"y" * 16 + b"\r\n0\r\n\r\n",
    "hex-prefix": HEAD + b"0x10\r\n" + b"y" * 16 + b"\r\n0\r\n\r\n",
    "overflow": HEAD + b"f" * 40 + b"\r\nabc\r\n",
    "huge-chunk": HEAD + b"7fffffffffffffff\r\nabc\r\n",
    "no-crlf-after-data": HEAD + b"3\r\nabcXY4\r\ndefg\r\n0\r\n\r\n",
    "endless-size-line": HEAD + b"1" + b" " * 5000,
    "superscript-length": b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nab",
    "superscript-status": b"HTTP/1.1 \xb2\xb2\xb2 OK\r\nContent-Length: 2\r\n\r\nab",
    "negative-length": b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nabcdef",
    "huge-length": b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\nab",
}


@contextmanager
def answering(raw: bytes) -> Iterator[int]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            held.append(conn)
            try:
                conn.settimeout(2)
                conn.recv(4096)
                conn.sendall(raw)
            except OSError:
                pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        srv.close()


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_framing_is_a_bounded_one_line_error(name: str, reliability: Any) -> None:
    """Run in a child with a hard deadline and a memory cap: the old parser spun and grew here."""
    code = ("import json, resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "from vllmdiag.probes import http\n"
            "print(json.dumps(http.get('127.0.0.1', int(sys.argv[1]), '/metrics', 2.0, keep_body=True)))\n")
    with answering(HOSTILE[name]) as port:
        try:
            out = subprocess.run([sys.executable, "-c", code, str(port)], capture_output=True, text=True, timeout=20,
                                 env={**os.environ, "PYTHONPATH": str(REPO)})
        except subprocess.TimeoutExpired:
            reliability.case(hang=True)
            raise AssertionError(f"{name}: the reader spun past its 2 s deadline") from None
    reliability.case(traceback="Traceback" in out.stderr)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout)
    assert "body" not in res and res["error"], res  # never a body built from a bad frame
    assert res["error"].startswith("BadResponse: ") or res["error"] == "timeout", res
    assert "\n" not in res["error"]
