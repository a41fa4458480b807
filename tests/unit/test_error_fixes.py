"""Every typed error says what to do (its ``fix``), and the CLI's one error line carries it: no traceback."""

from __future__ import annotations

from vllmdiag.errors import BadInput, VllmdiagError, one_line


def _classes(cls: type) -> list[type]:
    subs: list[type] = cls.__subclasses__()  # typeshed gives a bare `type` list[type[Never]]
    return [cls] + [c for sub in subs for c in _classes(sub)]


def test_every_error_class_carries_its_own_one_line_fix() -> None:
    classes = _classes(VllmdiagError)
    assert len(classes) >= 10  # the base, BadInput, Unreachable and the seven BadInputs of the libraries
    for cls in classes:
        fix = cls.__dict__.get("fix")
        assert isinstance(fix, str) and fix and "\n" not in fix and len(fix) < 130, cls


def test_the_error_line_ends_with_the_fix_unless_the_message_gives_one() -> None:
    assert one_line(BadInput("bad --budget 'x'\nmore")) == f"bad --budget 'x' (fix: {BadInput.fix})"
    assert one_line(BadInput("no such node; fix: add it to the inventory")) == "no such node; fix: add it to the inventory"
