"""The pure tests of tests/live/test_installed_wheel_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag_sim.deployment import SimError


def test_a_simulator_that_did_not_start_names_the_root_cause_on_its_first_line() -> None:
    tail = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
            "FileNotFoundError: [Errno 2] No such file or directory: '/x/_C_stable_libtorch.abi3.so'\n"
            "RuntimeError: Engine core initialization failed. See root cause above.")
    first = str(SimError("simulated deployment ab12 did not start", tail)).splitlines()[0]
    assert first.startswith("simulated deployment ab12 did not start: FileNotFoundError:")
    assert "_C_stable_libtorch" in first
    assert str(SimError("x did not start", "")).splitlines()[0] == "x did not start: no output from the launcher"
    assert str(SimError("no simulated deployment 'q'")) == "no simulated deployment 'q'"
