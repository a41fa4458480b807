"""`vllmdiag gate --nagios`: the gate as a Nagios/Icinga/Sensu plugin (issue 35 item 10).

The plugin contract (Nagios Plugin Guidelines): one line on stdout, `SERVICE STATE - text | perfdata`, and
the exit code is the state: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. Pure: a NodeGateResult in, (line, code) out.
"""

from __future__ import annotations

from typing import Any

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
STATE = {OK: "OK", WARNING: "WARNING", CRITICAL: "CRITICAL", UNKNOWN: "UNKNOWN"}


def _plain(text: str, limit: int = 160) -> str:
    """One line without the characters that end the text (`|` starts perfdata) or the line."""
    from vllmdiag.render.safe import clean  # a renderer: the gate result in, the plugin line out

    out = clean(text).replace("|", "/")
    return out if len(out) <= limit else out[:limit - 1] + "…"


def plugin_line(node: Any) -> tuple[str, int]:
    """CRITICAL: a required check failed. UNKNOWN: none failed but a required one could not look (the gate
    cannot vouch for it). WARNING: a warning, or an advisory check that failed. OK: everything looked and passed."""
    failed = [c for c in node.checks if c.blocks]
    unseen = [c for c in node.checks if c.required and c.status == "skip"]
    warned = [c for c in node.checks if c.status == "warn" or (c.status == "fail" and not c.required)]
    counts = node.counts()
    if failed:
        code, said = CRITICAL, "required check(s) failed: " + "; ".join(f"{c.name}: {c.reason}" for c in failed)
    elif unseen:
        code, said = UNKNOWN, "required check(s) could not look: " + "; ".join(f"{c.name}: {c.reason}" for c in unseen)
    elif warned:
        code, said = WARNING, "warning(s): " + "; ".join(f"{c.name}: {c.reason}" for c in warned)
    else:
        code, said = OK, f"{counts['pass']} check(s) passed"
    perf = " ".join(f"{status}={counts[status]}" for status in ("pass", "warn", "fail", "skip"))
    return f"VLLMDIAG GATE {STATE[code]} - {_plain(node.node, 64)}: {_plain(said)} | {perf}", code


def error_line(message: str) -> tuple[str, int]:
    """The gate could not run (bad config, a file it cannot write): UNKNOWN, never CRITICAL (exit 2 is
    CRITICAL to a plugin runner; the usage error is ours, not the node's)."""
    return f"VLLMDIAG GATE UNKNOWN - {_plain(message, 300)}", UNKNOWN
