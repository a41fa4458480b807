"""Typed reads of untrusted JSON objects for the model's ``from_dict``: a wrong shape is one line of
bad input (``SnapshotError``), never a KeyError deep inside analysis or render."""

from __future__ import annotations

from typing import Any

from vllmdiag.errors import BadInput


class SnapshotError(BadInput, ValueError):
    """Input that is not a snapshot (or report) we can read: one line, shown to the user as is."""

    fix = "pass a snapshot or report as vllmdiag wrote it (collect, --json, --save, sweep --save), unedited"


def expect_dict(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise SnapshotError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    return raw


def expect_list(raw: Any, where: str) -> list[Any]:
    if not isinstance(raw, list):
        raise SnapshotError(f"{where}: expected a JSON list, got {type(raw).__name__}")
    return raw


def text(obj: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise SnapshotError(f"{where}.{key}: expected a string")
    return value


def opt_text(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise SnapshotError(f"{where}.{key}: expected a string or null")
    return value


def integer(obj: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SnapshotError(f"{where}.{key}: expected an integer")
    return value


def opt_int(obj: dict[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise SnapshotError(f"{where}.{key}: expected an integer or null")
    return value


def number(obj: dict[str, Any], key: str, where: str, default: float = 0.0) -> float:
    value = obj.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise SnapshotError(f"{where}.{key}: expected a number")
    return float(value)


def texts(obj: dict[str, Any], key: str, where: str) -> list[str]:
    items = expect_list(obj.get(key, []), f"{where}.{key}")
    if not all(isinstance(i, str) for i in items):
        raise SnapshotError(f"{where}.{key}: expected a list of strings")
    return list(items)


def ints(obj: dict[str, Any], key: str, where: str) -> list[int]:
    items = expect_list(obj.get(key, []), f"{where}.{key}")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise SnapshotError(f"{where}.{key}: expected a list of integers")
    return list(items)


def one_of(obj: dict[str, Any], key: str, allowed: tuple[str, ...], where: str) -> str:
    value = obj.get(key)
    if value not in allowed:
        raise SnapshotError(f"{where}.{key}: {value!r} is not one of {', '.join(allowed)}")
    return str(value)
