"""Progress over passes (analysis/views/progress.py) on snapshots of the real vLLM 0.33 code."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

from vllmdiag.analysis.views.progress import all_passes, deployment_progress, is_stalled
from vllmdiag.analysis.views.stack_match import call_site
from vllmdiag.model import Snapshot

REAL = Path(__file__).parent.parent / "data" / "vllm-real"


def _snap(letter: str) -> Snapshot:
    path = next(REAL.glob(f"snap-{letter}-*.json"))
    return Snapshot.from_dict(json.loads(path.read_text()))


def later(snap: Snapshot, seconds: float, tokens: float | None = None) -> Snapshot:
    """A follow-up pass: the same picture `seconds` later, optionally with other token counters."""
    raw: dict[str, Any] = copy.deepcopy(snap.to_dict())
    raw.pop("passes", None)
    at = dt.datetime.fromisoformat(snap.collected_at) + dt.timedelta(seconds=seconds)
    raw["collected_at"] = at.isoformat()
    if tokens is not None:
        for server in raw["probes"]["http"]["data"]["servers"]:
            for m in server["metrics"]:
                m["generation_tokens"] = tokens
    return Snapshot.from_dict(raw)


def test_idle_deployment_has_no_work_in_flight() -> None:
    (p,) = deployment_progress([_snap("a")])
    assert not p.work_in_flight and not is_stalled(p)


def test_engine_waiting_with_a_request_running_is_in_flight_and_still() -> None:
    (p,) = deployment_progress([_snap("g")])
    assert p.work_in_flight and not p.moved and is_stalled(p)
    assert any("request(s) running" in w for w in p.in_flight)
    assert any("engine_waiting_workers" in w for w in p.in_flight)


def test_same_picture_over_a_window_stays_stalled_and_window_is_measured() -> None:
    snap = _snap("g")
    (p,) = deployment_progress([snap, later(snap, 2.0), later(snap, 4.0)])
    assert is_stalled(p) and p.window_s >= 4.0 and p.passes == 3
    assert any("held" in s for s in p.still)


def test_token_counter_that_grows_is_progress() -> None:
    snap = later(_snap("g"), 0.0, tokens=10)
    (still,) = deployment_progress([snap, later(snap, 1.0, tokens=10)])
    assert is_stalled(still) and "generation tokens stayed at 10" in still.still
    (p,) = deployment_progress([snap, later(snap, 1.0, tokens=1e6)])
    assert p.moved and not is_stalled(p)
    assert any(w.startswith("generation tokens") for w in p.moved_what)


def test_passes_round_trip_through_json_and_old_snapshots_have_none() -> None:
    snap = _snap("g")
    assert snap.passes == [] and "passes" not in snap.to_dict()
    snap.passes = [later(snap, 1.0)]
    again = Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
    assert [s.collected_at for s in all_passes(again)] == [s.collected_at for s in all_passes(snap)]


def test_call_site_is_the_first_frame_outside_the_collective_library() -> None:
    frames = [("ncclAllReduce", "vllm/distributed/device_communicators/pynccl_wrapper.py", 300),
              ("all_reduce", "vllm/distributed/parallel_state.py", 500),
              ("forward", "vllm/model_executor/models/minimax_m2.py", 136)]
    assert call_site(frames) == "vllm/model_executor/models/minimax_m2.py:136"


def test_stacks_probe_selects_whole_trees_and_orphans_by_process_group_without_analysis() -> None:
    import vllmdiag.probes.stacks as probe

    rows = [{"pid": 10, "ppid": 1, "pgid": 10}, {"pid": 11, "ppid": 10, "pgid": 10}, {"pid": 12, "ppid": 11, "pgid": 10},
            {"pid": 13, "ppid": 1, "pgid": 10},  # an orphaned worker: reparented, same process group
            {"pid": 20, "ppid": 1, "pgid": 20}, {"pid": 21, "ppid": 20, "pgid": 20}]  # another deployment
    assert probe.same_trees(rows, {12}) == {10, 11, 12, 13}
    assert probe.same_trees(rows, {21}) == {20, 21}
    src = Path(probe.__file__).read_text()
    assert "vllmdiag.analysis" not in src  # probes collect, never decide (issue 16 item 2)


def test_confirm_window_stops_as_soon_as_something_moves_and_records_what_it_watched() -> None:
    from vllmdiag.runtime import second_look as confirm

    first = later(_snap("g"), 0.0, tokens=10)
    seen_options: list[dict[str, Any]] = []
    tokens = iter([10, 10, 42])

    def collect(**kw: Any) -> Snapshot:
        seen_options.append(kw["options"].to_dict())  # typed CollectOptions: compared in its JSON form
        return later(first, 0.1, tokens=next(tokens))

    def still(s: Snapshot) -> bool:
        return any(is_stalled(p) for p in deployment_progress(all_passes(s)))

    ticks: list[float] = []
    confirm.confirm_window(first, [1], 30.0, still, collect, {"watch_s": 5, "probe_request": True, "native": True},
                           None, lambda looked, window: ticks.append(looked))
    assert len(first.passes) == 3 and first.options["confirm"]["stopped"] == "moved" and len(ticks) == 3
    assert first.options["confirm"]["watched_s"] < 30 and first.passes[0].options == {}
    # Follow-up passes never repeat the one-shot looks (a completion request, --rates' stretch).
    assert all("probe_request" not in o and "watch_s" not in o and o["native"] for o in seen_options)
