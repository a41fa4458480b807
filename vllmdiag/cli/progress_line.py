"""Live progress on stderr while `triage --rates S` observes: a terminal only (never in --json pipes,
logs or CI output), transient (gone when the verdict prints), and rich is imported only when shown."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any


class WatchBar:
    """`following ━━━━━━━━━━━━━━ 3.2/10 s` while the collection samples rates; stop() before another live display."""

    def __init__(self, watch_s: float, enabled: bool | None = None) -> None:
        self.watch_s = watch_s
        self.enabled = (sys.stderr.isatty() if enabled is None else enabled) and watch_s > 0
        self.bar: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WatchBar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            self.bar = Progress(TextColumn("collecting; following the deployment's rates"), BarColumn(),
                                TextColumn("{task.completed:.1f}/{task.total:g} s"),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            task = self.bar.add_task("watch", total=self.watch_s)
            start = time.monotonic()
            self._thread = threading.Thread(target=self._run, args=(task, start), daemon=True)
            self._thread.start()
        return self

    def _run(self, task: Any, start: float) -> None:
        while not self._stop.wait(0.2):
            self.bar.update(task, completed=min(self.watch_s, time.monotonic() - start))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def chain(self, then: Callable[[float, float], None] | None) -> Callable[[float, float], None] | None:
        """A confirm-window callback that first takes this bar down (rich allows one live display)."""
        if then is None:
            return None

        def tick(watched_s: float, window_s: float) -> None:
            self.stop()
            then(watched_s, window_s)

        return tick

    def __exit__(self, *exc: object) -> None:
        self.stop()
