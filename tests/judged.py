"""A synthetic snapshot judged live and again from its saved JSON: the two verdicts must agree
(analysis is a pure function of the snapshot, confirm passes included)."""

from __future__ import annotations

import json

from vllmdiag.analysis.bisect import analyze
from vllmdiag.model import Report, Snapshot


def judged(first: Snapshot, *later: Snapshot) -> Report:
    """``first`` with ``later`` as its confirm window's passes, analysed live and from the saved file."""
    first.passes = list(later)
    live = analyze([first])
    offline = analyze([Snapshot.from_dict(json.loads(json.dumps(first.to_dict())))])
    assert offline.verdict.to_dict() == live.verdict.to_dict(), "analyze of the saved snapshot must agree"
    return live
