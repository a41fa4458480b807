"""Fan a collect out to every node through ClusterShell's Task engine, and bound it in time.

ClusterShell owns the fan-out (bounded ``fanout``, non-blocking I/O, per-client timeouts); we only
hand it one prebuilt argv per node (an ``ExecClient`` whose command is a list never goes through a
shell) and read what comes back. Two deadlines: ``timeout_s`` per node (connect + command, counted
from when that node's client starts) and a whole-sweep deadline after which everything still
running is killed and reported as ``timeout``, so a sick fleet cannot hold the sweep.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ClusterShell.Event import EventHandler

from vllmdiag.runtime.deadline import CONFIRMING as _CONFIRMING
from vllmdiag.sweep.cluster_workers import Deadline, argv_worker
from vllmdiag.sweep.inventory import Inventory
from vllmdiag.sweep.outcome import NodeOutcome, classify
from vllmdiag.sweep.transport import Transport, node_argv
from vllmdiag.sweep.tree import TreeSpec

CONFIRMING = _CONFIRMING.encode()
MAX_OUTPUT_BYTES = 256 << 20
STDERR_LINES = 20
Progress = Callable[[NodeOutcome], None]


@dataclass(frozen=True)
class SweepPlan:
    nodes: list[str]
    transport: Transport = field(default_factory=Transport)
    inventory: Inventory | None = None
    timeout_s: float = 20.0  # per node: connect + collect
    fanout: int = 64
    sweep_timeout_s: float | None = None  # whole sweep; default from the waves the fanout needs
    tree: TreeSpec | None = None  # through ClusterShell gateways (vllmdiag/sweep/tree.py)
    # When the sweep began (time.monotonic()): the deadline counts from there, node-list resolution included.
    started: float = field(default_factory=time.monotonic)
    setup_s: float = 0.0  # spent reading and resolving the node list (a measure of this machine's speed now)

    @property
    def budget_s(self) -> float:
        """The remote collect's own budget: it answers with partial results before we would kill it."""
        return max(0.5, min(8.0, self.timeout_s - self.transport.connect_timeout_s - 1.0))

    @property
    def node_timeout_s(self) -> float:
        """The most one node may take: connect + collect (``timeout_s``), plus the confirm window, which only
        a node that said it opened one gets (``collect`` writes ``deadline.CONFIRMING``; see _NodeDeadline)."""
        return self.timeout_s + self.transport.confirm_s

    def quick_deadline_s(self, node: str, confirming: set[str]) -> float:
        """The deadline that holds ``node`` now: --timeout as written, unless it reported a suspicion."""
        return self.node_timeout_s if node in confirming else self.timeout_s

    @property
    def deadline_s(self) -> float:
        if self.sweep_timeout_s is not None:
            return self.sweep_timeout_s
        waves = max(1, math.ceil(len(self.nodes) / max(1, self.fanout)))
        return waves * self.node_timeout_s + 2.0

    def left_s(self) -> float:
        """Time left for collecting: the deadline less what is spent and what the verdict will take.
        Classifying, analysing and printing a node costs 20-40 us (measured at 100,000 nodes, idle and
        loaded machine), and about 4x what reading and resolving its name took on this machine as loaded
        as it is now: reserve the larger, at most 3/4 of the deadline."""
        spent = time.monotonic() - self.started
        reserve = min(0.75 * self.deadline_s, max(0.05 + 40e-6 * len(self.nodes), 4.0 * self.setup_s))
        return self.deadline_s - spent - reserve


def fit_confirm(confirm_s: float, timeout_s: float, sweep_timeout_s: float | None) -> float:
    """The confirm window the nodes get. Without --sweep-timeout the sweep's deadline grows by it; an
    explicit --sweep-timeout stays a hard promise, so the window shrinks to what fits in it after one
    node's own timeout (0: no room, the nodes answer from their quick pass as before)."""
    if sweep_timeout_s is None or confirm_s <= 0:
        return confirm_s
    room = sweep_timeout_s - timeout_s - 1.0
    return round(min(confirm_s, room), 1) if room >= 1.0 else 0.0


class _Handler(EventHandler):
    """ClusterShell event handler: buffers each node's output, reports nodes as they finish."""

    def __init__(self, plan: SweepPlan, progress: Progress | None) -> None:
        super().__init__()
        self.plan = plan
        self.progress = progress
        self.out: dict[str, list[bytes]] = {}
        self.size: dict[str, int] = {}
        self.err: dict[str, list[bytes]] = {}
        self.started: dict[str, float] = {}
        self.done: dict[str, NodeOutcome] = {}
        self.confirming: set[str] = set()  # nodes whose collect said its confirm window opened

    def ev_pickup(self, worker: Any, node: str) -> None:
        self.started[node] = time.monotonic()

    def ev_read(self, worker: Any, node: str, sname: str, msg: bytes) -> None:
        if sname == worker.SNAME_STDERR:
            if msg.strip() == CONFIRMING:
                self.confirming.add(node)
                return
            lines = self.err.setdefault(node, [])
            lines.append(msg)
            del lines[:-STDERR_LINES]
            return
        size = self.size.get(node, 0) + len(msg)
        self.size[node] = size
        if size <= MAX_OUTPUT_BYTES:  # past the cap the node is reported as garbled, not kept in memory
            self.out.setdefault(node, []).append(msg)

    def ev_hup(self, worker: Any, node: str, rc: int) -> None:
        self._finish(node, rc=rc, timed_out=False)

    def ev_close(self, worker: Any, timedout: bool) -> None:
        for node in worker.iter_keys_timeout():
            self._finish(str(node), rc=None, timed_out=True)

    def _finish(self, node: str, rc: int | None, timed_out: bool, reason: str | None = None) -> None:
        if node in self.done:
            return
        duration = time.monotonic() - self.started.get(node, time.monotonic())
        outcome = classify(node, rc=rc, timed_out=timed_out, stdout=self.out.pop(node, []),
                           stderr=self.err.pop(node, []), duration_s=duration,
                           plan_timeout_s=self.plan.quick_deadline_s(node, self.confirming),
                           transport=self.plan.transport.kind, too_large=self.size.get(node, 0) > MAX_OUTPUT_BYTES,
                           reason=reason)
        self.done[node] = outcome
        if self.progress is not None:
            self.progress(outcome)


class _Feeder:
    """Starts nodes as others finish, so that only ~fanout clients exist at a time: building one client
    (and its argv) per node up front cost seconds at 100,000 nodes, before the first connect."""

    def __init__(self, task: Any, plan: SweepPlan, handler: _Handler, payload: bytes | None) -> None:
        self.task, self.plan, self.handler, self.payload = task, plan, handler, payload
        self.todo = iter(plan.nodes)
        self.stopped = False

    def more(self, count: int = 1) -> None:
        for _ in range(count):
            node = None if self.stopped else next(self.todo, None)
            if node is None:
                return
            argv = node_argv(self.plan.transport, node, self.plan.inventory, self.plan.budget_s)
            worker = argv_worker({node: argv}, self, self.plan.node_timeout_s)
            self.task.schedule(worker)
            if self.payload is not None:
                worker.write(self.payload)
            worker.set_write_eof()
            if self.plan.transport.confirm_s > 0:  # else the worker's own timeout is --timeout already
                self.task.timer(self.plan.timeout_s, handler=_NodeDeadline(worker, node, self.handler), autoclose=True)

    # The worker's events go to the handler; a closed worker makes room for the next node.
    def __getattr__(self, name: str) -> Any:
        return getattr(self.handler, name)

    def ev_close(self, worker: Any, timedout: bool) -> None:
        self.handler.ev_close(worker, timedout)
        self.more()

    def stop(self) -> None:
        self.stopped = True


class _NodeDeadline(EventHandler):
    """--timeout for one node, as written: at ``timeout_s`` a node still running is cut unless its collect
    said it opened the confirm window (then the worker's own timeout, --timeout + --confirm, holds it).
    A node that never connected, or never spoke, cannot be in a confirm window."""

    def __init__(self, worker: Any, node: str, handler: _Handler) -> None:
        super().__init__()
        self.worker, self.node, self.handler = worker, node, handler

    def ev_timer(self, timer: Any) -> None:
        if self.node in self.handler.done or self.node in self.handler.confirming:
            return
        self.handler._finish(self.node, rc=None, timed_out=True)
        self.worker.abort()  # kills the client's process group (cluster_workers.ArgvClient._close)


def run_sweep(plan: SweepPlan, progress: Progress | None = None) -> list[NodeOutcome]:
    """Collect from every node of the plan; one outcome per node, in node-set order, always on time."""
    from ClusterShell.Task import Task, task_self

    from vllmdiag.sweep.ship import build_zipapp

    handler = _Handler(plan, progress)
    task: Task = task_self()
    task.set_info("fanout", max(1, plan.fanout))
    task.set_default("stdout_msgtree", False)  # we keep output ourselves, capped per node
    task.set_default("stderr_msgtree", False)
    feeder = None
    if plan.tree is not None:
        from vllmdiag.sweep.tree import schedule

        schedule(task, plan, handler).set_write_eof()
    else:
        feeder = _Feeder(task, plan, handler, build_zipapp(plan.transport.ship_py_spy) if plan.transport.ship else None)
    start = time.monotonic()
    # The whole-sweep deadline is an engine timer: it aborts the task from inside its own loop, which
    # kills every client still running (ClusterShell's resume(timeout) leaves the task unusable after).
    task.timer(max(0.01, plan.left_s()), handler=Deadline(task, feeder.stop if feeder else None), autoclose=True)
    if feeder is not None:
        feeder.more(max(1, plan.fanout))
    task.resume()
    elapsed = time.monotonic() - start
    late = f"sweep deadline ({plan.deadline_s:.0f}s) reached before it answered"
    for node in plan.nodes:
        if node in handler.done:
            continue
        if node in handler.started:  # still running at the sweep deadline: what it said so far counts
            handler._finish(node, rc=None, timed_out=True, reason=late)
        else:  # never started (the fanout queue): nothing to classify
            handler.done[node] = NodeOutcome(node, "timeout", late, round(elapsed, 3))
    return [handler.done[n] for n in plan.nodes]
