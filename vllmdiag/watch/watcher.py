"""The watch loop: cheap passes, progress per deployment, one triage per stall, files and hooks."""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any, TextIO

from vllmdiag.analysis.views.progress import deployment_progress
from vllmdiag.files.outfile import OutputError
from vllmdiag.model import Snapshot
from vllmdiag.watch import hooks
from vllmdiag.watch.exporter import Sample, render
from vllmdiag.watch.health import GONE_GRACE_S, SAVE_GRACE_S, Answer, View, livez, readyz
from vllmdiag.watch.history import default_out_dir  # noqa: F401 - `watch --out`'s default, one place
from vllmdiag.watch.metrics import watcher_samples  # not at the first scrape: no import in a thread at a fork
from vllmdiag.watch.state import PAUSED_CODE, Tracked, Tracker
from vllmdiag.watch.store import Saved, Store

# Only what is cheap: /proc states and CPU times, /dev/shm ring flags, the API server's /metrics.
# No py-spy, no NVML, no ZMTP: those are for the triage a stall opens.
CHEAP_PROBES = ["processes", "shm", "rings", "sockets", "http"]
PASS_BUDGET_S = 4.0
# Each pass runs in a forked child killed at its budget (vllmdiag/runtime/hardstop.py, as triage's collection):
# a hostile /metrics or a /proc read stuck in the kernel ends that pass, never the watcher. Its
# memory, CPU seconds and fds are bounded too (the watcher itself stays ~40 MB, 1-2 threads).
PASS_MEMORY = 768 << 20  # address space over the watcher's own (a pass needs a few MB)
PASS_NOFILE = 4096
LOCK_WAIT_S = 0.1  # the exporter's wait for the watcher's lock before it answers from the last copy


@dataclass
class WatchConfig:
    out_dir: Path
    interval_s: float = 5.0
    confirm_s: float = 10.0
    keep: int = 50
    max_bytes: int = 256 << 20
    report_suffix: str = ".html"
    on_stall: list[str] | None = None
    hook_timeout_s: float = 30.0
    webhook: str | None = None
    webhook_timeout_s: float = 5.0
    budget_s: float = 8.0
    pass_budget_s: float = PASS_BUDGET_S  # each cheap pass's collection (its child is killed after it)
    node: str | None = None
    # Only deployments whose root process has all these environment variables (of those the
    # processes probe keeps: VLLM_*, NCCL_*, CUDA_VISIBLE_DEVICES, ...), e.g. two on one node.
    select: dict[str, str] = field(default_factory=dict)
    max_passes: int | None = None  # for tests and the bench; None: until SIGTERM/SIGINT
    gone_grace_s: float = GONE_GRACE_S  # /livez: a deployment gone this long is not a restart in progress
    save_grace_s: float = SAVE_GRACE_S  # /livez: fail this long after a confirmed stall even if unsaved
    textfile: Path | None = None  # a node_exporter textfile rewritten after every pass
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)


class Watcher:
    def __init__(self, cfg: WatchConfig, stop: threading.Event | None = None) -> None:
        self.cfg, self.stop = cfg, stop or threading.Event()
        self.tracker = Tracker(time.monotonic())
        self.store = Store(cfg.out_dir, cfg.keep, cfg.max_bytes, cfg.report_suffix)
        self.prev: tuple[Snapshot, float] | None = None
        self.node = cfg.node or ""
        self.passes = self.triages = self.errors = 0
        self.pass_s = 0.0
        self._lock = threading.Lock()
        self._last_blind = ""
        self._said: dict[str, str] = {}
        self._last_view: View | None = None

    # ---- one pass ---------------------------------------------------------------------------
    def step(self) -> None:
        from vllmdiag.api import collect

        start = time.monotonic()
        options: dict[str, Any] = {"cheap": True, **({"node": self.cfg.node} if self.cfg.node else {})}
        snap = collect(probes=CHEAP_PROBES, options=options, budget_s=self.cfg.pass_budget_s, hard=True,
                       limits=pass_limits(self.cfg.pass_budget_s))
        now = time.monotonic()
        self._blind(snap)
        api: dict[str, bool] = {}
        clients: dict[str, frozenset[str]] = {}
        seen, blind = watched(snap, self.cfg.select, api, clients)
        unlisted = processes_unread(snap)
        if unlisted:
            # The pass could not list processes (its child killed at the budget on a saturated node): what
            # it did not see is not gone. Each tracked deployment stays, unknown for this pass, so /readyz
            # does not take a serving replica out of rotation and no restart reads as a departure.
            for key, t in list(self.tracker.deps.items()):
                if key not in seen:
                    seen[key] = (t.deployment_id, t.root_pid)
                    blind[t.deployment_id] = unlisted
        within = {p.deployment_id: p for p in deployment_progress([snap])}
        across = {p.deployment_id: p for p in deployment_progress([self.prev[0], snap])} if self.prev else {}
        with self._lock:
            self.node, self.pass_s, self.passes = snap.node, now - start, self.passes + 1
            events = self.tracker.observe(seen, within, across, now, self.prev[1] if self.prev else None, blind,
                                          api, clients)
        self.prev = (snap, now)
        self._textfile()
        if events:
            self._state_file()
        for ev in events:
            if ev.kind == "suspect":
                self._triage(ev.tracked)
            elif ev.kind == "unknown":
                self._note(f"unknown {ev.tracked.deployment_id} (root pid {ev.tracked.root_pid}): cannot tell whether "
                           f"it moves, stalls or idles: {ev.tracked.blind}")
            else:
                self._note(f"{ev.kind} {ev.tracked.deployment_id} (root pid {ev.tracked.root_pid})")

    def _blind(self, snap: Snapshot) -> None:
        """Say once (and again when it changes) that passes do not see everything: a probe that
        times out on a loaded node, or fds we may not read, must not look like a quiet node."""
        bad = "; ".join(f"{name} {res.status}: {res.reason}" for name, res in sorted(snap.probes.items())
                        if res.status in ("error", "timeout", "partial") or (name == "processes" and res.status != "ok"))
        if bad != self._last_blind:
            self._note(f"cheap pass incomplete: {bad}" if bad else "cheap passes complete again")
            self._last_blind = bad

    def _triage(self, t: Tracked) -> None:
        from vllmdiag.api import triage

        options: dict[str, Any] = {"node": self.cfg.node} if self.cfg.node else {}
        result = triage(pids=[t.root_pid], options=options, budget_s=self.cfg.budget_s, confirm_s=self.cfg.confirm_s)
        report = result.report.to_dict()
        verdict = deployment_verdict(report, t.root_pid)
        paused = engine_paused(report, t.deployment_id)
        with self._lock:
            self.triages += 1
            stall = self.tracker.confirmed(t, verdict, time.monotonic(), time.time(), paused)
        if paused:
            self._note(f"paused {t.deployment_id}: the engine waits for an instruction (fault tolerance); not a stall")
            return
        if not stall:
            self._note(f"suspicion cleared {t.deployment_id}: it moved while the triage looked")
            return
        snaps = result.report.snapshots
        payload = snaps[0].to_dict() if len(snaps) == 1 else {"snapshots": [s.to_dict() for s in snaps]}
        try:
            saved: Saved | None = self.store.save(t.deployment_id, payload, result.report)
        except (OSError, OutputError) as exc:  # a full disk, a directory where a file should be
            saved = None
            self._note(f"could not save the snapshot of {t.deployment_id} in {self.cfg.out_dir}: {exc}")
        if saved is not None:
            with self._lock:
                self.tracker.saved(t, time.monotonic(), str(saved.snapshot))
        self._state_file()
        self.cfg.out.write(stall_line(t, verdict, saved) + "\n")
        self.cfg.out.flush()
        if saved is not None:
            self._hooks(t, verdict, saved, report)

    def _hooks(self, t: Tracked, verdict: dict[str, Any], saved: Saved, report: dict[str, Any]) -> None:
        culprit = (verdict.get("culprits") or [{}])[0]
        if self.cfg.on_stall:
            env = {"VLLMDIAG_WATCH_SNAPSHOT": str(saved.snapshot), "VLLMDIAG_WATCH_REPORT": str(saved.report or ""),
                   "VLLMDIAG_WATCH_DEPLOYMENT": t.deployment_id, "VLLMDIAG_WATCH_STATUS": str(verdict.get("status")),
                   "VLLMDIAG_WATCH_LAYER": str(verdict.get("layer") or ""),
                   "VLLMDIAG_WATCH_CULPRIT_PID": str(culprit.get("pid") or "")}
            how = hooks.run_command(self.cfg.on_stall, str(saved.snapshot), env, self.cfg.hook_timeout_s, self.stop)
            self._note(f"--on-stall for {t.deployment_id}: {how}")
        if self.cfg.webhook:
            payload = {"event": "stall", "node": self.node, "deployment": t.deployment_id, "at": _utc(),
                       "snapshot_path": str(saved.snapshot), "report_path": str(saved.report or ""),
                       "verdict": verdict, "result": report}
            how = hooks.post_json(self.cfg.webhook, payload, self.cfg.webhook_timeout_s)
            self._note(f"--webhook for {t.deployment_id}: {how}")

    def _note(self, text: str) -> None:
        self.cfg.err.write(f"{_utc()} vllmdiag watch: {clean(text)}\n")
        self.cfg.err.flush()

    # ---- the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        self.store.prepare()  # a usage error (exit 2) before the first pass when --out is not usable
        self._note(f"watching {self.cfg.node or 'this node'} every {self.cfg.interval_s:g} s "
                   f"(confirm {self.cfg.confirm_s:g} s), saving stalls to {self.cfg.out_dir}")
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                self.step()
            except Exception as exc:  # a daemon outlives one bad pass; the line says what broke
                self.errors += 1
                self._note(f"pass failed ({type(exc).__name__}: {exc}); next pass in {self.cfg.interval_s:g} s")
            if self.cfg.max_passes is not None and self.passes >= self.cfg.max_passes:
                break
            self.stop.wait(max(0.0, began + self.cfg.interval_s - time.monotonic()))
        self._note("stopped")
        self.store.close()
        return 0

    # ---- the exporter's view -----------------------------------------------------------------
    def view(self) -> View:
        """The state /livez and /readyz read, copied under the lock (held only for assignments). If the
        main thread holds it longer (starved on a saturated node while it held it), the last copy answers,
        at the present time: a kubelet's probe never waits for a pass."""
        if not self._lock.acquire(timeout=LOCK_WAIT_S):
            last = self._last_view
            if last is not None:
                return dc_replace(last, now=time.monotonic(), wall=time.time())
            self._lock.acquire()  # before the first copy there is nothing else to answer from
        try:
            tr = self.tracker
            self._last_view = View([dc_replace(t) for t in tr.deps.values()], tr.passes, tr.last_seen, tr.started,
                                   dict(tr.gone), time.monotonic(), time.time(), self.cfg.gone_grace_s,
                                   self.cfg.save_grace_s)
            return self._last_view
        finally:
            self._lock.release()

    def routes(self) -> dict[str, Any]:
        def route(judge: Any) -> Any:
            def answer(deployment: str | None) -> tuple[int, str]:
                a: Answer = judge(self.view(), deployment)
                return a.code, a.line
            return answer
        return {"/livez": route(livez), "/readyz": route(readyz)}

    def _textfile(self) -> None:
        """node_exporter's textfile collector: the /metrics text, renamed into place after each pass."""
        if self.cfg.textfile is None:
            return
        from vllmdiag.watch.textfile import write_textfile

        try:
            write_textfile(self.cfg.textfile, render(self.samples()))
        except (OSError, OutputError) as exc:
            self._note_once("textfile", str(exc) if isinstance(exc, OutputError) else f"--textfile {self.cfg.textfile}: {exc}")
        else:
            self._note_once("textfile", "")

    def _state_file(self) -> None:
        """What `triage` reads on this node (vllmdiag.watch.history): the last stall of each deployment."""
        from vllmdiag.watch.history import state_document

        with self._lock:
            doc = state_document(self.node, [*self.tracker.deps.values(), *self.tracker.past], time.monotonic(),
                                 time.time())
        try:
            self.store.write_state(doc)
        except (OSError, OutputError) as exc:
            self._note_once("state", f"could not write the state file in {self.cfg.out_dir}: {exc}")
        else:
            self._note_once("state", "")

    def _note_once(self, what: str, text: str) -> None:
        """A failure said once (and its end), not every pass."""
        if self._said.get(what, "") != text:
            if text or self._said.get(what):
                self._note(text or f"{what} written again")
            self._said[what] = text

    def samples(self) -> list[Sample]:
        with self._lock:
            return watcher_samples(self.node, list(self.tracker.deps.values()),
                                   {"passes": self.passes, "triages": self.triages, "errors": self.errors,
                                    "pass_s": self.pass_s, "stuck": stuck_probe_threads()})


def pass_limits(budget_s: float) -> dict[int, int]:
    """RLIMITs of a pass's child: CPU seconds a little over its budget (SIGXCPU ends a runaway loop even
    when the parent's kill comes later), address space PASS_MEMORY over the watcher's, fds PASS_NOFILE."""
    import math
    import resource

    try:
        with open("/proc/self/statm", "rb") as fh:
            own = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        own = 1 << 30
    return {resource.RLIMIT_CPU: math.ceil(budget_s) + 2, resource.RLIMIT_AS: own + PASS_MEMORY,
            resource.RLIMIT_NOFILE: PASS_NOFILE}


def processes_unread(snap: Snapshot) -> str:
    """Why this pass has no process list (the processes probe timed out or failed), or "" when it has one.
    A partial list (a process that vanished while read) is a list: what it lacks is gone."""
    res = snap.probes.get("processes")
    if res is not None and res.status not in ("timeout", "error"):
        return ""
    why = f"{res.status}: {res.reason}" if res is not None else "not run"
    return f"the processes probe could not list processes ({why}); the next pass looks again"


def stuck_probe_threads() -> int:
    """Probe threads still alive in this process: none since every pass runs in a killable child
    (a forked child per pass costs ~30 ms CPU more, the price of a watcher no probe can take along);
    kept as a gauge, since a stuck thread here would be a bug."""
    return sum(1 for t in threading.enumerate() if t.name.startswith("probe-") and t.is_alive())


def check_select_key(key: str) -> str | None:
    """Why ``--select KEY=...`` could never match, or None: the processes probe keeps only some
    environment variables (VLLM_*, NCCL_*, CUDA_VISIBLE_DEVICES, ...) and redacts secrets, so any
    other key silently watched nothing (issue 26)."""
    from vllmdiag.probes.processes import ENV_KEEP
    from vllmdiag.redact import redact_env

    if not key.startswith(ENV_KEEP):
        return (f"{key} is not among the environment variables vllmdiag reads (those starting with "
                f"{', '.join(ENV_KEEP)})")
    if redact_env({key: "x"}).get(key) != "x":
        return f"{key} holds a secret: its value is redacted, never compared"
    return None


def deployment_keys(snap: Snapshot, select: dict[str, str] | None = None) -> dict[str, tuple[str, int]]:
    """key -> (deployment id, root pid); the key adds the root's start time, so a restart is new."""
    return watched(snap, select)[0]


def watched(snap: Snapshot, select: dict[str, str] | None = None, api: dict[str, bool] | None = None,
            clients: dict[str, frozenset[str]] | None = None) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
    """The deployments to watch (as ``deployment_keys``), and for those the pass could not see
    move: deployment id -> what it could not read and the fix (they are ``unknown``, never idle).
    ``api``, when given, is filled with deployment id -> its API server answered /metrics (/readyz);
    ``clients`` with deployment id -> the client connections open on its HTTP port (requests in flight)."""
    from vllmdiag.analysis.views.coverage import progress_blind
    from vllmdiag.analysis.views.deployments import find_deployments
    from vllmdiag.analysis.views.progress import metric_samples

    out: dict[str, tuple[str, int]] = {}
    blind: dict[str, str] = {}
    for dep in find_deployments(snap):
        root = dep.by_pid(dep.root_pid) or {}
        env = root.get("environ") or {}
        if any(env.get(k) != v for k, v in (select or {}).items()):
            continue
        out[f"{dep.id}@{root.get('start_time')}"] = (dep.id, dep.root_pid)
        if api is not None:
            api[dep.id] = bool(metric_samples(snap, dep)) or listening_elsewhere(snap, dep.pids)
        if clients is not None:
            clients[dep.id] = http_clients(snap, dep.pids)
        why = progress_blind(snap, dep.pids)
        if why:
            blind[dep.id] = why
    return out, blind


def http_clients(snap: Snapshot, pids: set[int]) -> frozenset[str]:
    """Client connections (local>remote) established on the deployment's API HTTP ports, from the
    sockets probe's table (cheap: no request is sent)."""
    ports = {s.get("port") for s in snap.data("http").get("servers") or []
             if isinstance(s, dict) and set(s.get("pids") or []) & pids}
    out = set()
    for t in snap.data("sockets").get("tcp") or []:
        if not isinstance(t, dict) or t.get("state") != "ESTABLISHED" or not set(t.get("pids") or []) & pids:
            continue
        local = str(t.get("local", ""))
        if local.rpartition(":")[2].isdigit() and int(local.rpartition(":")[2]) in ports:
            out.add(f"{local}>{t.get('remote')}")
    return frozenset(out)


def listening_elsewhere(snap: Snapshot, pids: set[int]) -> bool:
    """The API server listens in another network namespace (a pod's, seen from a DaemonSet): a cheap
    pass asks no /metrics there, and vLLM listens on its HTTP port only once the engine is ready
    (vllm-internals 3.3), so the listener is what says the API is up."""
    servers = snap.data("http").get("servers") or []
    return any(isinstance(s, dict) and not s.get("same_netns", True) and set(s.get("pids") or []) & pids
               for s in servers)


def engine_paused(report: dict[str, Any], deployment_id: str) -> bool:
    """A triage found the engine paused by vLLM's fault tolerance (finding PAUSED_CODE): not a hang."""
    return any(isinstance(f, dict) and f.get("code") == PAUSED_CODE and f.get("deployment") in (None, deployment_id)
               for f in report.get("findings") or [])


def deployment_verdict(report: dict[str, Any], root_pid: int) -> dict[str, Any]:
    for dep in report.get("deployments", []):
        if dep.get("root_pid") == root_pid:
            return dict(dep.get("verdict") or {})
    return dict(report.get("verdict") or {})  # it vanished during the triage: the node's verdict


def stall_line(t: Tracked, verdict: dict[str, Any], saved: Saved | None) -> str:
    culprit = (verdict.get("culprits") or [{}])[0]
    who = "-"
    if culprit:
        who = f"{culprit.get('title') or culprit.get('role')} pid={culprit.get('pid')} rank={culprit.get('rank')}"
    where = str(saved.snapshot) if saved else "(not saved)"
    return clean(f"{_utc()} STALL {t.deployment_id} {verdict.get('status')} layer={verdict.get('layer')} "
                 f"culprit={who} snapshot={where}" + (f" report={saved.report}" if saved and saved.report else ""))


def clean(text: str) -> str:
    """One printable line: titles and node names come from the target and may carry escapes."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:1000]


def _utc() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
