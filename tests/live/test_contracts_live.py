"""The live tests of tests/unit/test_contracts.py, which says what they check: these start something."""

from __future__ import annotations


def test_tests_are_sorted_into_unit_and_live_by_what_they_start() -> None:
    """Per test, from what it runs: a pure test beside live ones in one module stays unit."""
    import test_denied_reads
    import test_error_fixes
    import test_error_fixes_live
    import test_nonroot
    from conftest import _live_func

    assert not _live_func(test_denied_reads.test_processes_hidden_by_hidepid_make_no_deployment_say_so)
    assert not _live_func(test_error_fixes.test_every_error_class_carries_its_own_one_line_fix)
    assert _live_func(test_error_fixes_live.test_the_cli_prints_the_fix_on_its_one_line)  # a subprocess of the CLI
    assert _live_func(test_nonroot.test_unprivileged_triage_reports_what_it_could_not_see)
