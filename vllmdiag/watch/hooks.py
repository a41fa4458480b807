"""What the watcher does after saving a stall: an optional command and an optional webhook.

Both are bounded in time. The command is an argv list (``shlex.split`` of ``--on-stall``, never a
shell) with the snapshot path appended and facts in the environment; the webhook gets a JSON POST
and never follows a redirect (a POST turned into a GET elsewhere is not what was configured).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from vllmdiag.errors import BadInput
from vllmdiag.model import strict_json

MAX_REPLY_BYTES = 64 << 10


def parse_command(text: str) -> list[str]:
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise BadInput(f"--on-stall: {exc}") from None
    if not argv:
        raise BadInput("--on-stall: empty command")
    return argv


def check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput("--webhook: use an http:// or https:// URL with a host")
    return url


def run_command(argv: list[str], snapshot_path: str, env_extra: dict[str, str], timeout_s: float,
                stop: threading.Event | None = None) -> str:
    """Run the hook in its own process group; kill the group at the deadline (or on shutdown)."""
    env = {**os.environ, **env_extra}
    try:
        proc = subprocess.Popen([*argv, snapshot_path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError as exc:
        return f"could not start: {exc.strerror or exc}"
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None:
        if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            _kill(proc)
            return f"killed after {timeout_s:g} s" if time.monotonic() >= deadline else "killed at shutdown"
        time.sleep(0.05)
    return f"exit {proc.returncode}"


def post_json(url: str, payload: dict[str, Any], timeout_s: float) -> str:
    """POST with a hard total deadline: urllib's timeout is per socket operation, so a server that
    drips bytes could hold it longer; the post runs in a daemon thread we stop waiting for."""
    out: list[str] = []
    worker = threading.Thread(target=lambda: out.append(_post(url, payload, timeout_s)), daemon=True,
                              name="watch-webhook")
    worker.start()
    worker.join(timeout_s + 0.5)
    return out[0] if out else f"failed: no answer within {timeout_s:g} s"


def _post(url: str, payload: dict[str, Any], timeout_s: float) -> str:
    body = strict_json.dumps(payload, separators=(",", ":"), default=str).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "vllmdiag-watch"})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=timeout_s) as resp:
            resp.read(MAX_REPLY_BYTES)
            return f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"failed: {reason}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        pass
