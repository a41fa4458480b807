"""Strict JSON out (issue 25 item 7): what vllmdiag writes is JSON that jq, Go and JavaScript read.

``json.dumps`` writes ``NaN`` and ``Infinity`` by default, which no strict parser takes; a hostile
``/metrics`` (or any float from a target) must not make ``--json``, a snapshot or the webhook
unreadable. A value that is not finite becomes null; the common case costs one C-encoder pass.
"""

from __future__ import annotations

import json
import math
from typing import Any


def dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps(obj, allow_nan=False, **kw)``, non-finite floats written as null."""
    kw.pop("allow_nan", None)
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError as exc:
        if "out of range float" not in str(exc).lower():
            raise
    return json.dumps(finite(obj), allow_nan=False, **kw)


def finite(obj: Any, _depth: int = 0) -> Any:
    """A copy with every non-finite float replaced by None (containers to any depth the encoder takes)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if _depth > 200:
        return obj
    if isinstance(obj, dict):
        return {k: finite(v, _depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v, _depth + 1) for v in obj]
    return obj
