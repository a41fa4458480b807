"""``vllmdiag watch``: thin typer command over ``vllmdiag.watch.watcher`` (found by vllmdiag/cli/app.py: ``COMMAND``)."""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path
from typing import Any

from vllmdiag.cli.options import WATCH, check, with_defaults
from vllmdiag.cli.shared import Command
from vllmdiag.errors import BadInput

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgKMG]i?[bB]?|[bB])?\s*$")



def watch_command(**given: Any) -> int:
    """Watch this node: cheap signals every --interval; on a stall, one full triage saved to --out."""
    from vllmdiag.watch import hooks
    from vllmdiag.watch.watcher import WatchConfig, default_out_dir

    o = with_defaults(WATCH, given)  # the options as declared in cli/options.py (typer passes them all)
    out = o["out"] if o["out"] is not None else default_out_dir()
    if out is None:
        raise BadInput("--out DIR is required (no HOME or XDG_STATE_HOME to put the default under)")

    check(WATCH, o)  # each option's range, as the table declares it
    if o["report_format"] not in ("html", "md"):
        raise BadInput("--report-format must be html or md")
    textfile = o["textfile"]
    if textfile is not None:
        from vllmdiag.watch.textfile import textfile_path

        textfile = textfile_path(textfile, "--textfile")
    if _under(out, Path("/dev/shm")):
        # vLLM's rings live in this tmpfs and fail when it fills: the watcher never writes there.
        raise BadInput(f"--out {out}: not under /dev/shm (the target's shared memory); use a disk directory")
    on_stall, webhook = o["on_stall"], o["webhook"]
    cfg = WatchConfig(out_dir=out, interval_s=o["interval"], confirm_s=o["confirm"], keep=o["keep"],
                      max_bytes=parse_size(o["max_bytes"]), report_suffix="." + o["report_format"],
                      hook_timeout_s=o["on_stall_timeout"],
                      on_stall=hooks.parse_command(on_stall) if on_stall is not None else None,
                      webhook=hooks.check_url(webhook) if webhook is not None else None,
                      webhook_timeout_s=o["webhook_timeout"], budget_s=o["budget"], node=o["node"],
                      max_passes=o["max_passes"], select=parse_select(o["select"] or []), gone_grace_s=o["gone_grace"],
                      textfile=textfile)
    return run(cfg, o["metrics_port"], o["metrics_addr"])


def run(cfg: Any, metrics_port: int | None, metrics_addr: str) -> int:
    """Run until SIGTERM/SIGINT (exit 0) or --max-passes."""
    from vllmdiag.watch.exporter import Exporter
    from vllmdiag.watch.watcher import Watcher

    stop = threading.Event()
    watcher = Watcher(cfg, stop)
    watcher.store.prepare()  # --out /dev/null, /sys, another user's link or 0777 directory: one line, exit 2
    exporter = None
    if metrics_port is not None:
        try:
            exporter = Exporter(metrics_addr, metrics_port, watcher.samples, note=watcher._note,
                                routes=watcher.routes())
        except OSError as exc:
            raise BadInput(f"--metrics-port {metrics_port} on {metrics_addr}: {exc.strerror or exc}") from None
        exporter.start()
        host, port = exporter.address
        watcher._note(f"metrics on http://{host}:{port}/metrics (probes: /livez, /readyz)")
    old = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return watcher.run()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if exporter is not None:
            exporter.close()


def parse_size(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise BadInput(f"--max-bytes {text!r}: use a number of bytes, or with K, M or G")
    unit = (m.group(2) or "b")[0].lower()
    value = int(m.group(1)) * {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[unit]
    if not 1 << 16 <= value <= 1 << 44:
        raise BadInput("--max-bytes must be between 64K and 16T")
    return value


def parse_select(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", key):
            raise BadInput(f"--select {item!r}: use NAME=VALUE (an environment variable of the deployment)")
        from vllmdiag.watch.watcher import check_select_key

        why = check_select_key(key)
        if why:
            raise BadInput(f"--select {item[:200]!r}: {why}; it would watch nothing")
        out[key] = value
    return out


def _under(path: Path, top: Path) -> bool:
    resolved = path.resolve()
    return resolved == top.resolve() or top.resolve() in resolved.parents


COMMAND = Command("watch", watch_command, WATCH)
