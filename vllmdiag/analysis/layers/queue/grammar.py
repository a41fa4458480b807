"""Queue layer, structured output: a grammar that never finishes compiling (or filling) holds requests (pure).

vLLM 0.33 compiles a request's grammar off the busy loop: the input thread's ``preprocess_add_request``
calls ``StructuredOutputManager.grammar_init`` (vllm/v1/structured_output/__init__.py), which submits
``_create_grammar`` -> ``<Backend>.compile_grammar`` to a ThreadPoolExecutor ("ThreadPoolExecutor-N_M"
in a py-spy dump). Until the Future is done the request stays ``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR``
(Scheduler._handle_blocked_waiting_request skips it). JSON, grammar and structural-tag compiles have no
timeout (#54003; regexes do, utils.compile_regex_with_timeout) and a cancelled request does not stop
the pool thread (#14151): one thread at 100 % CPU for hours while /health says 200.

What a stalled grammar does NOT stop: the busy loop. ``EngineCore.step`` calls ``execute_model`` on
every pass while any request exists, scheduled or not (core.py ``step``; ``_process_engine_step`` only
sleeps 1 ms between empty steps), so at TP>1 the rpc ring keeps moving with empty batches and the
progress rules see "moved". Only the request counters and the grammar thread's own frame say
whether anything got done, so this module judges those. The per-step bitmask
(``Scheduler.get_grammar_bitmask`` -> ``grammar_bitmask`` -> ``fill_bitmask``) runs on the busy loop
itself; a fill held there stops every request (class ``grammar_bitmask``).

A compile seen once is info (a schema compiles in ms to seconds); one held across the looks with
requests waiting and no counter moving is a warning until it held ``HELD_S``, then a block.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment, role_of
from vllmdiag.analysis.views.grammar_looks import GrammarLook, engine_looks, in_grammar
from vllmdiag.analysis.views.progress import COUNTERS, HELD_S, all_passes, deployment_progress, metric_samples
from vllmdiag.model import Finding, Snapshot
from vllmdiag.vocab.stack_classes import GRAMMAR_BITMASK

LAYER = "queue"
CODES = ("queue.grammar_stuck",)


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    passes = all_passes(snapshot)
    out: list[Finding] = []
    for dep in deployments:
        seen = [(eng, looks) for eng in dep.engines if (looks := engine_looks(passes, eng["pid"], role_of(eng)))
                and looks[0]]
        if not seen:
            continue  # the common case: no grammar work, no progress to compute (fleet analysis time)
        counts, moved = request_state(passes, dep)
        (p,) = deployment_progress(passes, [dep])
        out += [_judge(snapshot, dep, eng, looks, counts, moved, p.window_s) for eng, looks in seen]
    return out


def _judge(snap: Snapshot, dep: Deployment, eng: dict[str, Any], looks: list[list[GrammarLook]],
           counts: tuple[float, float] | None, moved: bool, window: float) -> Finding:
    first = looks[0][0]
    held = held_thread(looks)
    g = held or first
    # A compile holds the requests WAITING for it; a bitmask fill holds the RUNNING batch it masks.
    waiting = None if counts is None else counts[0] + (counts[1] if g.cls.name == GRAMMAR_BITMASK else 0.0)
    what = f"{g.cls.name.replace('_', ' ')} on thread {g.thread}" + (f" ({g.backend})" if g.backend else "")
    base = {"thread": g.thread, "class": g.cls.name, "backend": g.backend, "frame": g.frame, "where": g.cls.where,
            "key_frames": g.cls.key_frames, "looks": len(looks), "held": held is not None, "window_s": window,
            "requests_waiting": waiting, "counters_moved": moved}
    stuck = held is not None and len(looks) > 1 and not moved and (waiting or 0) > 0
    if stuck and window >= HELD_S:
        msg = (f"EngineCore (pid {eng['pid']}) is stuck in {what} at {g.frame}: the same frame held over "
               f"{window:.1f} s ({len(looks)} looks) while {waiting:.0f} request(s) wait on it and no token or "
               "request counter moved. " + ("The busy loop cannot finish its step while it fills the token mask."
                                            if g.cls.name == GRAMMAR_BITMASK else "Requests whose grammar is not ready "
                                            "stay WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR."))
        return finding("queue.grammar_stuck", LAYER, "critical", snap, dep, msg, [eng["pid"]], base,
                       [culprit(snap, eng, f"grammar thread {g.thread} stuck in {g.frame}"
                                + (f" ({g.backend})" if g.backend else ""))])
    if stuck:
        msg = (f"EngineCore (pid {eng['pid']}) holds {what} at {g.frame} over {window:.1f} s while {waiting:.0f} "
               f"request(s) wait and nothing was produced: suspected grammar stall (a block after {HELD_S:.0f} s; "
               "triage --confirm S).")
        return finding("queue.grammar_stuck", LAYER, "warning", snap, dep, msg, [eng["pid"]],
                       {**base, "needs_confirm": True}, [culprit(snap, eng, f"grammar thread {g.thread} in {g.frame}")])
    why = ("seen once" if len(looks) < 2 else "it moved between looks" if held is None else
           "requests still move" if moved else "no request waits on it" if waiting == 0 else
           "no /metrics to say requests wait")
    msg = f"EngineCore (pid {eng['pid']}) is in {what} at {g.frame} ({why}): normal while a schema compiles."
    return finding("queue.grammar_stuck", LAYER, "info", snap, dep, msg, [], base, [])


def held_thread(looks: list[list[GrammarLook]]) -> GrammarLook | None:
    """A grammar thread at the same stop point in every look (the pool thread's name is stable)."""
    for g in sorted(looks[0], key=lambda g: g.cls.name != GRAMMAR_BITMASK):  # a held fill stops every request
        if all(any(o.thread == g.thread and o.signature == g.signature for o in look) for look in looks[1:]):
            return g
    return None


def request_state(passes: list[Snapshot], dep: Deployment) -> tuple[tuple[float, float] | None, bool]:
    """((waiting, running) at the last /metrics sample, None without /metrics; did any counter move)."""
    samples = [m for s in passes for m in metric_samples(s, dep)]
    if not samples:
        return None, False
    first, last = samples[0], samples[-1]
    moved = any(isinstance(first.get(k), (int, float)) and isinstance(last.get(k), (int, float))
                and first[k] != last[k] for k in COUNTERS)
    waiting, running = last.get("waiting"), last.get("running")
    if not isinstance(waiting, (int, float)):
        return None, moved
    return (float(waiting), float(running) if isinstance(running, (int, float)) else 0.0), moved


def stalled_engines(snapshot: Snapshot, deployment_ids: set[str] | None = None) -> bool:
    """The confirm window's "look again" test: a grammar thread held, requests wait, no counter moved.
    Empty steps move the rings meanwhile, so the progress rules alone would close the window at once."""
    return _held(Facts.of(snapshot), deployment_ids)


def _held(facts: Facts, deployment_ids: set[str] | None) -> bool:
    deps = [d for d in facts.all_deployments if deployment_ids is None or d.id in deployment_ids]
    return any(f.severity != "info" for f in analyze(facts.narrowed(deps)))


def second_look_pids(facts: Facts) -> list[int]:
    """The analyzer contract's second-look hook (analysis/contract.py): EngineCores with a grammar thread at
    work, as a second look tells a compile from a stall."""
    return [e["pid"] for dep in facts.deployments for e in dep.engines if in_grammar(facts.snapshot, e)]


def keeps_window_open(facts: Facts, deployment_ids: set[str]) -> bool:
    """The analyzer contract's confirm-window hook (analysis/contract.py)."""
    return _held(facts, deployment_ids)
