"""One bounded HTTP/1.1 request to a literal address on a raw socket (helper, not a probe).

Why not ``http.client``: importing it (with ``email`` and ``ssl``) cost ~18 ms of every triage, more
than the requests themselves, and the probe only ever asks a listener found in /proc/net/tcp (a
literal IP, never a name, never TLS) for /health, /metrics, /v1/models or one completion. The whole
exchange shares one deadline: connect, send, and the response, read to its Content-Length, its last
chunk or the server's close (we send ``Connection: close``) and at most ``max_body`` bytes.
"""

from __future__ import annotations

import re
import socket
import time
from typing import Any

MAX_HEAD = 64 << 10
MAX_CHUNK_LINE = 1024  # a chunk size with its extensions; h11/uvicorn write "1f4\r\n"
_STATUS = re.compile(r"[0-9]{3}")
_LENGTH = re.compile(r"[0-9]{1,19}")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


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
    body = Body(headers, max_body)
    body.feed(rest)
    cut = False
    while not body.done:
        try:
            chunk = _recv(sock, deadline)
        except TimeoutError:
            cut = True
            break
        if not chunk:
            break
        body.feed(chunk)
    return status, body.data(), cut


def _head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(None, 2)
    # ASCII digits only: str.isdigit() also takes "²" (latin-1 0xB2), which int() then refuses.
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not _STATUS.fullmatch(parts[1]):
        raise BadResponse(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


class Body:
    """A response body decoded as it arrives, forward only and bounded.

    Every byte is looked at once (the chunked state is kept between reads, never re-parsed from the
    start), no framing field can move the position back (a chunk size is 1-16 hex digits: ``int(x, 16)``
    alone takes a sign, and ``-64`` once walked the old parser backwards forever), and the decoded body
    never exceeds ``max_body``: a larger one is a BadResponse, not a silently shorter body."""

    def __init__(self, headers: dict[str, str], max_body: int) -> None:
        self.max_body = max_body
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self.want: int | None = None
        if not self.chunked and length is not None:
            if not _LENGTH.fullmatch(length):
                raise BadResponse(f"bad Content-Length {length[:20]!r}")
            self.want = int(length)
            if self.want > max_body:
                raise BadResponse(f"body of {self.want} bytes over the {max_body}-byte limit")
        self.out = bytearray()
        self.done = self.want == 0
        self._raw = bytearray()  # chunked: bytes not yet decoded (at most one size line, 1 KiB)
        self._left = 0  # chunked: data bytes of the current chunk still to come
        self._crlf = False  # chunked: the CRLF after a chunk's data is due

    def data(self) -> bytes:
        return bytes(self.out)

    def feed(self, data: bytes) -> None:
        if self.done or not data:
            return
        if self.chunked:
            self._raw += data
            self._dechunk()
            return
        if self.want is not None:
            data = data[:self.want - len(self.out)]
        if len(self.out) + len(data) > self.max_body:
            raise BadResponse(f"body over the {self.max_body}-byte limit")
        self.out += data
        self.done = self.want is not None and len(self.out) >= self.want

    def _dechunk(self) -> None:
        raw, pos = self._raw, 0
        while not self.done:
            if self._left:
                take = raw[pos:pos + self._left]
                if not take:
                    break
                self.out += take
                pos += len(take)
                self._left -= len(take)
                continue
            if self._crlf:
                if len(raw) - pos < 2:
                    break
                if raw[pos:pos + 2] != b"\r\n":
                    raise BadResponse("chunk data not followed by CRLF")
                pos += 2
                self._crlf = False
                continue
            end = raw.find(b"\r\n", pos, pos + MAX_CHUNK_LINE + 2)
            if end < 0:
                if len(raw) - pos > MAX_CHUNK_LINE:
                    raise BadResponse(f"chunk size line over {MAX_CHUNK_LINE} bytes")
                break
            size_text = bytes(raw[pos:end]).split(b";", 1)[0].strip(b" \t")
            pos = end + 2
            if not _HEX.fullmatch(size_text):
                raise BadResponse(f"bad chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            if size == 0:
                self.done = True  # trailers, if any, are not read: the connection closes with us
                break
            if len(self.out) + size > self.max_body:
                raise BadResponse(f"chunked body over the {self.max_body}-byte limit")
            self._left, self._crlf = size, True
        del raw[:pos]


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
