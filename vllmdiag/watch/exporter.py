"""Prometheus text exposition of the watcher's state, on a tiny bounded HTTP server (no dependency).

prometheus_client would add a package to every node for a dozen gauges; the text format (0.0.4)
is a few lines. Names follow Prometheus conventions (units in the name, ``_total`` counters) and
every per-deployment series carries the labels ``node`` and ``deployment`` for Grafana.
"""

from __future__ import annotations

import re
import selectors
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HELP = {
    "vllmdiag_deployment_stalled": ("gauge", "1 while the deployment is stalled with work in flight (confirmed by a triage)"),
    "vllmdiag_deployment_state": ("gauge", "1 for the deployment's current state (idle, running, suspect, stalled, "
                                  "unknown: the watcher could not read its fds, maps or rings)"),
    "vllmdiag_deployment_blind": ("gauge", "1 while the watcher cannot see whether it moves (state unknown; the log "
                                  "says what it could not read and the fix)"),
    "vllmdiag_seconds_since_progress": ("gauge", "seconds since it last moved while it had work (0: idle or moving)"),
    "vllmdiag_stalls_total": ("counter", "stalls confirmed and saved for this deployment"),
    "vllmdiag_last_verdict_info": ("gauge", "1, labelled with the last triage's status, layer and culprit"),
    "vllmdiag_last_culprit_rank": ("gauge", "rank of the last triage's first culprit (-1: none or not a rank)"),
    "vllmdiag_watch_cpu_seconds_total": ("counter", "CPU seconds (user+system) used by the watcher process itself"),
    "vllmdiag_watch_children_cpu_seconds_total": ("counter", "CPU seconds of its finished children (py-spy, NVML, hooks)"),
    "vllmdiag_watch_pass_duration_seconds": ("gauge", "wall time of the last cheap pass"),
    "vllmdiag_watch_passes_total": ("counter", "cheap passes run"),
    "vllmdiag_watch_triages_total": ("counter", "full triages run"),
    "vllmdiag_watch_errors_total": ("counter", "passes or triages that failed (the watcher logs why and goes on)"),
    "vllmdiag_watch_deployments": ("gauge", "deployments seen in the last pass"),
    "vllmdiag_watch_stuck_threads": ("gauge", "probe threads stuck in the kernel (passes then run in a killable child)"),
}
Sample = tuple[str, dict[str, str], float]
# /livez and /readyz (vllmdiag.watch.health): deployment id or None -> (HTTP status, one line)
Route = Callable[[str | None], tuple[int, str]]
DEPLOYMENT_ID = re.compile(r"[!-~]{1,200}")  # a deployment id is "<node>:<pid>"


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(samples: list[Sample]) -> str:
    lines: list[str] = []
    done: set[str] = set()
    for name, labels, value in sorted(samples, key=lambda s: s[0]):
        if name not in done:
            kind, text = HELP[name]
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            done.add(name)
        lab = ",".join(f'{k}="{escape(str(v))}"' for k, v in labels.items())
        lines.append(f"{name}{{{lab}}} {_num(value)}" if lab else f"{name} {_num(value)}")
    return "\n".join(lines) + "\n"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


MAX_CLIENTS = 16  # Prometheus and a liveness probe need 1-2; beyond this a connection is closed at once
DEADLINE_S = 5.0  # for the whole request, from accept to the last byte sent: not per read
MAX_REQUEST = 8 << 10  # a GET line and its headers
CPU_SLICE_S = 0.05  # the answerer's CPU between two rests (see Exporter._rest)
LOG_EVERY_S = 60.0  # at most one line a minute about dropped connections


class Exporter:
    """Serves ``/metrics`` from one daemon thread with a bounded number of clients (issue 25 item 2).

    http.server's ThreadingHTTPServer started a thread and held an fd per connection with no cap, and
    its timeout was per read: ~1,500 clients sending a byte a second held 1,020 threads and every fd
    the watcher had, its passes failed with EMFILE, and each reset wrote a 25-line traceback. Here one
    thread multiplexes non-blocking sockets: at most ``max_clients`` at a time (beyond, the oldest one
    still sending its request is closed, or the newcomer when all are being answered), each ended
    ``deadline_s`` after it was accepted whatever it sends, and what was dropped is one line a minute
    through ``note``. ``collect`` is called per scrape."""

    def __init__(self, addr: str, port: int, collect: Callable[[], list[Sample]], *,
                 note: Callable[[str], None] | None = None, max_clients: int = MAX_CLIENTS,
                 deadline_s: float = DEADLINE_S, routes: dict[str, Route] | None = None) -> None:
        self.collect, self.note = collect, note
        self.routes = dict(routes or {})
        self.max_clients, self.deadline_s = max_clients, deadline_s
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.sock.bind((addr, port))
            self.sock.listen(64)
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = threading.Event()
        self.dropped: dict[str, int] = {}  # why -> connections since the last log line
        self.priority: dict[str, Any] = {}  # what the serving thread's scheduling class became
        self._logged = time.monotonic() - LOG_EVERY_S
        self.thread = threading.Thread(target=self._serve, name="watch-exporter", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.sock.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self.thread.is_alive():
            self.thread.join(5)
        for s in (self.sock, self._wake_r, self._wake_w):
            s.close()

    # ---- the loop (exporter thread) ------------------------------------------------------------
    def _serve(self) -> None:
        from vllmdiag.runtime.priority import thread_realtime

        self.priority = thread_realtime()  # the answers jump a saturated node's queue (see there)
        if self.priority.get("policy") != "SCHED_FIFO":
            self._say(f"probes answered at {self.priority.get('policy')} priority ({self.priority.get('why')}): "
                      "on a saturated node an answer may take longer than a kubelet's timeoutSeconds")
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        conns: dict[socket.socket, _Conn] = {}
        slice_start = time.thread_time()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                soonest = min((c.deadline for c in conns.values()), default=now + 1.0)
                for key, _ in sel.select(max(0.0, min(1.0, soonest - now))):
                    if key.data is None:
                        self._accept(sel, conns)
                    elif isinstance(key.data, _Conn):
                        self._io(sel, conns, key.data)
                now = time.monotonic()
                for c in [c for c in conns.values() if c.deadline <= now]:
                    self._drop(sel, conns, c, "past the whole-request deadline")
                self._log(time.monotonic())
                slice_start = self._rest(slice_start)
        except Exception as exc:  # noqa: BLE001 - the watcher outlives its exporter; one line says why
            self._say(f"metrics exporter stopped: {type(exc).__name__}: {exc}")
        finally:
            for c in list(conns.values()):
                self._finish(sel, conns, c)
            sel.close()

    def _rest(self, slice_start: float) -> float:
        """A flood of requests must not make the real-time answerer a CPU hog, nor get the watcher killed by
        RLIMIT_RTTIME (5 s at RT priority without once blocking): after each CPU_SLICE_S of its own CPU the
        thread sleeps as long, so it blocks often and never takes more than half a core."""
        used = time.thread_time() - slice_start
        if used < CPU_SLICE_S:
            return slice_start
        time.sleep(used)
        return time.thread_time()

    def _accept(self, sel: selectors.BaseSelector, conns: dict[socket.socket, _Conn]) -> None:
        for _ in range(64):  # what is queued now; a flood cannot keep this thread in accept
            try:
                sock, _addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE: refuse by leaving it queued; said once a minute
                self._count(f"accept failed ({exc.strerror or exc})")
                time.sleep(0.1)  # the listener stays readable: do not spin on it
                return
            if len(conns) >= self.max_clients:
                # Slots full: the oldest client still sending its request makes room (a scraper sends its
                # GET at once, a slow client never finishes), so idle holders cannot lock Prometheus and
                # the liveness probe out; when every slot is being answered, the newcomer is closed.
                slow = min((c for c in conns.values() if c.out is None), key=lambda c: c.deadline, default=None)
                if slow is None:
                    self._count(f"over the limit of {self.max_clients} clients")
                    sock.close()
                    continue
                self._drop(sel, conns, slow, f"evicted to make room (limit {self.max_clients} clients)")
            sock.setblocking(False)
            c = _Conn(sock, time.monotonic() + self.deadline_s)
            conns[sock] = c
            sel.register(sock, selectors.EVENT_READ, c)

    def _io(self, sel: selectors.BaseSelector, conns: dict[socket.socket, _Conn], c: _Conn) -> None:
        try:
            if c.out is None:
                data = c.sock.recv(4096)
                if not data:
                    self._finish(sel, conns, c)
                    return
                c.inbuf += data
                if b"\r\n\r\n" in c.inbuf or b"\n\n" in c.inbuf:
                    c.out = self._answer(bytes(c.inbuf))
                    sel.modify(c.sock, selectors.EVENT_WRITE, c)
                elif len(c.inbuf) > MAX_REQUEST:
                    c.out = _response(431, b"request header too large\n", "text/plain")
                    sel.modify(c.sock, selectors.EVENT_WRITE, c)
                return
            sent = c.sock.send(c.out)
            c.out = c.out[sent:]
            if not c.out:
                self._finish(sel, conns, c)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # a reset, a broken pipe: the client's business, counted, never a traceback
            self._drop(sel, conns, c, type(exc).__name__)

    def _answer(self, request: bytes) -> bytes:
        line = request.split(b"\n", 1)[0].split()
        if len(line) < 2 or line[0] not in (b"GET", b"HEAD"):
            return _response(405, b"only GET and HEAD\n", "text/plain")
        path, _, query = line[1].partition(b"?")
        head = line[0] == b"HEAD"
        route = self.routes.get(path.decode("ascii", "replace"))
        if route is not None:
            return self._probe(route, query, head)
        if path != b"/metrics":
            known = ", ".join(["/metrics", *sorted(self.routes)])
            return _response(404, f"not found: try {known}\n".encode(), "text/plain")
        try:
            body = render(self.collect()).encode()
        except Exception as exc:  # noqa: BLE001 - a scrape must not end the exporter
            self._count(f"collect failed ({type(exc).__name__})")
            return _response(500, b"the watcher's metrics could not be read\n", "text/plain")
        return _response(200, body, CONTENT_TYPE, head_only=line[0] == b"HEAD")

    def _probe(self, route: Route, query: bytes, head: bool) -> bytes:
        """/livez, /readyz: one line, text/plain; ``?deployment=ID`` picks one deployment."""
        try:
            fields = urllib.parse.parse_qs(query.decode("ascii"), max_num_fields=4, strict_parsing=bool(query),
                                           errors="strict")
            wanted = fields.get("deployment", [None])[-1]
            # "<node>:<root pid>": printable ASCII without spaces; anything else is echoed nowhere
            if wanted is not None and not DEPLOYMENT_ID.fullmatch(wanted):
                raise ValueError("deployment")
        except (ValueError, UnicodeError):
            return _response(400, b"bad query: use ?deployment=<node>:<root pid>\n", "text/plain", head_only=head)
        try:
            code, text = route(wanted)
        except Exception as exc:  # noqa: BLE001 - a probe must not end the exporter
            self._count(f"probe failed ({type(exc).__name__})")
            return _response(500, b"the watcher's state could not be read\n", "text/plain", head_only=head)
        return _response(code, text.encode("utf-8", "replace") + b"\n", "text/plain; charset=utf-8", head_only=head)

    def _drop(self, sel: selectors.BaseSelector, conns: dict[socket.socket, _Conn], c: _Conn, why: str) -> None:
        self._count(why)
        self._finish(sel, conns, c)

    @staticmethod
    def _finish(sel: selectors.BaseSelector, conns: dict[socket.socket, _Conn], c: _Conn) -> None:
        conns.pop(c.sock, None)
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()

    def _count(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1

    def _log(self, now: float) -> None:
        if not self.dropped or now - self._logged < LOG_EVERY_S:
            return
        total = sum(self.dropped.values())
        why = ", ".join(f"{n} {w}" for w, n in sorted(self.dropped.items(), key=lambda kv: -kv[1])[:4])
        self._say(f"metrics exporter dropped {total} connection(s) ({why}); next such line in {LOG_EVERY_S:g} s at most")
        self.dropped, self._logged = {}, now

    def _say(self, text: str) -> None:
        if self.note is not None:
            try:
                self.note(text)
            except Exception:  # noqa: BLE001 - a closed log stream must not end the exporter
                pass


@dataclass
class _Conn:
    sock: socket.socket
    deadline: float
    inbuf: bytearray = field(default_factory=bytearray)
    out: bytes | None = None


def _response(code: int, body: bytes, ctype: str, *, head_only: bool = False) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 503: "Service Unavailable",
              404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large",
              500: "Internal Server Error"}[code]
    head = (f"HTTP/1.1 {code} {reason}\r\nServer: vllmdiag-watch\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("ascii")
    return head if head_only else head + body
