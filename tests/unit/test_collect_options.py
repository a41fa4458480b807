"""The typed collection options (vllmdiag/runtime/options.py): built once by a door, read by attribute, and
written back into the snapshot as exactly the dict it always was (keys, order, values)."""

from __future__ import annotations

import json

from vllmdiag.context import Context
from vllmdiag.runtime.options import CollectOptions, collect_options
from vllmdiag.runtime.second_look import pass_options


def test_a_dict_round_trips_exactly_unknown_keys_and_order_included() -> None:
    raw = {"watch_s": 5, "pids": [3, 1], "from_a_newer_writer": {"x": 1}, "native": True, "gate_ports": [8000]}
    opts = CollectOptions.from_dict(raw)
    assert opts.pids == (3, 1) and opts.rates_s == 5 and opts.native and opts.gate_ports == (8000,)
    assert json.dumps(opts.to_dict()) == json.dumps(raw)  # byte for byte: order and int-ness kept
    assert opts.cheap is False and opts.boost is True and "cheap" not in opts.to_dict()  # a default is not written


def test_merged_is_a_dict_update_and_without_drops_keys() -> None:
    opts = CollectOptions.from_dict({"native": False, "pids": [1]})
    more = opts.merged({"native": True, "stack_pids": [7]})
    assert list(more.to_dict().items()) == [("native", True), ("pids", [1]), ("stack_pids", [7])]
    assert more.stack_pids == (7,) and opts.native is False  # frozen: the original is untouched
    assert more.without("pids", "native").to_dict() == {"stack_pids": [7]}


def test_each_door_writes_the_keys_it_always_wrote() -> None:
    triage = collect_options(native=False, nonblocking=True, nccl_ras=False, probe_request=True,
                             enable={"preflight": True}, no_boost=True, rates_s=2.0)
    assert list(triage.to_dict()) == ["native", "nonblocking", "nccl_ras", "probe_request", "preflight", "boost",
                                      "watch_s"]
    collect = collect_options(native=False, nonblocking=False, nccl_ras=False, preflight=False,
                              enable={"nccl_ras": True}, pids=[9], node="n1")
    assert collect.to_dict() == {"native": False, "nonblocking": False, "nccl_ras": True, "preflight": False,
                                 "pids": [9], "node": "n1"}
    assert collect.turned_on() == {"nccl_ras", "pids", "node"}  # the names an opt-in probe may answer to


def test_a_context_given_a_dict_reads_typed_and_a_follow_up_pass_drops_the_one_shot_looks() -> None:
    ctx = Context(options={"kmsg_path": "/x", "nccl_ras": True, "watch_s": 3})
    assert isinstance(ctx.options, CollectOptions) and ctx.options.kmsg_path == "/x"
    assert Context().options == CollectOptions()
    assert pass_options(ctx.options).to_dict() == {"kmsg_path": "/x"}


def test_what_the_collection_did_is_written_under_its_old_keys_and_read_back_typed() -> None:
    from vllmdiag.model import Snapshot
    from vllmdiag.runtime.record import Collected, ConfirmWindow, note

    snap = Snapshot(node="n", collected_at="t", vllmdiag_version="v", duration_s=0.1, options={"native": True})
    note(snap, budget_s=7.5)
    note(snap, priority={"policy": "SCHED_OTHER"}, resample="skipped: 0.1 s left")
    note(snap, startup_s=0.25, command_budget_s=8.0)  # written in FACTS order, whatever the call's order
    note(snap, confirm=ConfirmWindow(requested_s=10.0, window_s=3.2, passes=4, stopped="moved"))
    assert list(snap.options) == ["native", "budget_s", "priority", "resample", "command_budget_s", "startup_s",
                                  "confirm"]
    assert snap.options["confirm"] == {"requested_s": 10.0, "watched_s": 3.2, "passes": 4, "stopped": "moved"}
    did = Collected.read(snap)
    assert did.confirm == ConfirmWindow(10.0, 3.2, 4, "moved") and did.startup_s == 0.25 and did.budget_s == 7.5
    old = Collected.read(Snapshot(node="n", collected_at="t", vllmdiag_version="v", duration_s=0.1,
                                  options={"confirm": {"requested_s": "x"}, "startup_s": "soon", "budget_s": True}))
    assert old == Collected()  # an older or odd writer's values read as absent, never a crash
