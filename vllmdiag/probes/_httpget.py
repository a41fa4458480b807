"""One bounded HTTP/1.1 request to a literal address on a raw socket (helper, not a probe).

Why not ``http.client``: importing it (with ``email`` and ``ssl``) cost ~18 ms of every triage, more
than the requests themselves, and the probe only ever asks a listener found in /proc/net/tcp (a
literal IP, never a name, never TLS) for /health, /metrics, /v1/models or one completion. The whole
exchange shares one deadline: connect, send, and the response, read to its Content-Length, its last
chunk or the server's close (we send ``Connection: close``) and at most ``max_body`` bytes.
"""

from __future__ import annotations

import socket
import time
from typing import Any

MAX_HEAD = 64 << 10


class BadResponse(Exception):
    """The peer answered something that is not an HTTP/1.x response."""


def request(host: str, port: int, path: str, timeout_s: float, *, body: bytes | None = None,
            max_body: int = 8 << 20) -> tuple[int, bytes, bool]:
    """(status, body, cut) where ``cut`` means the deadline ended the body early (the caller drops
    it); raises ConnectionRefusedError, TimeoutError (no complete header in time), OSError, BadResponse."""
    deadline = time.monotonic() + max(0.05, timeout_s)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(_left(deadline))
        sock.connect((host, port))
        where = f"[{host}]" if family == socket.AF_INET6 else host
        head = (f"{'POST' if body is not None else 'GET'} {path} HTTP/1.1\r\nHost: {where}:{port}\r\n"
                "Accept-Encoding: identity\r\nConnection: close\r\n")
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        sock.sendall((head + "\r\n").encode("ascii") + (body or b""))
        return _response(sock, deadline, max_body)


def _response(sock: socket.socket, deadline: float, max_body: int) -> tuple[int, bytes, bool]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEAD:
            raise BadResponse("response header over 64 KiB")
        chunk = _recv(sock, deadline)
        if not chunk:
            raise BadResponse("the server closed the connection without a response" if not buf else
                              "the server closed the connection inside the response header")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    status, headers = _head(head)
    length = headers.get("content-length", "")
    chunked = "chunked" in headers.get("transfer-encoding", "").lower()
    want = int(length) if length.isdigit() and not chunked else None
    cut = False
    while len(rest) < max_body + 2 and not _complete(rest, want, chunked):
        try:
            chunk = _recv(sock, deadline)
        except TimeoutError:
            cut = True
            break
        if not chunk:
            break
        rest += chunk
    data = _chunks(rest)[0] if chunked else rest[:want] if want is not None else rest
    return status, data[:max_body], cut


def _head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not (parts[1].isdigit() and len(parts[1]) == 3):
        raise BadResponse(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


def _complete(rest: bytes, want: int | None, chunked: bool) -> bool:
    if chunked:
        return _chunks(rest)[1]
    return want is not None and len(rest) >= want


def _chunks(raw: bytes) -> tuple[bytes, bool]:
    """The chunked body decoded so far, and whether its last (zero) chunk has arrived."""
    out: list[bytes] = []
    i = 0
    while True:
        end = raw.find(b"\r\n", i)
        if end < 0:
            return b"".join(out), False
        size_text = raw[i:end].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadResponse(f"bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            return b"".join(out), True
        if end + 2 + size > len(raw):
            out.append(raw[end + 2:])
            return b"".join(out), False
        out.append(raw[end + 2:end + 2 + size])
        i = end + 2 + size + 2


def _recv(sock: socket.socket, deadline: float) -> bytes:
    sock.settimeout(_left(deadline))
    return sock.recv(65536)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def describe(exc: BaseException) -> dict[str, Any]:
    """The probe's error field for a failed request."""
    if isinstance(exc, ConnectionRefusedError):
        return {"error": "refused"}
    if isinstance(exc, TimeoutError):
        return {"error": "timeout"}
    return {"error": f"{type(exc).__name__}: {exc}"}
