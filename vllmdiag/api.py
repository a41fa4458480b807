"""Plain-function API behind the CLI: collect, triage, analyze. No printing, no exit codes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllmdiag.context import Context
from vllmdiag.errors import EXIT_HEALTHY, EXIT_INCONCLUSIVE, EXIT_NO_DEPLOYMENT, EXIT_PROBLEM
from vllmdiag.model import Snapshot, SnapshotError, strict_json
from vllmdiag.runtime.options import CollectOptions, as_options
from vllmdiag.runtime.record import Collected, note
from vllmdiag.runtime.runner import DEFAULT_BUDGET_S, collect_snapshot

# What a caller may pass as ``options``: the typed object the doors build, or its dict form (tests, the watcher).
Options = CollectOptions | dict[str, Any] | None

if TYPE_CHECKING:  # the report classes load when a verdict is made, not for a collect
    from vllmdiag.model import NodeOutcome, Report
    from vllmdiag.runtime.run import Run

EXIT_CODES = {"healthy": EXIT_HEALTHY, "starting": EXIT_HEALTHY, "blocked": EXIT_PROBLEM, "degraded": EXIT_PROBLEM,
              "no-deployment": EXIT_NO_DEPLOYMENT, "inconclusive": EXIT_INCONCLUSIVE}
MAX_SNAPSHOT_BYTES = 512 << 20
# Written next to the snapshots by sweep --save; not *.json, so load_snapshots() does not take it for one.
NODES_FILE = "nodes.sweep"


@dataclass
class TriageResult:
    report: Report

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.report.verdict.status, EXIT_INCONCLUSIVE)

    def to_json(self) -> str:
        # Compact on purpose: the C encoder only runs without indent (a TP=8 report is ~200 KB).
        return strict_json.dumps(self.report.to_dict(), separators=(",", ":"), default=str)


def collect(*, probes: list[str] | None = None, options: Options = None,
            budget_s: float = DEFAULT_BUDGET_S, ctx: Context | None = None, hard: bool = True,
            meanwhile: Callable[[], None] | None = None, limits: dict[int, int] | None = None,
            on_result: Callable[[str, dict[str, Any]], None] | None = None) -> Snapshot:
    """One snapshot of this node within ``budget_s`` (which includes any --rates window).

    ``hard``: collect in a child process killed at the budget (vllmdiag/runtime/hardstop.py), so no probe
    can hold the caller past it; False runs in this process (the runner's watchdog only).
    ``meanwhile``: what this process does while the child collects (hard only; see hardstop).
    ``limits``: RLIMIT_* -> value for that child (hard only; see hardstop).
    ``on_result``: sees each probe's data as it arrives (hard only; see hardstop)."""
    ctx = ctx or Context()
    given = as_options(options)
    ctx.options = ctx.options.merged(given)
    enable = given.turned_on()
    if hard:
        from vllmdiag.runtime.hardstop import collect_bounded

        return collect_bounded(ctx, probes=probes, enable=enable, budget_s=budget_s, meanwhile=meanwhile,
                               limits=limits, on_result=on_result)
    return collect_snapshot(ctx, probes=probes, enable=enable, budget_s=budget_s)


DEFAULT_CONFIRM_S = 10.0


def triage(*, pids: list[int] | None = None, probes: list[str] | None = None,
           options: Options = None, budget_s: float = DEFAULT_BUDGET_S,
           ctx: Context | None = None, confirm_s: float = DEFAULT_CONFIRM_S,
           on_confirm: Callable[[float, float], None] | None = None, origin: float | None = None,
           run: Run | None = None) -> TriageResult:
    """The quick pass; a stack resample of the few pictures that would be a hang if they held; and,
    only when work is in flight and nothing moved, the confirm window (``confirm_s``, 0 = off).

    ``run``: the command's time as its door built it (vllmdiag/runtime/run.py); without it, one is made
    from ``budget_s``, ``confirm_s`` and ``origin``. The budget counts from ``origin`` (the CLI passes its
    process's start: interpreter start and imports are part of the promise; default now). The collector
    gets what is left less what analysis keeps (vllmdiag/runtime/deadline.py); with ``origin`` given,
    analysis that would run past the budget + 1 s is cut and the verdict is inconclusive from what was
    collected, saying so. The work is ``TRIAGE_STAGES``, in order; each asks the run whether it fits."""
    from vllmdiag.runtime import second_look
    from vllmdiag.runtime.run import Run

    run = run or Run(budget_s=budget_s, confirm_s=confirm_s, origin=origin)
    opts = as_options(options).merged({"pids": list(pids)}) if pids else as_options(options)
    t = _Triage(run=run, wanted=set(pids) if pids else None, probes=probes, options=opts, ctx=ctx,
                quick_ctx=second_look.fresh_context(ctx), on_confirm=on_confirm)
    run.begin()
    for _name, stage in TRIAGE_STAGES:
        verdict = stage(t)
        if verdict is not None:
            return TriageResult(verdict)
    assert t.report is not None  # the analysis stage made it
    return TriageResult(t.report)


@dataclass
class _Triage:
    """What the stages of one triage share: its run, what was asked, and what they found so far."""

    run: Run
    wanted: set[int] | None
    probes: list[str] | None
    options: CollectOptions
    ctx: Context | None
    quick_ctx: Context | None  # a fresh context on the same roots, for the confirm window's passes
    on_confirm: Callable[[float, float], None] | None
    snap: Snapshot | None = None
    done_at: float = 0.0  # when the quick pass's collector returned
    report: Report | None = None


def _start_up(t: _Triage) -> Report | None:
    """A start before our code ran that took the whole budget: at normal priority (no root, --no-boost)
    a collection now would be blind and late, so the verdict goes out at once, saying why; boosted,
    the run starts late (Run.start_late) and the stages follow at full speed."""
    if not t.run.start_took_it_all():
        return None
    if not t.run.realtime():
        return out_of_time(spent_in_startup(t.options, t.run.budget_s, t.run.startup_s), t.run.budget_s, "start-up")
    t.run.start_late()
    return None


def _quick_pass(t: _Triage) -> Report | None:
    t.snap, t.done_at = quick_pass(probes=t.probes, options=t.options, budget_s=t.run.collector_budget(), ctx=t.ctx)
    return None


def _second_look(t: _Triage) -> Report | None:
    assert t.snap is not None
    look_again(t.snap, probes=t.probes, options=t.options, ctx=t.ctx, done_at=t.done_at, until=t.run.collect_until())
    note(t.snap, command_budget_s=t.run.budget_s, startup_s=round(t.run.startup_s, 3))  # the passes are done
    return None


def _analyze(t: _Triage) -> Report | None:
    from vllmdiag.runtime import deadline

    assert t.snap is not None
    try:
        with deadline.guard(t.run.analysis_cut()):
            from vllmdiag.analysis.bisect import analyze  # loaded while the child collected (warm_analysis)

            t.report = analyze([t.snap], t.wanted)
    except deadline.BudgetSpent:
        return out_of_time(t.snap, t.run.budget_s, "analysis")
    return None


def _confirm_window(t: _Triage) -> Report | None:
    from vllmdiag.runtime import deadline

    assert t.snap is not None and t.report is not None
    if not confirm_if_stalled(t.snap, t.report, confirm_s=t.run.confirm_s, started=t.run.started, probes=t.probes,
                            options=t.options, ctx=t.quick_ctx, on_confirm=t.on_confirm, opening=t.run.window_opened):
        return None
    try:
        with deadline.guard(t.run.window_analysis_cut()):
            from vllmdiag.analysis.bisect import analyze

            t.report = analyze([t.snap], t.wanted)
    except deadline.BudgetSpent:
        return out_of_time(t.snap, max(t.run.budget_s, t.run.confirm_s), "analysis of the confirm window")
    return None


# A triage, in order: each stage returns the verdict to stop with (out of time), or None to go on.
TRIAGE_STAGES: tuple[tuple[str, Callable[[_Triage], Report | None]], ...] = (
    ("start-up", _start_up), ("quick pass", _quick_pass), ("second look", _second_look), ("analysis", _analyze),
    ("confirm window", _confirm_window))


def out_of_time(snap: Snapshot, budget_s: float, phase: str) -> Report:
    """The verdict when the budget ran out before ``phase`` finished: inconclusive, from what was
    collected (the model classes and the sections' builder only: nothing more to import on a starved node;
    the sections carry what the report's files and views draw of the snapshot)."""
    from vllmdiag.analysis.sections import with_sections
    from vllmdiag.model import Report, Verdict

    missing = [f"{name} {res.status}" for name, res in sorted(snap.probes.items()) if res.status not in ("ok", "partial")]
    did = Collected.read(snap)
    prio = did.priority or {}
    why = (f"The {budget_s:g} s budget ran out during the {phase} (the node is starved of CPU: start-up took "
           f"{'?' if did.startup_s is None else did.startup_s} s, collection {snap.duration_s:.1f} s; "
           f"priority {prio.get('policy', 'unknown')})" + (f"; probes not complete: {', '.join(missing)}" if missing else "")
           + ".")
    fix = ("Re-run with a larger --budget (e.g. --budget 30), as root so vllmdiag can take SCHED_FIFO for its short "
           "life (or under `chrt -f 10`), or from outside a CPU-throttled pod (see docs/priority.md, Kubernetes).")
    verdict = Verdict(status="inconclusive", summary="Inconclusive: " + why, evidence=[why], confidence="low",
                      next_steps=[fix])
    return with_sections(Report(verdict=verdict, deployments=[], findings=[], snapshots=[snap]))


def spent_in_startup(options: CollectOptions, budget_s: float, startup: float) -> Snapshot:
    """The snapshot of a triage whose budget ran out before its own code ran: nothing collected."""
    import datetime as _dt
    import socket

    from vllmdiag import __version__
    from vllmdiag.model import ProbeResult
    from vllmdiag.runtime import priority

    # The processes probe stands for all: blind, never "no deployment" (vllmdiag analyze of the saved file).
    blind = ProbeResult("timeout", 0.0, f"not run: the {budget_s:g} s budget was spent in start-up ({startup:.1f} s "
                        f"at {priority.state().get('policy', 'normal')} priority)")
    snap = Snapshot(node=socket.gethostname(), vllmdiag_version=__version__, duration_s=0.0, probes={"processes": blind},
                    collected_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
                    options=options.to_dict())
    note(snap, command_budget_s=budget_s, startup_s=round(startup, 3))
    note(snap, priority=priority.state(), collected="nothing: the budget was spent in start-up")  # in this order, as always
    return snap


def confirm_if_stalled(snap: Snapshot, report: Report, *, confirm_s: float, started: float,
                     probes: list[str] | None = None, options: Options = None, ctx: Context | None = None,
                     on_confirm: Callable[[float, float], None] | None = None,
                     opening: Callable[[], None] | None = None) -> bool:
    """The confirm window (triage's, and ``collect --confirm`` on a swept node): only when ``report``
    says work is in flight and nothing moved; follow-up passes go into ``snap.passes``. True if it opened."""
    from vllmdiag.runtime import second_look

    roots = suspected_roots(report)
    if not (confirm_s > 0 and roots and (probes is None or "stacks" in probes or "rings" in probes or "http" in probes)):
        return False
    from vllmdiag.analysis.contract import keeps_window_open
    from vllmdiag.analysis.views.progress import all_passes, deployment_progress, is_stalled

    def still(s: Snapshot) -> bool:
        # An analyzer's hook may keep it open though rings move (a held grammar compile steps empty batches).
        return any(is_stalled(p) for p in deployment_progress(all_passes(s)) if p.deployment_id in roots.values()) \
            or keeps_window_open(s, set(roots.values()))

    if opening is not None:  # collect on a swept node: say so now, the sweep extends its deadline for it
        opening()
    second_look.confirm_window(snap, sorted(roots), confirm_s, still, collect, as_options(options), ctx, on_confirm,
                               started, probes)
    return True


def collect_confirmed(*, probes: list[str] | None = None, options: Options = None,
                      budget_s: float = DEFAULT_BUDGET_S, confirm_s: float = 0.0,
                      origin: float | None = None, on_window: Callable[[], None] | None = None,
                      run: Run | None = None) -> Snapshot:
    """``vllmdiag collect [--confirm S]``: the node's snapshot, with triage's confirm window when its
    quick pass sees work in flight and nothing moving (a sweep's nodes confirm in parallel, each on its
    own). A healthy node pays one analysis of its own snapshot; a node without the rules (a --ship
    bundle lacking PyYAML) keeps the quick pass and says why. ``run``: as in triage (the door's, else made
    from ``budget_s``, ``confirm_s`` and ``origin``: the budget and the window count from ``origin``)."""
    from vllmdiag.runtime.run import Run

    run = run or Run(budget_s=budget_s, confirm_s=confirm_s, origin=origin)
    startup = run.begin()
    snap = collect_node(probes=probes, options=options, budget_s=run.collector_budget(), until=run.collect_until())
    note(snap, command_budget_s=run.budget_s, startup_s=round(startup, 3))
    if run.confirm_s <= 0:
        return snap
    try:
        from vllmdiag.analysis.bisect import analyze

        pids = as_options(options).pids
        report = analyze([snap], set(pids) if pids else None)
    except (ImportError, OSError, ValueError) as exc:
        note(snap, confirm=f"skipped: {type(exc).__name__}: {exc}")
        return snap
    confirm_if_stalled(snap, report, confirm_s=run.confirm_s, started=run.started, probes=probes, options=options,
                     opening=on_window)
    return snap


def collect_node(*, probes: list[str] | None = None, options: Options = None,
                 budget_s: float = DEFAULT_BUDGET_S, ctx: Context | None = None, until: float | None = None) -> Snapshot:
    """One node's snapshot as triage and ``vllmdiag collect`` take it: the quick pass, then a second
    stack dump of the few processes whose picture would be a hang if it held (costs nothing when
    nothing looks odd). ``until``: the resample must end by then (the command's budget), else it is
    skipped and the snapshot says so."""
    snap, done_at = quick_pass(probes=probes, options=options, budget_s=budget_s, ctx=ctx)
    look_again(snap, probes=probes, options=options, ctx=ctx, done_at=done_at, until=until)
    return snap


def quick_pass(*, probes: list[str] | None, options: Options, budget_s: float,
               ctx: Context | None) -> tuple[Snapshot, float]:
    """The quick pass (analysis warms up in this process meanwhile) and when its collector returned."""
    snap = collect(probes=probes, options=options, budget_s=budget_s, ctx=ctx, meanwhile=warm_analysis,
                   on_result=classify_early())
    return snap, time.monotonic()


def look_again(snap: Snapshot, *, probes: list[str] | None, options: Options, ctx: Context | None,
               done_at: float, until: float | None) -> None:
    """The second look: the stacks of the processes whose picture would be a hang if it held, dumped
    again. The choice of those pids is analysis; a node without it (a --ship bundle lacking the rules)
    keeps the quick pass alone. Skipped, saying so, when ``until`` leaves no room for it."""
    from vllmdiag.runtime import second_look

    quick_ctx = second_look.fresh_context(ctx)
    if probes is not None and "stacks" not in probes:
        return
    from vllmdiag.runtime.hardstop import GRACE_S

    def left() -> float:
        return second_look.PASS_BUDGET_S if until is None else \
            until - time.monotonic() - max(0.0, second_look.SETTLE_S - (time.monotonic() - done_at)) - GRACE_S

    if left() < second_look.MIN_RESAMPLE_S:
        # No room for a second look, so no choosing one either: that is analysis, and on a starved node
        # (--no-boost under load) it took seconds past the budget before the verdict's own guard began.
        note(snap, resample=f"skipped: {max(0.0, left()):.1f} s of the budget left for a second look")
        return
    try:
        from vllmdiag.analysis.contract import second_look_pids

        again = second_look_pids(snap)
    except (ImportError, OSError, ValueError) as exc:  # rules missing or unreadable: say so, keep the pass
        note(snap, resample=f"skipped: {type(exc).__name__}: {exc}")
        return
    if again:
        room = left()
        if room < second_look.MIN_RESAMPLE_S:
            note(snap, resample=f"skipped: {max(0.0, room):.1f} s of the budget left for it")
            return
        second_look.resample(snap, again, collect, as_options(options), quick_ctx, time.monotonic() - done_at,
                             budget_s=min(second_look.PASS_BUDGET_S, room))


def warm_analysis() -> None:
    """Import analysis and parse the stack rules: the parent does it while its child collects (a
    --ship bundle without PyYAML fails here quietly and says why later, where it always did)."""
    from vllmdiag.analysis.bisect import analyze  # noqa: F401
    from vllmdiag.analysis.contract import analyzers, second_look_pids  # noqa: F401
    from vllmdiag.analysis.views.stack_match import compile_globs, load_rules

    load_rules()
    compile_globs()
    analyzers()  # the analyzer modules, found by folder: ~20 ms of imports off the path after the collection


def classify_early() -> Callable[[str, dict[str, Any]], None]:
    """The stacks classified the moment they arrive from the collector, while its window is still
    open: the resample choice and the analysis after it find the classes memoized."""
    processes: dict[str, Any] = {}

    def on_result(name: str, data: dict[str, Any]) -> None:
        if name == "processes":
            processes.update(data)
        elif name == "stacks" and processes:
            from vllmdiag.analysis.views.stack_match import classify_dumps

            classify_dumps(data, processes)

    return on_result


def suspected_roots(report: Report) -> dict[int, str]:
    """Root pid -> deployment id of deployments with work in flight, nothing moved, and no blocking
    finding already: only those need the confirm window (the healthy path never opens it)."""
    out = {}
    for dep in report.deployments:
        mine = [f for f in report.findings if f.deployment == dep.id]
        if any(f.blocking for f in mine):
            continue
        if any(f.needs_confirm is True for f in mine):
            out[dep.root_pid] = dep.id
    return out


def analyze_files(paths: list[Path], pids: list[int] | None = None) -> TriageResult:
    """The verdict from saved files. One report file (a ``--json`` output) is drawn again as it was
    written; snapshots, directories, several files or ``--pid`` are analysed (again)."""
    from vllmdiag.model.report import Report, is_drawable, is_report

    snaps: list[Snapshot] = []
    if len(paths) == 1 and not paths[0].is_dir():
        raw = read_json(paths[0])
        if not pids and is_report(raw) and is_drawable(raw):
            from vllmdiag.analysis.sections import with_sections  # not in the JSON: drawn again from it

            return TriageResult(with_sections(Report.from_dict(raw, str(paths[0]))))
        snaps = snapshots_from_json(raw, str(paths[0]))
    else:
        for path in paths:
            snaps.extend(load_snapshots(path))
    if not snaps:
        raise SnapshotError("no snapshot found in " + ", ".join(str(p) for p in paths))
    fleet = analyze_saved(paths, snaps, pids)  # several nodes (e.g. a sweep --save dir): the fleet verdict
    if fleet is not None:
        return fleet
    from vllmdiag.analysis.bisect import analyze

    return TriageResult(analyze(snaps, set(pids) if pids else None))


def analyze_saved(paths: list[Path], snaps: list[Snapshot], pids: list[int] | None = None) -> TriageResult | None:
    """The fleet verdict for `vllmdiag analyze` when its snapshots come from several nodes, else None;
    the node statuses a ``sweep --save`` wrote next to them (unreachable nodes) are read back too."""
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet, is_fleet

    if pids or not is_fleet(snaps):
        return None
    outcomes: list[NodeOutcome] = []
    for path in paths:
        status_file = path / NODES_FILE if path.is_dir() else None
        if status_file is not None and status_file.is_file():
            outcomes += _read_nodes(status_file)
    return TriageResult(analyze_fleet(snaps, outcomes or None))


def _read_nodes(path: Path) -> list[NodeOutcome]:
    from vllmdiag.files.infile import InputError, read_input
    from vllmdiag.model import NodeOutcome

    try:
        raw = json.loads(read_input(path, "node list", 64 << 20))
    except (InputError, json.JSONDecodeError, RecursionError) as exc:
        raise SnapshotError(f"{path}: cannot read the node list ({exc})") from None
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise SnapshotError(f"{path}: expected a JSON list of node entries")
    return [NodeOutcome.from_dict(r) for r in raw]


def load_snapshots(path: Path) -> list[Snapshot]:
    """A snapshot file, a triage/analyze JSON output, or a directory of those (from sweep --save)."""
    if path.is_dir():
        out: list[Snapshot] = []
        for child in sorted(path.glob("*.json")):
            out.extend(load_snapshots(child))
        return out
    return snapshots_from_json(read_json(path), str(path))


def read_json(path: Path) -> Any:
    from vllmdiag.files.infile import InputError, read_input

    try:
        # Regular files only, never blocking (a FIFO), size capped (/dev/zero): issue 15, item 10.
        text = read_input(path, "snapshot", MAX_SNAPSHOT_BYTES)
    except InputError as exc:
        raise SnapshotError(str(exc)) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SnapshotError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise SnapshotError(f"{path}: JSON nested too deeply") from None
    return raw


def snapshots_from_json(raw: Any, where: str) -> list[Snapshot]:
    """Every snapshot version ever written, bare or inside a report, one or a list of them."""
    if isinstance(raw, dict) and "snapshot" in raw and "verdict" in raw:
        return [Snapshot.from_dict(raw["snapshot"], f"{where}: snapshot")]
    if isinstance(raw, dict) and "snapshots" in raw:
        items = raw["snapshots"]
        if not isinstance(items, list):
            raise SnapshotError(f"{where}: snapshots must be a list")
        return [Snapshot.from_dict(s, f"{where}: snapshots[{i}]") for i, s in enumerate(items)]
    if isinstance(raw, list):
        return [Snapshot.from_dict(s, f"{where}[{i}]") for i, s in enumerate(raw)]
    return [Snapshot.from_dict(raw, where)]
