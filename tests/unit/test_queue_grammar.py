"""Structured-output stalls (real-hang-patterns row 16): the grammar stack classes on vLLM 0.33's real frames,
and queue.grammar_stuck on the real TP=4 snapshot (tests/data/vllm-real) with a grammar pool thread added.

Frames and line numbers are vLLM 0.33.0's (vllm/v1/structured_output/__init__.py, backend_*.py,
core/sched/scheduler.py, engine/core.py) and xgrammar's (compiler.py:205, as vLLM #47312's traceback shows it),
in py-spy's order, innermost first. The live cases (real processes, real py-spy) are the accuracy matrix's
grammar-stuck and grammar-load rows.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

from vllmdiag.analysis.bisect import analyze
from vllmdiag.analysis.layers.queue import grammar as queue_grammar
from vllmdiag.analysis.views.grammar_looks import grammar_threads
from vllmdiag.analysis.views.stack_match import classify_threads
from vllmdiag.model import Snapshot
from vllmdiag.vocab.stack_classes import ENGINE_YIELD, EXECUTING, GRAMMAR_BITMASK, GRAMMAR_COMPILE, IDLE

SO = "vllm/v1/structured_output/"
POOL_TAIL = [["_WorkItem.run", "concurrent/futures/thread.py", 58], ["_worker", "concurrent/futures/thread.py", 83],
             ["Thread.run", "threading.py", 982], ["Thread._bootstrap_inner", "threading.py", 1045],
             ["Thread._bootstrap", "threading.py", 1002]]
XGRAMMAR_COMPILE = [["GrammarCompiler.compile_json_schema", "xgrammar/compiler.py", 205],
                    ["XgrammarBackend.compile_grammar", SO + "backend_xgrammar.py", 146],
                    ["StructuredOutputManager._create_grammar", SO + "__init__.py", 221], *POOL_TAIL]
GUIDANCE_COMPILE = [["GuidanceBackend.compile_grammar", SO + "backend_guidance.py", 193],
                    ["StructuredOutputManager._create_grammar", SO + "__init__.py", 221], *POOL_TAIL]
POOL_IDLE = [["Queue.get", "queue.py", 171], ["_worker", "concurrent/futures/thread.py", 90], *POOL_TAIL[2:]]
BUSY_LOOP = [["EngineCoreProc._process_engine_step", "vllm/v1/engine/core.py", 1694],
             ["EngineCoreProc.run_busy_loop", "vllm/v1/engine/core.py", 1629]]
BITMASK = [["XgrammarGrammar.fill_bitmask", SO + "backend_xgrammar.py", 316],
           ["StructuredOutputManager._fill_bitmasks", SO + "__init__.py", 242],
           ["StructuredOutputManager.grammar_bitmask", SO + "__init__.py", 484],
           ["Scheduler.get_grammar_bitmask", "vllm/v1/core/sched/scheduler.py", 2245],
           ["EngineCoreProc.step", "vllm/v1/engine/core.py", 679], *BUSY_LOOP]
UNIPROC_STEP = [["GPUModelRunner.execute_model", "vllm/v1/worker/gpu_model_runner.py", 3400],
                ["Worker.execute_model", "vllm/v1/worker/gpu_worker.py", 700],
                ["UniProcExecutor.collective_rpc", "vllm/v1/executor/uniproc_executor.py", 90],
                ["EngineCoreProc.step", "vllm/v1/engine/core.py", 678], *BUSY_LOOP]
POOL = "ThreadPoolExecutor-0_0"
REAL = Path(__file__).parent.parent / "data" / "vllm-real"


def th(name: str, frames: list[list[Any]]) -> dict[str, Any]:
    return {"name": name, "frames": copy.deepcopy(frames)}


def test_grammar_classes_on_real_frames() -> None:
    assert classify_threads([th(POOL, XGRAMMAR_COMPILE)], "engine_core").name == GRAMMAR_COMPILE
    assert classify_threads([th(POOL, GUIDANCE_COMPILE)], "engine_core").name == GRAMMAR_COMPILE
    assert classify_threads([th("MainThread", BITMASK)], "engine_core").name == GRAMMAR_BITMASK
    # an idle pool thread is no grammar work; the busy loop between empty steps is engine_yield ([pd]: vLLM
    # 0.33 sleeps 1 ms in _process_engine_step after a step that ran no model), never grammar work
    assert classify_threads([th(POOL, POOL_IDLE)], "engine_core").name != GRAMMAR_COMPILE
    assert classify_threads([th("MainThread", BUSY_LOOP)], "engine_core").name == ENGINE_YIELD


def test_compile_thread_speaks_over_the_busy_loop_but_not_over_a_step() -> None:
    busy = classify_threads([th("MainThread", BUSY_LOOP), th(POOL, XGRAMMAR_COMPILE)], "engine_core")
    assert (busy.name, busy.thread) == (GRAMMAR_COMPILE, POOL)
    assert busy.where and "backend_xgrammar.py:146" in busy.where
    # TP=1: MainThread runs the (empty) model step itself; the step speaks, yet the pool thread is still found
    step = [th("MainThread", UNIPROC_STEP), th(POOL, XGRAMMAR_COMPILE)]
    assert classify_threads(step, "engine_core").name == EXECUTING
    (g,) = grammar_threads(step, "engine_core")
    assert (g.thread, g.backend) == (POOL, "xgrammar") and g.frame and "compile_json_schema" in g.frame
    assert [g.backend for g in grammar_threads([th(POOL, GUIDANCE_COMPILE)], None)] == ["guidance"]
    assert grammar_threads([th(POOL, POOL_IDLE)], "engine_core") == []


# ---- queue.grammar_stuck on the real TP=4 deployment ----------------------------------------------
def _real(waiting: float, tokens: tuple[float, float] = (100, 100), pool: list[list[Any]] | None = XGRAMMAR_COMPILE,
          resample: list[list[Any]] | None = None, main: list[list[Any]] = BUSY_LOOP,
          running: float = 0.0) -> tuple[Snapshot, int]:
    raw = json.loads(next(REAL.glob("snap-a-*.json")).read_text())
    roles = {p["pid"]: p.get("role") for p in raw["probes"]["processes"]["data"]["processes"]}
    engine = next(d for d in raw["probes"]["stacks"]["data"]["dumps"] if roles[d["pid"]] == "engine_core")
    thread0 = next(t for t in engine["threads"] if t["name"] == "MainThread")
    thread0["frames"] = copy.deepcopy(main)  # a request exists: the loop steps (empty batches while it waits)
    if pool is not None:
        engine["threads"].append(th(POOL, pool))
    if resample is not None:
        engine["resample"] = {"after_s": 0.3, "status": "ok",
                              "threads": [th("MainThread", main), *([th(POOL, resample)] if pool else [])]}
    for server in raw["probes"]["http"]["data"]["servers"]:
        for m, tok in zip(server["metrics"], tokens, strict=False):
            m.update(running=running, waiting=waiting, generation_tokens=tok, prompt_tokens=10.0)
    return Snapshot.from_dict(raw), int(engine["pid"])


def _later(snap: Snapshot, seconds: float, tokens: float = 100) -> Snapshot:
    raw = copy.deepcopy(snap.to_dict())
    raw.pop("passes", None)
    raw["collected_at"] = (dt.datetime.fromisoformat(snap.collected_at) + dt.timedelta(seconds=seconds)).isoformat()
    for server in raw["probes"]["http"]["data"]["servers"]:
        for m in server["metrics"]:
            m["generation_tokens"] = tokens
    return Snapshot.from_dict(raw)


def _grammar(snap: Snapshot) -> list[Any]:
    return [f for f in analyze([snap]).findings if f.code == "queue.grammar_stuck"]


def test_held_compile_with_requests_waiting_is_named_after_the_confirm_window() -> None:
    snap, engine = _real(waiting=1, resample=XGRAMMAR_COMPILE)
    (quick,) = _grammar(snap)
    assert quick.severity == "warning" and quick.evidence["needs_confirm"] is True  # 0.5 s look: suspected only
    assert queue_grammar.stalled_engines(snap)  # keeps the confirm window open though rings move
    snap.passes = [_later(snap, 2.0), _later(snap, 4.0)]
    report = analyze([snap])
    (f,) = [f for f in report.findings if f.code == "queue.grammar_stuck"]
    assert f.severity == "critical" and f.evidence["thread"] == POOL and f.evidence["backend"] == "xgrammar"
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "queue")
    assert v.culprits[0].pid == engine and POOL in v.culprits[0].reason and "compile_json_schema" in v.culprits[0].reason
    # the vague client reading no longer blames the EngineCore on its own
    assert all(f.severity == "info" for f in report.findings if f.code == "client.requests_stuck_waiting")
    # the gpu layer's stall suspicion points at the grammar rule instead of "no stack picture explains it"
    suspected = [f for f in report.findings if f.code == "gpu.stall_suspected"]
    assert suspected and all("queue.grammar_stuck" in f.message for f in suspected)


def test_a_compile_that_finishes_or_is_seen_once_is_info() -> None:
    once, _ = _real(waiting=1)  # no second look
    assert [f.severity for f in _grammar(once)] == ["info"]
    moved, _ = _real(waiting=1, resample=POOL_IDLE)  # the compile ended between the looks
    assert [f.severity for f in _grammar(moved)] == ["info"]
    flowing, _ = _real(waiting=1, tokens=(100, 140), resample=XGRAMMAR_COMPILE)  # other requests stream meanwhile
    flowing.passes = [_later(flowing, 2.0, 180), _later(flowing, 4.0, 220)]
    assert [f.severity for f in _grammar(flowing)] == ["info"]
    assert analyze([flowing]).verdict.status == "healthy"
    nobody, _ = _real(waiting=0, resample=XGRAMMAR_COMPILE)  # a compile nobody waits on (its client left)
    assert [f.severity for f in _grammar(nobody)] == ["info"]


def test_a_bitmask_fill_held_on_the_busy_loop_blocks_the_running_batch() -> None:
    # the fill masks RUNNING requests: none waits, yet nothing is produced while MainThread holds it
    snap, engine = _real(waiting=0, running=2, pool=None, main=BITMASK, resample=[])
    snap.passes = [_later(snap, 2.0), _later(snap, 4.0)]
    (f,) = _grammar(snap)
    assert f.severity == "critical" and f.evidence["class"] == GRAMMAR_BITMASK and f.evidence["thread"] == "MainThread"
    assert f.culprits[0].pid == engine and "fill_bitmask" in f.message


def test_no_grammar_thread_no_finding() -> None:
    snap, _ = _real(waiting=0, pool=None)
    assert _grammar(snap) == [] and not queue_grammar.stalled_engines(snap)
    assert classify_threads([th(POOL, POOL_IDLE)], "engine_core").name in (IDLE, "unknown")
