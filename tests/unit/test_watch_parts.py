"""vllmdiag watch, part by part: the stall state machine, rotation, the exporter, the hooks, bad input."""

from __future__ import annotations

import http.server
import json
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.views.progress import Progress
from vllmdiag.watch import hooks
from vllmdiag.watch.exporter import Exporter, render
from vllmdiag.watch.state import Tracker
from vllmdiag.watch.store import Store


def _p(dep: str, busy: bool, moved: bool) -> Progress:
    return Progress(deployment_id=dep, work_in_flight=busy, moved=moved, moved_what=["tokens"] if moved else [],
                    still=[] if moved else ["tokens"], window_s=0.3)


SEEN = {"n:1@100.0": ("n:1", 1)}


def _pass(tr: Tracker, now: float, within: tuple[bool, bool], across: tuple[bool, bool] | None) -> list[str]:
    a = {"n:1": _p("n:1", *across)} if across else {}
    return [e.kind for e in tr.observe(SEEN, {"n:1": _p("n:1", *within)}, a, now, now - 1 if across else None)]


def test_a_stall_is_triaged_once_until_it_moves_again() -> None:
    tr = Tracker()
    assert _pass(tr, 0, (True, True), None) == ["new"]
    assert _pass(tr, 1, (True, False), (True, True)) == ["suspect"]  # still inside this pass: triage now
    t = tr.deps["n:1@100.0"]
    assert tr.confirmed(t, {"status": "blocked", "layer": "gpu"}) and t.state == "stalled" and t.stalls == 1
    assert t.since_progress(5.0) == 5.0  # it last moved between the passes at 0 and 1
    for now in (2, 3, 4):
        assert _pass(tr, now, (True, False), (True, False)) == []  # once, not every interval
    assert _pass(tr, 5, (True, True), (True, True)) == ["recovered"] and t.state == "running"
    assert _pass(tr, 6, (True, False), (True, True)) == ["suspect"]  # a new stall is a new triage


def test_idle_is_never_a_stall_and_a_cleared_suspicion_needs_a_whole_still_interval() -> None:
    tr = Tracker()
    _pass(tr, 0, (False, False), None)
    assert _pass(tr, 1, (False, False), (False, False)) == [] and tr.deps["n:1@100.0"].state == "idle"
    assert _pass(tr, 2, (True, False), (True, True)) == ["suspect"]
    t = tr.deps["n:1@100.0"]
    assert not tr.confirmed(t, {"status": "healthy"})  # it moved while the triage looked (a long step)
    assert _pass(tr, 3, (True, False), (True, True)) == []  # still inside a pass only: not enough now
    assert _pass(tr, 4, (True, False), (True, False)) == ["suspect"]  # still over a whole interval


def test_a_restarted_deployment_is_a_new_one() -> None:
    tr = Tracker()
    tr.observe(SEEN, {}, {}, 0, None)
    kinds = [(e.kind, e.tracked.key) for e in tr.observe({"n:1@200.0": ("n:1", 1)}, {}, {}, 1, 0)]
    assert kinds == [("gone", "n:1@100.0"), ("new", "n:1@200.0")]



def _report() -> Any:
    from vllmdiag.analysis.bisect import Report
    from vllmdiag.model import Verdict

    return Report(Verdict("blocked", "gpu", summary="s"), [], [], [])


def test_rotation_keeps_count_and_size_and_never_touches_other_files(tmp_path: Path) -> None:
    store = Store(tmp_path, keep=3, max_bytes=1 << 30, report_suffix=".md")
    store.prepare()
    (tmp_path / "notes.json").write_text("mine")
    (tmp_path / "vllmdiag-watch-20200101T000000000Z-0001-x.json.bak").write_text("not ours")
    os.symlink("/etc/hostname", tmp_path / "vllmdiag-watch-20000101T000000000Z-0001-link.json")
    saved = [store.save("node:1", {"i": i}, _report()) for i in range(5)]
    assert [s.snapshot.exists() for s in saved] == [False, False, True, True, True]
    assert all(s.report is not None and s.report.suffix == ".md" for s in saved)
    assert (tmp_path / "notes.json").read_text() == "mine"
    assert (tmp_path / "vllmdiag-watch-20200101T000000000Z-0001-x.json.bak").exists()
    assert os.path.islink(tmp_path / "vllmdiag-watch-20000101T000000000Z-0001-link.json")
    one = sum(p.stat().st_size for p in (saved[-1].snapshot, saved[-1].report) if p is not None)  # the report: asserted above
    store.max_bytes = one + 10  # room for one event only: the oldest go first, the newest stays
    store.rotate()
    assert [s.snapshot.exists() for s in saved] == [False, False, False, False, True]
    store.max_bytes = 1
    newest = store.save("node:1", {"big": "x" * 100}, _report())
    assert newest.snapshot.exists(), "what was just written is never rotated away"
    assert json.loads(newest.snapshot.read_text()) == {"big": "x" * 100}


def test_file_names_are_safe_for_hostile_deployment_ids(tmp_path: Path) -> None:
    store = Store(tmp_path, keep=5, max_bytes=1 << 20, report_suffix=".md")
    store.prepare()
    s = store.save("../../etc/\x1b[31mnode:1", {}, _report())
    assert s.snapshot.parent == tmp_path and "/" not in s.snapshot.name and "\x1b" not in s.snapshot.name


def test_exposition_escapes_labels_and_is_scraped_over_http() -> None:
    text = render([("vllmdiag_deployment_stalled", {"node": 'a"b\\c\nd', "deployment": "x"}, 1)])
    assert 'node="a\\"b\\\\c\\nd"' in text and "# TYPE vllmdiag_deployment_stalled gauge" in text
    exp = Exporter("127.0.0.1", 0, lambda: [("vllmdiag_watch_passes_total", {"node": "n"}, 3)])
    exp.start()
    try:
        host, port = exp.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert 'vllmdiag_watch_passes_total{node="n"} 3' in body
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://{host}:{port}/other", timeout=5)
        assert err.value.code == 404
    finally:
        exp.close()


def test_on_stall_command_gets_the_path_and_is_killed_at_its_deadline(tmp_path: Path) -> None:
    out = tmp_path / "hook.json"
    script = ("import json,os,sys; json.dump({'argv': sys.argv[1:], 'layer': os.environ['VLLMDIAG_WATCH_LAYER']},"
              f" open({str(out)!r}, 'w'))")
    argv = hooks.parse_command(f"{sys.executable} -c {json.dumps(script)}")
    assert hooks.run_command(argv, "/x/snap.json", {"VLLMDIAG_WATCH_LAYER": "gpu"}, 20) == "exit 0"
    assert json.loads(out.read_text()) == {"argv": ["/x/snap.json"], "layer": "gpu"}
    start = time.monotonic()
    how = hooks.run_command([sys.executable, "-c", "import time; time.sleep(60)"], "/x", {}, 0.5)
    assert how.startswith("killed") and time.monotonic() - start < 10
    assert hooks.run_command(["/nonexistent/cmd"], "/x", {}, 1).startswith("could not start")


class _Hook(http.server.BaseHTTPRequestHandler):
    got: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.end_headers()
            return
        if self.path == "/slow":
            time.sleep(3)
        type(self).got.append({"path": self.path, "body": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        return


@pytest.fixture
def hook_server() -> Iterator[str]:
    _Hook.got = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_webhook_posts_json_never_follows_redirects_and_is_bounded(hook_server: str) -> None:
    assert hooks.post_json(hook_server + "/stall", {"event": "stall"}, 5) == "HTTP 204"
    assert _Hook.got == [{"path": "/stall", "body": {"event": "stall"}}]
    assert hooks.post_json(hook_server + "/redirect", {"a": 1}, 5) == "HTTP 302"
    assert [g["path"] for g in _Hook.got] == ["/stall"]
    start = time.monotonic()
    assert hooks.post_json(hook_server + "/slow", {}, 0.5).startswith("failed")
    assert time.monotonic() - start < 2.5


def test_every_pass_runs_in_a_killable_child_stuck_thread_or_not(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import vllmdiag.api
    from vllmdiag.model import Snapshot
    from vllmdiag.watch.watcher import WatchConfig, Watcher, stuck_probe_threads

    seen: list[bool] = []

    def fake_collect(**kw: Any) -> Snapshot:
        seen.append(kw["hard"])
        assert kw["options"]["cheap"] is True and "stacks" not in kw["probes"]
        return Snapshot("n", "2026-11-30T00:00:00+00:00", "x", 0.1)

    monkeypatch.setattr(vllmdiag.api, "collect", fake_collect)
    w = Watcher(WatchConfig(out_dir=tmp_path))
    before = stuck_probe_threads()
    w.step()
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, name="probe-processes", daemon=True)  # a read that never returns
    stuck.start()
    try:
        assert stuck_probe_threads() == before + 1
        w.step()
    finally:
        release.set()
        stuck.join()
    assert seen == [True, True]  # issue 25 item 4: always, not only once a thread is stuck


def test_a_failing_pass_is_logged_and_the_watcher_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    import vllmdiag.api
    from vllmdiag.model import Snapshot
    from vllmdiag.watch.watcher import WatchConfig, Watcher

    calls: list[int] = []

    def flaky_collect(**kw: Any) -> Snapshot:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("a /proc read went wrong")
        return Snapshot("n", "2026-11-30T00:00:00+00:00", "x", 0.1)

    monkeypatch.setattr(vllmdiag.api, "collect", flaky_collect)
    err = io.StringIO()
    w = Watcher(WatchConfig(out_dir=tmp_path / "o", interval_s=0.2, max_passes=1, err=err))
    assert w.run() == 0 and len(calls) == 2 and w.errors == 1
    assert "pass failed (OSError: a /proc read went wrong)" in err.getvalue()
    assert ("vllmdiag_watch_errors_total", {"node": "n"}, 1) in w.samples()
