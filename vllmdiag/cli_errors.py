"""Errors the CLI turns into one-line messages (kept apart so non-CLI modules can raise them)."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: shown as one line, exit 2."""
