"""The runner never hangs and never lets one probe sink the run."""

from __future__ import annotations

import time
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec, Skip
from vllmdiag.registry import Probe
from vllmdiag.runtime.runner import collect_snapshot


def _probe(name: str, fn: Any, timeout_s: float = 1.0, requires: tuple[str, ...] = (), sampler: bool = False) -> Probe:
    return Probe(ProbeSpec(name=name, layer="host", description=name, timeout_s=timeout_s, requires=requires,
                           sampler=sampler), fn)


def test_each_outcome_is_recorded_and_the_run_ends_on_time(reliability: Any) -> None:
    def forever(ctx: Context) -> dict[str, Any]:
        while True:
            time.sleep(0.05)

    def boom(ctx: Context) -> dict[str, Any]:
        raise RuntimeError("probe bug")

    def denied(ctx: Context) -> dict[str, Any]:
        raise PermissionError(13, "Permission denied", "/proc/1/mem")

    def skip(ctx: Context) -> dict[str, Any]:
        raise Skip("py-spy not found: pip install py-spy")

    def partial(ctx: Context) -> Partial:
        return Partial({"seen": 1}, "2 of 3 processes vanished")

    def fine(ctx: Context) -> dict[str, Any]:
        return {"ok": True}

    reg = {p.spec.name: p for p in [_probe("forever", forever, 0.5), _probe("boom", boom), _probe("denied", denied),
                                    _probe("skip", skip), _probe("partial", partial), _probe("fine", fine)]}
    start = time.monotonic()
    snap = collect_snapshot(Context(), registry=reg, budget_s=3.0)
    elapsed = time.monotonic() - start
    reliability.case(hang=elapsed > 2.0)
    assert elapsed < 2.0
    st = {n: (r.status, r.reason) for n, r in snap.probes.items()}
    assert st["forever"][0] == "timeout"
    assert st["boom"][0] == "error" and "probe bug" in (st["boom"][1] or "")
    assert st["denied"][0] == "error" and "permission denied" in (st["denied"][1] or "")
    assert st["skip"] == ("skipped", "py-spy not found: pip install py-spy")
    assert st["partial"] == ("partial", "2 of 3 processes vanished") and snap.probes["partial"].data == {"seen": 1}
    assert st["fine"][0] == "ok"


def test_total_budget_caps_everything(reliability: Any) -> None:
    def slow(ctx: Context) -> dict[str, Any]:
        time.sleep(30)
        return {}

    reg = {"slow": _probe("slow", slow, timeout_s=60)}
    start = time.monotonic()
    snap = collect_snapshot(Context(), registry=reg, budget_s=0.5)
    reliability.case(hang=time.monotonic() - start > 1.5)
    assert time.monotonic() - start < 1.5
    assert snap.probes["slow"].status == "timeout"


def test_requirements_run_first_and_samplers_overlap_the_rest() -> None:
    order: list[str] = []

    def first(ctx: Context) -> dict[str, Any]:
        time.sleep(0.1)
        order.append("first")
        return {"value": 42}

    def second(ctx: Context) -> dict[str, Any]:
        order.append("second")
        return {"got": ctx.data("first")["value"]}

    def sampler(ctx: Context) -> dict[str, Any]:
        samples = 1
        while not ctx.wait_others(0.02):
            samples += 1
        return {"samples": samples}

    reg = {"first": _probe("first", first), "second": _probe("second", second, requires=("first",)),
           "sampler": _probe("sampler", sampler, sampler=True)}
    snap = collect_snapshot(Context(), registry=reg, budget_s=3.0)
    assert order == ["first", "second"]
    assert snap.probes["second"].data == {"got": 42}
    assert snap.probes["sampler"].data["samples"] >= 3


def test_ctx_run_missing_binary_is_a_result() -> None:
    res = Context().run(["/nonexistent/py-spy", "dump"], timeout_s=1.0)
    assert res.error and res.returncode is None and not res.timed_out


def _timed(marks: dict[str, float], name: str, sleep_s: float = 0.0, opens: bool = False) -> Any:
    def fn(ctx: Context) -> dict[str, Any]:
        marks[name] = time.monotonic()
        time.sleep(sleep_s)
        if opens:
            marks["opened"] = time.monotonic()
            ctx.open_window()  # the first sample is taken: the window is open
            time.sleep(0.1)
        marks[name + " ended"] = time.monotonic()
        return {}
    return fn


def test_deferred_probes_start_once_the_window_opened_and_never_wait_long_for_it() -> None:
    """What is on no path to the window's first sample (the kernel log, every process's maps) starts
    after it, so that on 2 cores it does not delay it; it waits at most DEFER_MAX_S, and not at all
    when no probe opens a window. Order only, never a machine's speed."""
    from vllmdiag.runtime.runner import DEFER_MAX_S

    def spec(name: str, fn: Any, **kw: Any) -> Probe:
        return Probe(ProbeSpec(name=name, layer="host", description=name, timeout_s=5.0, **kw), fn)

    marks: dict[str, float] = {}
    reg = {"opener": spec("opener", _timed(marks, "opener", 0.2, opens=True), sampler=True, opens_window=True),
           "later": spec("later", _timed(marks, "later"), deferred=True), "plain": spec("plain", _timed(marks, "plain"))}
    snap = collect_snapshot(Context(), registry=reg, budget_s=6.0)
    assert {r.status for r in snap.probes.values()} == {"ok"}
    assert marks["plain"] < marks["opened"] <= marks["later"] < marks["opener ended"]

    marks.clear()  # an opener that never opens: the deferred probe waits DEFER_MAX_S, not for the opener's end
    reg["opener"] = spec("opener", _timed(marks, "opener", 4 * DEFER_MAX_S), sampler=True, opens_window=True)
    collect_snapshot(Context(), registry=reg, budget_s=6.0)
    assert marks["opener"] + DEFER_MAX_S * 0.9 <= marks["later"] < marks["opener ended"]

    marks.clear()  # no probe opens a window: nothing to wait for
    reg = {"later": reg["later"], "plain": spec("plain", _timed(marks, "plain", 2 * DEFER_MAX_S))}
    collect_snapshot(Context(), registry=reg, budget_s=6.0)
    assert marks["later"] < marks["plain ended"] - DEFER_MAX_S
