"""Kept for code written before ``vllmdiag/errors.py``: ``UsageError`` is ``BadInput``. Import from
``vllmdiag.errors`` in new code."""

from __future__ import annotations

from vllmdiag.errors import BadInput as UsageError

__all__ = ["UsageError"]
