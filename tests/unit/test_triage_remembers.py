"""`triage` remembers what a `watch` on this node saw (issue 34 item 4).

The watcher's state file (vllmdiag/watch/history.py), written by its own Store, makes triage say
first "watch saw deployment X stall at T (N s ago): ...; evidence FILE", then its own fresh look.
A state file that is not ours (a link, another owner, writable by others, too big, not its JSON,
in a directory others may write) is ignored with one line and never trusted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vllmdiag.watch.history import MAX_STATE_BYTES, STATE_NAME, remembered, state_document
from vllmdiag.watch.state import Tracked
from vllmdiag.watch.store import Store

WALL = 1_800_000_000.0
VERDICT = {"status": "blocked", "layer": "gpu",
           "culprits": [{"role": "worker", "pid": 4242, "rank": 1, "title": "VLLM::Worker_TP1"}]}


def _watch_dir(tmp_path: Path, state: str = "stalled") -> Path:
    """A watcher's --out with its state file, written by the watcher's own code."""
    out = tmp_path / "watch-out"
    store = Store(out, keep=5, max_bytes=1 << 20)
    store.prepare()
    t = Tracked("gpu01:77@5", "gpu01:77", 77, 0.0, state=state, stalls=1, verdict=VERDICT,
                stalled_wall=WALL - 600, evidence=str(out / "vllmdiag-watch-x.json"))
    store.write_state(state_document("gpu01", [t], 0.0, WALL - 590))
    store.close()
    return out


def test_triage_says_when_the_watcher_saw_the_stall_begin(tmp_path: Path) -> None:
    out = _watch_dir(tmp_path)
    lines = remembered(out, wall=WALL)
    assert len(lines) == 2, lines
    assert lines[0] == (f"watch saw deployment gpu01:77 stall at 2027-01-15T07:50:00Z (600 s ago): blocked, layer gpu, "
                        f"culprit worker pid 4242 rank 1; evidence {out}/vllmdiag-watch-x.json")
    assert "the watcher is running" in lines[1] and "fresh look follows" in lines[1]
    moved = remembered(_watch_dir(tmp_path / "b", state="running"), wall=WALL)
    assert "it was running at the watcher's last change" in moved[0]


def test_a_stalled_deployment_that_went_away_is_still_remembered(tmp_path: Path) -> None:
    """The kubelet restarted it (or a person did): triage after the restart still learns the onset."""
    from vllmdiag.analysis.views.progress import Progress
    from vllmdiag.watch.state import Tracker

    tr = Tracker()
    busy = Progress("gpu01:77", work_in_flight=True, moved=False)
    tr.observe({"gpu01:77@5": ("gpu01:77", 77)}, {"gpu01:77": busy}, {}, 0.0, None)
    t = tr.deps["gpu01:77@5"]
    assert tr.confirmed(t, VERDICT, 10.0, WALL - 50)
    tr.saved(t, 11.0, "/var/lib/vllmdiag/watch/vllmdiag-watch-x.json")
    assert [e.kind for e in tr.observe({}, {}, {}, 20.0, 10.0)] == ["gone"]
    out = tmp_path / "watch-out"
    store = Store(out, keep=5, max_bytes=1 << 20)
    store.write_state(state_document("gpu01", [*tr.deps.values(), *tr.past], 20.0, WALL - 40))
    store.close()
    lines = remembered(out, wall=WALL)
    assert "watch saw deployment gpu01:77 stall at" in lines[0] and "(60 s ago)" in lines[0], lines
    assert lines[0].endswith("vllmdiag-watch-x.json; it has gone since (restarted or stopped)"), lines


def test_no_watcher_no_line(tmp_path: Path) -> None:
    assert remembered(tmp_path / "nothing-here") == []
    (tmp_path / "empty").mkdir(mode=0o750)
    assert remembered(tmp_path / "empty") == []


def _ignored(lines: list[str], why: str) -> None:
    assert len(lines) == 1 and "ignored the watch state" in lines[0] and why in lines[0], lines
    assert "watch saw" not in lines[0]


def test_a_link_is_never_followed(tmp_path: Path) -> None:
    real = _watch_dir(tmp_path / "real")
    out = tmp_path / "planted"
    out.mkdir(mode=0o750)
    (out / STATE_NAME).symlink_to(real / STATE_NAME)
    _ignored(remembered(out, wall=WALL), "not a plain file")


def test_writable_by_others_is_not_trusted(tmp_path: Path) -> None:
    out = _watch_dir(tmp_path)
    os.chmod(out / STATE_NAME, 0o666)
    _ignored(remembered(out, wall=WALL), "writable by others")
    os.chmod(out / STATE_NAME, 0o640)
    os.chmod(out, 0o777)
    _ignored(remembered(out, wall=WALL), "writable by others")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_another_owner_is_not_trusted(tmp_path: Path) -> None:
    out = _watch_dir(tmp_path)
    os.chown(out / STATE_NAME, 65534, 65534)
    _ignored(remembered(out, wall=WALL), "owned by uid 65534")


@pytest.mark.parametrize("content, why", [
    (b"x" * (MAX_STATE_BYTES + 1), "more than"),
    (b"{not json", "not the watcher's JSON"),
    (b'{"schema": "someone-else/1", "deployments": []}', "not a vllmdiag-watch-state/1"),
    (b'{"schema": "vllmdiag-watch-state/1", "deployments": [], "written_at": NaN}', "not the watcher's JSON"),
])
def test_not_the_watchers_document(tmp_path: Path, content: bytes, why: str) -> None:
    out = _watch_dir(tmp_path)
    (out / STATE_NAME).write_bytes(content)
    _ignored(remembered(out, wall=WALL), why)


def test_hostile_values_stay_one_plain_line(tmp_path: Path) -> None:
    out = _watch_dir(tmp_path)
    doc = json.loads((out / STATE_NAME).read_text())
    doc["deployments"][0]["id"] = "gpu01:77\x1b[2J\nFAKE LINE"
    doc["deployments"].append({"id": 5, "stalled_at": "yesterday"})  # not a deployment: skipped
    (out / STATE_NAME).write_text(json.dumps(doc))
    lines = remembered(out, wall=WALL)
    assert len(lines) == 2 and "\x1b" not in lines[0] and "\n" not in lines[0]
