"""EngineCore threads doing structured-output (grammar) work, per stack look (pure, never a finding). Read by
the queue layer's grammar analyzer and by the client layer, which defers to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllmdiag.analysis.views.deployments import role_of
from vllmdiag.analysis.views.stack_match import StackClass, classify_frames, stop_signature, thread_frames
from vllmdiag.model import Snapshot
from vllmdiag.vocab.stack_classes import GRAMMAR_BITMASK, GRAMMAR_COMPILE, UNKNOWN

GRAMMAR = (GRAMMAR_COMPILE, GRAMMAR_BITMASK)
# File of a frame -> the structured-output backend it belongs to (vllm/v1/structured_output/backend_*.py
# and the libraries those call). The innermost match names the backend.
BACKEND_FILES = (("backend_xgrammar.py", "xgrammar"), ("xgrammar/", "xgrammar"), ("backend_guidance.py", "guidance"),
                 ("llguidance/", "guidance"), ("backend_outlines.py", "outlines"), ("outlines_core/", "outlines"),
                 ("backend_lm_format_enforcer.py", "lm-format-enforcer"), ("lmformatenforcer/", "lm-format-enforcer"))


@dataclass
class GrammarLook:
    """One grammar thread of one EngineCore in one stack look."""

    thread: str
    cls: StackClass
    signature: tuple[Any, ...]
    frame: str | None  # innermost frame: what the thread is doing right now
    backend: str | None


def engine_looks(passes: list[Snapshot], pid: int, role: str | None) -> list[list[GrammarLook]]:
    """Every stack look at ``pid`` in time order (dump, its resample, each confirm pass): its grammar threads."""
    out: list[list[GrammarLook]] = []
    for snap in passes:
        for d in snap.data("stacks").get("dumps", []) or []:
            if not isinstance(d, dict) or d.get("pid") != pid:
                continue
            for threads in (d.get("threads"), (d.get("resample") or {}).get("threads")):
                if threads:
                    out.append(grammar_threads(threads, role))
    return out


def grammar_threads(threads: list[dict[str, Any]], role: str | None) -> list[GrammarLook]:
    """Every thread of one dump doing grammar work, whichever thread speaks for the process: at TP=1 the
    MainThread runs the (empty) model steps while the pool thread compiles."""
    out = []
    for t in threads:
        if not isinstance(t, dict):
            continue
        name = str(t.get("name") or t.get("thread_name") or "")
        frames = thread_frames([t], StackClass(UNKNOWN))
        sc = classify_frames(frames, name, role)
        if sc.name in GRAMMAR:
            top = f"{frames[0][0].rsplit('.', 1)[-1]} ({frames[0][1]}:{frames[0][2]})" if frames else None
            out.append(GrammarLook(name, sc, stop_signature([t], sc), top, _backend(frames)))
    return out


def engines_in_grammar(snapshot: Snapshot, engines: list[dict[str, Any]]) -> bool:
    """Every engine has a grammar thread at work in the quick pass (the client layer defers to this module)."""
    return bool(engines) and all(in_grammar(snapshot, e) for e in engines)


def in_grammar(snapshot: Snapshot, eng: dict[str, Any]) -> bool:
    looks = engine_looks([snapshot], eng["pid"], role_of(eng))
    return bool(looks and looks[0])


def _backend(frames: list[tuple[str, str, int]]) -> str | None:
    for f in frames:  # innermost first, as py-spy lists them
        for suffix, backend in BACKEND_FILES:
            if f[1].endswith(suffix) or f"/{suffix}" in f[1] or f[1].startswith(suffix):
                return backend
    return None
