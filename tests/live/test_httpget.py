"""The http probe's raw HTTP/1.1 client on real sockets: every framing a server may answer with,
bad answers as one-line errors, and one deadline for the whole exchange."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from vllmdiag.probes import http
from vllmdiag.probes._httpget import BadResponse, request

HOLD = threading.Event()
METRICS = b"vllm:generation_tokens_total 12345.0\nvllm:num_requests_running 3\n"


@contextmanager
def server(answer: Callable[[socket.socket, bytes], None],
           family: int = socket.AF_INET) -> Iterator[tuple[str, int, list[bytes]]]:
    """A one-connection-at-a-time server; ``answer(conn, request)`` writes the response. Answers that
    hold the connection open wait on HOLD (set at the end of each test), so a reader that returns
    while it is clear did not wait for the server's close: no clock involved."""
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.bind((host, 0))
    srv.listen(8)
    srv.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                req = b""
                while b"\r\n\r\n" not in req:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    req += chunk
                seen.append(req)
                try:
                    answer(conn, req)
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    HOLD.clear()
    try:
        yield host, srv.getsockname()[1], seen
    finally:
        HOLD.set()
        stop.set()
        t.join(2)
        srv.close()


def _length(conn: socket.socket, req: bytes) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s" % (len(METRICS), METRICS))
    HOLD.wait(10)  # the connection stays open: the reader must stop at Content-Length, not wait for close


def _chunked(conn: socket.socket, req: bytes) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for piece in (METRICS[:10], METRICS[10:]):
        conn.sendall(b"%x;ext=1\r\n%s\r\n" % (len(piece), piece))
        time.sleep(0.02)
    conn.sendall(b"0\r\n\r\n")
    HOLD.wait(10)  # open: the last chunk ends the read


def _close_delimited(conn: socket.socket, req: bytes) -> None:
    conn.sendall(b"HTTP/1.0 503 Service Unavailable\r\n\r\n" + METRICS)


def _garbage(conn: socket.socket, req: bytes) -> None:
    conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")


def _hang_up(conn: socket.socket, req: bytes) -> None:
    return


def _trickle(conn: socket.socket, req: bytes) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nvllm:generation_tokens_total 12")
    HOLD.wait(10)


@pytest.mark.parametrize("answer", [_length, _chunked], ids=["content-length", "chunked"])
def test_framed_bodies_are_read_whole_without_waiting_for_close(answer: Callable[[socket.socket, bytes], None]) -> None:
    with server(answer) as (host, port, seen):
        res = http.get(host, port, "/metrics", 5.0, keep_body=True)
        assert not HOLD.is_set()  # returned while the server still held the connection open
    assert res["status"] == 200 and res["error"] is None and res["body"] == METRICS.decode()
    head = seen[0].decode()
    assert head.startswith("GET /metrics HTTP/1.1\r\n") and f"Host: {host}:{port}\r\n" in head
    assert "Connection: close\r\n" in head


def test_a_close_delimited_answer_and_its_status_are_kept() -> None:
    with server(_close_delimited) as (host, port, _):
        res = http.get(host, port, "/health", 2.0, keep_body=True)
    assert res["status"] == 503 and res["body"] == METRICS.decode() and res["error"] is None


def test_ipv6_loopback_and_a_post_body() -> None:
    with server(_length, socket.AF_INET6) as (host, port, seen):
        res = http.get(host, port, "/v1/completions", 2.0, body=b'{"prompt": "ping"}', keep_body=True)
    assert res["status"] == 200
    head = seen[0].decode()
    assert head.startswith("POST /v1/completions HTTP/1.1\r\n") and f"Host: [::1]:{port}\r\n" in head
    assert "Content-Length: 18\r\n" in head


@pytest.mark.parametrize("answer, words", [(_garbage, "not an HTTP/1.x status line"),
                                           (_hang_up, "closed the connection without a response")],
                         ids=["not-http", "hang-up"])
def test_bad_answers_are_one_line_errors(answer: Callable[[socket.socket, bytes], None], words: str) -> None:
    with server(answer) as (host, port, _):
        res = http.get(host, port, "/health", 2.0)
    assert res["status"] is None and res["error"].startswith("BadResponse: ") and words in res["error"]


def test_a_body_cut_by_the_deadline_is_a_timeout_and_never_half_counters() -> None:
    with server(_trickle) as (host, port, _):
        res = http.get(host, port, "/metrics", 0.4, keep_body=True)
        assert not HOLD.is_set()  # the deadline ended it, not the server
    assert res["status"] == 200 and res["error"] == "timeout" and "body" not in res


def test_bad_chunk_sizes_are_bad_responses() -> None:
    def bad(conn: socket.socket, req: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n0\r\n\r\n")

    with server(bad) as (host, port, _), pytest.raises(BadResponse):
        request(host, port, "/metrics", 2.0)
