"""ClusterShell pieces for the sweep: a worker that runs one prebuilt argv per node, and the deadline timer."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from ClusterShell.Event import EventHandler


class Deadline(EventHandler):
    """The whole-sweep deadline: aborting from inside the engine loop kills every client still running
    (``Task.resume(timeout)`` raises instead and leaves the thread's task unusable for the next sweep).
    ``before``: called first (stop starting nodes)."""

    def __init__(self, task: Any, before: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.task = task
        self.before = before

    def ev_timer(self, timer: Any) -> None:
        if self.before is not None:
            self.before()
        self.task.abort()


def argv_worker(argvs: dict[str, list[str]], handler: Any, timeout_s: float) -> Any:
    from ClusterShell.Worker.Exec import ExecClient, ExecWorker

    class ArgvClient(ExecClient):
        def _build_cmd(self) -> tuple[list[str], None]:
            # A list (not a string) makes ClusterShell start it without a shell.
            return argvs[str(self.key)], None

        def _exec_nonblock(self, commandlist: list[str], shell: bool = False, env: Any = None) -> Any:
            # ClusterShell kills only the direct child on timeout; an exec template's wrapper (a shell
            # script around kubectl) would leave its children running. Own session -> kill the group.
            from ClusterShell.Worker import fastsubprocess as fsp
            from ClusterShell.Worker.EngineClient import E_READ, E_WRITE

            proc = fsp.Popen(commandlist, bufsize=0, stdin=fsp.PIPE, stdout=fsp.PIPE, stderr=fsp.PIPE,
                             shell=False, preexec_fn=os.setsid)
            self.streams.set_stream(self.worker.SNAME_STDERR, proc.stderr, E_READ)
            self.streams.set_stream(self.worker.SNAME_STDOUT, proc.stdout, E_READ)
            self.streams.set_stream(self.worker.SNAME_STDIN, proc.stdin, E_WRITE, retain=False)
            return proc

        def _close(self, abort: bool, timeout: bool) -> None:
            if abort and self.popen is not None and self.popen.poll() is None:
                try:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            super()._close(abort, timeout)

    class ArgvWorker(ExecWorker):
        SHELL_CLASS = ArgvClient

        def _create_clients(self, **kwargs: Any) -> None:
            # One client per name, straight from our list: a NodeSet of 100,000 names costs seconds to
            # build (the names were checked by nodes.check_name; the engine only uses them as keys).
            for rank, node in enumerate(argvs):
                self._add_client(node, rank=rank, **kwargs)

    return ArgvWorker("", handler=handler, timeout=timeout_s, command="vllmdiag", stderr=True)
