"""A kubelet's HTTP probe loop, for the tests and bench/bench_liveness.py.

Like the kubelet: every ``period_s`` one GET with ``timeout_s``; a status in 200-399 is a success,
anything else (or no answer in time) a failure; the probe *fires* (restart for liveness, out of the
endpoints for readiness) at ``failure_threshold`` consecutive failures. Every result is kept, so a
test can count false failures and time the first one.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Result:
    at: float  # time.monotonic() when the GET was sent
    code: int | None  # None: no answer within the timeout
    body: str


@dataclass
class Probe:
    host: str
    port: int
    path: str
    period_s: float = 1.0
    timeout_s: float = 1.0
    failure_threshold: int = 1
    results: list[Result] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Probe:
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"probe{self.path}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 5)

    def _loop(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            self.results.append(self.once())
            nxt += self.period_s
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def once(self) -> Result:
        at = time.monotonic()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request("GET", self.path)
            resp = conn.getresponse()
            return Result(at, resp.status, resp.read(4096).decode("utf-8", "replace").strip())
        except (OSError, http.client.HTTPException) as exc:
            return Result(at, None, f"{type(exc).__name__}: {exc}")
        finally:
            conn.close()

    @staticmethod
    def ok(r: Result) -> bool:
        return r.code is not None and 200 <= r.code < 400

    def failures(self, since: float = 0.0, until: float = float("inf")) -> list[Result]:
        return [r for r in list(self.results) if since <= r.at < until and not self.ok(r)]

    def first_failure(self, since: float = 0.0) -> Result | None:
        return next((r for r in list(self.results) if r.at >= since and not self.ok(r)), None)

    def fired(self, since: float = 0.0) -> Result | None:
        """The result at which the kubelet would act: the failure_threshold-th failure in a row."""
        run = 0
        for r in list(self.results):
            if r.at < since:
                continue
            run = 0 if self.ok(r) else run + 1
            if run >= self.failure_threshold:
                return r
        return None

    def wait_for(self, cond: object, timeout_s: float) -> Result | None:
        """The first new result for which ``cond(result)`` is true, within timeout_s."""
        start = len(self.results)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for r in list(self.results)[start:]:
                if callable(cond) and cond(r):
                    return r
            time.sleep(0.05)
        return None
