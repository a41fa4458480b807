"""``vllmdiag watch``: thin typer command over ``vllmdiag.watch.watcher`` (registered by vllmdiag/cli/app.py)."""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

from vllmdiag.cli.shared import opt as _opt
from vllmdiag.errors import BadInput

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgKMG]i?[bB]?|[bB])?\s*$")


def register(app: Any) -> None:
    app.command("watch")(watch_command)


def watch_command(
    out: Annotated[Path | None, _opt("--out", help="directory for the snapshots and reports of stalls "
                                     "(default: /var/lib/vllmdiag/watch as root, else $XDG_STATE_HOME/vllmdiag/watch)")] = None,
    interval: Annotated[float, _opt("--interval", help="seconds between cheap passes")] = 5.0,
    confirm: Annotated[float, _opt("--confirm", help="seconds the triage watches a suspected stall (0: off)")] = 10.0,
    keep: Annotated[int, _opt("--keep", help="keep at most this many stalls in --out (oldest removed)")] = 50,
    max_bytes: Annotated[str, _opt("--max-bytes", help="keep --out under this size, e.g. 256M")] = "256M",
    report_format: Annotated[str, _opt("--report-format", help="html or md")] = "html",
    on_stall: Annotated[str | None, _opt("--on-stall", help="command per stall (no shell); gets the snapshot path")] = None,
    on_stall_timeout: Annotated[float, _opt("--on-stall-timeout", help="seconds before the command is killed")] = 30.0,
    webhook: Annotated[str | None, _opt("--webhook", help="POST each stall's JSON to this http(s) URL")] = None,
    webhook_timeout: Annotated[float, _opt("--webhook-timeout", help="seconds for the whole POST")] = 5.0,
    metrics_port: Annotated[int | None, _opt("--metrics-port", help="serve Prometheus /metrics here (0: any free port)")] = None,
    metrics_addr: Annotated[str, _opt("--metrics-addr", help="address for --metrics-port")] = "127.0.0.1",
    budget: Annotated[float, _opt("--budget", help="collection seconds of the triage a stall opens")] = 8.0,
    node: Annotated[str | None, _opt("--node", help="node name in logs, files and metrics (default: hostname)")] = None,
    select: Annotated[list[str] | None, _opt("--select", help="only deployments whose root has env KEY=VALUE")] = None,
    gone_grace: Annotated[float, _opt("--gone-grace", help="/livez fails once no watched deployment has been seen "
                                      "this many seconds (a restart in progress is not a hang)")] = 300.0,
    textfile: Annotated[Path | None, _opt("--textfile", help="after each pass write the metrics for node_exporter: "
                                          "DIR (its textfile directory) or FILE.prom")] = None,
    max_passes: Annotated[int | None, _opt("--max-passes", help="stop after this many passes", hidden=True)] = None,
) -> int:
    """Watch this node: cheap signals every --interval; on a stall, one full triage saved to --out."""
    from vllmdiag.watch import hooks
    from vllmdiag.watch.watcher import WatchConfig, default_out_dir

    out = out if out is not None else default_out_dir()
    if out is None:
        raise BadInput("--out DIR is required (no HOME or XDG_STATE_HOME to put the default under)")

    if not 0.2 <= interval <= 3600:
        raise BadInput("--interval must be between 0.2 and 3600 seconds")
    if not 0 <= confirm <= 600:
        raise BadInput("--confirm must be between 0 and 600 seconds")
    if not 1 <= keep <= 100000:
        raise BadInput("--keep must be between 1 and 100000")
    if not 0.2 <= budget <= 600 or not 0.1 <= on_stall_timeout <= 3600 or not 0.1 <= webhook_timeout <= 600:
        raise BadInput("--budget, --on-stall-timeout and --webhook-timeout must be positive and bounded")
    if report_format not in ("html", "md"):
        raise BadInput("--report-format must be html or md")
    if metrics_port is not None and not 0 <= metrics_port <= 65535:
        raise BadInput("--metrics-port must be between 0 and 65535")
    if not 0 <= gone_grace <= 86400:
        raise BadInput("--gone-grace must be between 0 and 86400 seconds")
    if textfile is not None:
        from vllmdiag.watch.textfile import textfile_path

        textfile = textfile_path(textfile, "--textfile")
    if _under(out, Path("/dev/shm")):
        # vLLM's rings live in this tmpfs and fail when it fills: the watcher never writes there.
        raise BadInput(f"--out {out}: not under /dev/shm (the target's shared memory); use a disk directory")
    cfg = WatchConfig(out_dir=out, interval_s=interval, confirm_s=confirm, keep=keep, max_bytes=parse_size(max_bytes),
                      report_suffix="." + report_format, hook_timeout_s=on_stall_timeout,
                      on_stall=hooks.parse_command(on_stall) if on_stall is not None else None,
                      webhook=hooks.check_url(webhook) if webhook is not None else None,
                      webhook_timeout_s=webhook_timeout, budget_s=budget, node=node, max_passes=max_passes,
                      select=parse_select(select or []), gone_grace_s=gone_grace, textfile=textfile)
    return run(cfg, metrics_port, metrics_addr)


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
