"""The pure tests of tests/live/test_lastword_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag.errors import EXIT_INCONCLUSIVE
from vllmdiag.runtime import lastword


def test_the_exit_code_is_the_cli_one() -> None:
    assert lastword.EXIT_INCONCLUSIVE == EXIT_INCONCLUSIVE
