"""What one node's answer means: ok with a snapshot, or unreachable / timeout / error with a reason (pure)."""

from __future__ import annotations

import json

from vllmdiag.model import Snapshot, SnapshotError
from vllmdiag.model.fleet import NodeOutcome
from vllmdiag.redact import redact_text

# ssh exits 255 for its own failures; its message says which. Order matters: first match wins.
_SSH_REASONS = (
    ("Permission denied", "error", "ssh authentication failed"),
    ("Host key verification failed", "error", "ssh host key verification failed"),
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", "error", "ssh host key changed"),
    ("Could not resolve hostname", "unreachable", "host name does not resolve"),
    ("banner exchange", "unreachable", "no SSH banner (port answers, sshd does not)"),
    ("Connection timed out", "unreachable", "connection timed out"),
    ("Connection refused", "unreachable", "connection refused"),
    ("No route to host", "unreachable", "no route to host"),
    ("Network is unreachable", "unreachable", "network unreachable"),
    ("Connection closed", "unreachable", "connection closed by the remote side"),
    ("Connection reset", "unreachable", "connection reset"),
)


def classify(node: str, *, rc: int | None, timed_out: bool, stdout: list[bytes], stderr: list[bytes], duration_s: float,
             plan_timeout_s: float, transport: str, too_large: bool = False, reason: str | None = None) -> NodeOutcome:
    def out(status: str, why: str | None, snap: Snapshot | None = None) -> NodeOutcome:
        return NodeOutcome(node, status, why, duration_s, snap)

    err = _last_line(stderr)
    if timed_out:
        return out("timeout", reason or f"no answer within {plan_timeout_s:g}s" + (f" (last stderr: {err})" if err else ""))
    if transport == "ssh" and rc == 255:
        for needle, status, why in _SSH_REASONS:
            if any(needle in line.decode("utf-8", "replace") for line in stderr):
                return out(status, f"{why}: {err}" if err else why)
        return out("unreachable", f"ssh failed (exit 255): {err or 'no message'}")
    if rc != 0:
        if rc == 127:
            return out("error", f"collector not found on the node (exit 127; install vllmdiag there, or use --ship "
                                f"or --remote-cmd): {err}")
        return out("error", f"exit {rc}: {err or 'no message'}")
    if too_large:
        return out("error", "garbled output: larger than the output cap")
    try:
        snap = parse_snapshot(stdout)
    except SnapshotError as exc:
        return out("error", f"garbled output: {exc}")
    snap.node = node  # the name the sweep used is the key everything else joins on
    return out("ok", None, snap)


def parse_snapshot(stdout: list[bytes]) -> Snapshot:
    """The last JSON object line of stdout (login banners or a MOTD may come first)."""
    lines = [line.strip() for line in b"".join(stdout).splitlines() if line.strip()]
    candidates = [line for line in lines if line.startswith(b"{")]
    if not candidates:
        first = redact_text(lines[0][:60].decode("utf-8", "replace")) if lines else ""
        raise SnapshotError("no snapshot JSON in the output" + (f" (got {first!r})" if first else " (empty)"))
    try:
        raw = json.loads(candidates[-1])
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise SnapshotError(f"not valid JSON ({type(exc).__name__})") from None
    try:
        return Snapshot.from_dict(raw, "snapshot")
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SnapshotError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None


def _last_line(lines: list[bytes]) -> str:
    """The remote side's last words, for the node's reason: secrets in them (a wrapper echoing its
    command line, a token in an error) are redacted before they reach any output."""
    for line in reversed(lines):
        text = line[-4096:].decode("utf-8", "replace").strip()
        if text:
            return redact_text(text)[:300]
    return ""
