"""A non-intrusive ZMTP 3.x reachability check (helper, not a probe).

Why raw protocol bytes and not a pyzmq socket + ``get_monitor_socket``: a pyzmq socket only reaches
HANDSHAKE_SUCCEEDED if we guess a socket type the peer accepts (ROUTER takes DEALER/REQ/ROUTER, PULL
takes PUSH, XPUB takes SUB/XSUB...), and on success libzmq attaches a pipe to the target socket: the
peer gains a new routing peer and (SUB) may receive a subscription. On a mismatch the monitor only
says "handshake failed" and never names the peer's type. Speaking the greeting ourselves lets us read
the peer's READY command (its Socket-Type property) and hang up *before* sending our READY, so the
peer's handshake never completes, no pipe is attached and nothing reaches its application (tests
prove it on ROUTER, PULL and XPUB_VERBOSE). And we write nothing at all until the peer has sent a
ZMTP signature first (libzmq always does, at once), so a non-ZMQ listener (HTTP, a torch TCPStore)
never receives a byte from us.
"""

from __future__ import annotations

import errno
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

SIGNATURE_LEN = 10
GREETING_LEN = 64
# signature (0xFF, 8 padding bytes, 0x7F), version 3.0, mechanism NULL, as-server 0, filler.
OUR_GREETING = b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\0") + b"\0" + b"\0" * 31
MAX_COMMAND_BYTES = 1 << 16
POLL_S = 0.01  # how often a silent wait asks ``give_up`` (a wake-up costs microseconds)


class _GaveUp(Exception):
    """The caller's ``give_up`` said this wait is settled elsewhere (see endpoints.check_all)."""


class _Stop(Exception):
    def __init__(self, status: str, reason: str, stage: str) -> None:
        super().__init__(reason)
        self.status, self.reason, self.stage = status, reason, stage


def check(endpoint: str, timeout_s: float = 0.5, *, fs_root: str = "",
          give_up: Callable[[float], str | None] | None = None) -> dict[str, Any]:
    """Greet the ZMQ socket listening at ``ipc://path`` or ``tcp://host:port``; never raises.

    ``fs_root`` prefixes ipc paths (``/proc/<pid>/root`` reaches a socket file in another mount
    namespace). The result always has ``status``: ok | greeted (non-NULL mechanism, not pursued) |
    rejected (peer sent ERROR) | not_zmtp | closed | refused | no_listener | timeout | error.
    ``give_up(waited_s)``, asked every ``POLL_S`` while the peer has sent nothing at all, ends the wait
    early as a ``timeout`` with ``cut_short`` set to the reason it returns (None: keep waiting).
    """
    out: dict[str, Any] = {"endpoint": endpoint, "status": "error", "peer_socket_type": None, "mechanism": None,
                           "version": None, "latency_ms": None, "stage": None, "reason": None}
    start = time.monotonic()
    deadline = start + max(0.01, timeout_s)
    sock: socket.socket | None = None
    stage = "connect"
    try:
        sock = _connect(endpoint, deadline, fs_root)
        stage = "signature"
        sig = _recv_exact(sock, SIGNATURE_LEN, deadline, give_up and (lambda: give_up(time.monotonic() - start)))
        if sig[0] != 0xFF or sig[9] != 0x7F:
            raise _Stop("not_zmtp", "peer did not start with a ZMTP signature", stage)
        stage = "greeting"
        sock.sendall(OUR_GREETING)
        rest = _recv_exact(sock, GREETING_LEN - SIGNATURE_LEN, deadline)
        out["version"] = f"{rest[0]}.{rest[1]}"
        out["mechanism"] = rest[2:22].rstrip(b"\0").decode("ascii", "replace")
        if rest[0] < 3:
            raise _Stop("greeted", f"ZMTP {out['version']} peer: no READY to read", stage)
        if out["mechanism"] != "NULL":
            raise _Stop("greeted", f"mechanism {out['mechanism']}: not continued", stage)
        stage = "ready"
        name, body = _read_command(sock, deadline)
        if name == "ERROR":
            raise _Stop("rejected", body[1:1 + body[0]].decode("utf-8", "replace") if body else "", stage)
        if name != "READY":
            raise _Stop("not_zmtp", f"unexpected command {name!r}", stage)
        props = parse_properties(body)
        out.update(status="ok", peer_socket_type=props.get("Socket-Type"), stage="done")
    except _Stop as stop:
        out.update(status=stop.status, reason=stop.reason, stage=stop.stage)
    except _GaveUp as why:
        waited = time.monotonic() - start
        out.update(status="timeout", reason=f"no answer within {waited:.2f} s; {why}", stage=stage, cut_short=str(why))
    except TimeoutError:
        out.update(status="timeout", reason=f"no answer within {timeout_s:.2f} s", stage=stage)
    except OSError as exc:
        out.update(_os_error(exc), stage=stage)
    finally:
        out["latency_ms"] = round((time.monotonic() - start) * 1000, 2)
        if sock is not None:
            _close_hard(sock)
    return out


def _connect(endpoint: str, deadline: float, fs_root: str) -> socket.socket:
    scheme, _, addr = endpoint.partition("://")
    if scheme == "ipc":
        target: Any = addr if addr.startswith(("@", "\0")) else fs_root + addr
        if target.startswith("@"):
            target = "\0" + target[1:]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    elif scheme == "tcp":
        host, _, port = addr.rpartition(":")
        host = host.strip("[]")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        target = (host, int(port))
    else:
        raise _Stop("error", f"unsupported endpoint {endpoint!r}", "connect")
    try:
        sock.settimeout(_left(deadline))
        sock.connect(target)
    except BaseException:
        sock.close()
        raise
    return sock


def _recv_exact(sock: socket.socket, n: int, deadline: float,
                give_up: Callable[[], str | None] | None = None) -> bytes:
    buf = b""
    while len(buf) < n:
        left = _left(deadline)
        if give_up is None or buf:
            sock.settimeout(left)
            chunk = sock.recv(n - len(buf))
        else:  # nothing received yet: wait in slices, asking whether the wait is still worth it
            sock.settimeout(min(left, POLL_S))
            try:
                chunk = sock.recv(n - len(buf))
            except TimeoutError:
                why = give_up()
                if why:
                    raise _GaveUp(why) from None
                continue
        if not chunk:
            raise _Stop("closed", f"peer closed after {len(buf)} of {n} bytes", "read")
        buf += chunk
    return buf


def _read_command(sock: socket.socket, deadline: float) -> tuple[str, bytes]:
    flags = _recv_exact(sock, 1, deadline)[0]
    if not flags & 0x04:
        raise _Stop("not_zmtp", "first frame after the greeting is not a command", "ready")
    size_raw = _recv_exact(sock, 8 if flags & 0x02 else 1, deadline)
    size = struct.unpack(">Q", size_raw)[0] if flags & 0x02 else size_raw[0]
    if size > MAX_COMMAND_BYTES:
        raise _Stop("not_zmtp", f"command of {size} bytes", "ready")
    body = _recv_exact(sock, size, deadline)
    name_len = body[0] if body else 0
    return body[1:1 + name_len].decode("ascii", "replace"), body[1 + name_len:]


def parse_properties(data: bytes) -> dict[str, str]:
    """ZMTP metadata: repeated (1-byte name length, name, 4-byte big-endian value length, value)."""
    props: dict[str, str] = {}
    i = 0
    while i < len(data):
        n = data[i]
        name = data[i + 1:i + 1 + n].decode("ascii", "replace")
        i += 1 + n
        if i + 4 > len(data):
            break
        (vlen,) = struct.unpack(">I", data[i:i + 4])
        props[name] = data[i + 4:i + 4 + vlen].decode("utf-8", "replace")
        i += 4 + vlen
    return props


def _os_error(exc: OSError) -> dict[str, Any]:
    if exc.errno == errno.ECONNREFUSED:
        return {"status": "refused", "reason": "connection refused: nobody listens (stale socket file or closed port)"}
    if exc.errno == errno.ENOENT:
        return {"status": "no_listener", "reason": "no such socket file"}
    if exc.errno in (errno.EAGAIN, errno.ETIMEDOUT):
        return {"status": "timeout", "reason": f"{exc.strerror}"}
    if exc.errno in (errno.ECONNRESET, errno.EPIPE):
        return {"status": "closed", "reason": f"{exc.strerror}"}
    return {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _close_hard(sock: socket.socket) -> None:
    # linger 0: a TCP RST instead of FIN, so neither side keeps a TIME_WAIT/half-open leftover.
    try:
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()
