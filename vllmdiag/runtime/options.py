"""What a collection is asked to do: one typed, frozen object built once by the command's door.

The probes read attributes (``ctx.options.cheap``), never string keys. The snapshot keeps today's
``options`` JSON: ``to_dict`` writes back exactly the keys that were given, in the order given, with the
values as given (a ``--rates 5`` stays ``5``, a pid list stays a list), so a saved snapshot's shape does
not depend on this class. A key no field knows (an older or newer writer, a test's extra) is kept
verbatim rather than refused. The dict form is the disk form: a field renamed since (``DISK_KEYS``) keeps
its old key there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, overload

# The snapshot's ``options`` is a contract read back from disk (analyze of a saved file, the rates
# findings' ``options.get("watch_s")``, older and newer versions alike), so a field renamed for its
# meaning keeps its old key there: "watch" now means the resident watcher only (issue 36 item 4).
DISK_KEYS: dict[str, str] = {"rates_s": "watch_s"}  # field name -> its key in the dict (disk) form
FIELD_OF: dict[str, str] = {key: name for name, key in DISK_KEYS.items()}


@dataclass(frozen=True)
class CollectOptions:
    # -- the commands' own options (triage, collect) --------------------------------------------------
    native: bool = False  # py-spy --native
    nonblocking: bool = False  # py-spy --nonblocking
    nccl_ras: bool = False  # opt-in probe: query NCCL RAS
    probe_request: bool = False  # http: send one completion request
    preflight: bool = False  # opt-in probe: the gate's host facts
    pids: tuple[int, ...] | None = None  # --pid: the deployments to look at
    node: str | None = None  # the node's name in the snapshot (collect --node; the watcher's)
    boost: bool = True  # take SCHED_FIFO (False: --no-boost)
    rates_s: float = 0.0  # --rates: samplers observe at least this long (on disk: "watch_s")
    # -- set by the orchestrator for its own passes ----------------------------------------------------
    cheap: bool = False  # the watcher's pass every few seconds: the cheapest looks only
    stack_pids: tuple[int, ...] | None = None  # the second look: dump only these
    confirm_pass: bool = False  # a follow-up pass of the confirm window
    # -- probe tuning (tests, the gate) ---------------------------------------------------------------
    probe_request_timeout_s: float = 8.0
    nccl_ras_host: str | None = None
    nccl_ras_port: int | None = None
    kmsg_path: str | None = None
    nvml_timeout_s: float | None = None
    zmtp_timeout_s: float | None = None
    sys_root: str = "/sys"
    # -- the gate (vllmdiag gate, sweep --gate) -------------------------------------------------------
    gate_ports: tuple[int, ...] = ()
    gate_tp: int | None = None
    gate_url: str | None = None
    gate_health_timeout_s: float = 3.0
    gate_completion_deadline_s: float = 10.0
    gate_model: str | None = None
    # -- how it was given: what to_dict writes back --------------------------------------------------
    given: tuple[str, ...] = field(default=(), repr=False)  # the keys, in the order given
    extra: tuple[tuple[str, Any], ...] = field(default=(), repr=False)  # keys no field knows, verbatim

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> CollectOptions:
        """The options from their JSON/dict form (a test's, the gate's, an older caller's). Lists become
        tuples (the object is frozen); unknown keys are kept, not refused."""
        raw = {DISK_KEYS.get(k, k): v for k, v in raw.items()}  # a typed name given as a key: its disk key
        known = {f.name for f in fields(cls)} - {"given", "extra"}
        values: dict[str, Any] = {FIELD_OF.get(k, k): (tuple(v) if isinstance(v, list) else v)
                                  for k, v in raw.items() if FIELD_OF.get(k, k) in known}
        extra = tuple((k, v) for k, v in raw.items() if FIELD_OF.get(k, k) not in known)
        return cls(**values, given=tuple(raw), extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The snapshot's ``options``: the given keys, in order, values as given (tuples as lists)."""
        extra = dict(self.extra)
        out: dict[str, Any] = {}
        for key in self.given:
            value = extra[key] if key in extra else getattr(self, FIELD_OF.get(key, key))
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def merged(self, more: Mapping[str, Any] | CollectOptions) -> CollectOptions:
        """These options updated by ``more`` as a dict update would (a known key keeps its place)."""
        return CollectOptions.from_dict({**self.to_dict(), **(more.to_dict() if isinstance(more, CollectOptions)
                                                               else more)})

    def without(self, *keys: str) -> CollectOptions:
        """These options less ``keys`` (field names or their disk keys)."""
        drop = {DISK_KEYS.get(k, k) for k in keys}
        return CollectOptions.from_dict({k: v for k, v in self.to_dict().items() if k not in drop})

    def turned_on(self) -> set[str]:
        """The names given a true value: an option named like an opt-in probe (nccl_ras, preflight, a
        future one from --enable) turns that probe on (the registry ignores names it has no probe for)."""
        return {k for k, v in self.to_dict().items() if v}


def collect_options(*, native: bool, nonblocking: bool, nccl_ras: bool, enable: Mapping[str, bool],
                    probe_request: bool | None = None, preflight: bool | None = None,
                    pids: list[int] | None = None, node: str | None = None, no_boost: bool = False,
                    rates_s: float = 0.0) -> CollectOptions:
    """The one builder from what a door (triage, collect) was given. ``None`` (or an empty/false value
    where noted) leaves a key out of the snapshot, as each door always did: triage has no --preflight,
    collect no --probe-request; ``pids``, ``node``, ``rates_s`` only when given; ``boost`` only when off."""
    raw: dict[str, Any] = {"native": native, "nonblocking": nonblocking, "nccl_ras": nccl_ras}
    if probe_request is not None:
        raw["probe_request"] = probe_request
    if preflight is not None:
        raw["preflight"] = preflight
    raw.update(enable)  # here: triage's snapshot always had --enable's keys before boost and rates_s
    if pids:
        raw["pids"] = list(pids)
    if node:
        raw["node"] = node
    if no_boost:
        raw["boost"] = False
    if rates_s:
        raw[DISK_KEYS["rates_s"]] = rates_s
    return CollectOptions.from_dict(raw)


def as_options(given: CollectOptions | Mapping[str, Any] | None) -> CollectOptions:
    """What an API caller passed (the object, a plain dict from a test or an older caller, or nothing)."""
    if isinstance(given, CollectOptions):
        return given
    return CollectOptions.from_dict(given or {})


class Parsed:
    """A Context field that holds a CollectOptions but also takes a dict (``Context(options={...})``, as
    tests and older callers write it): parsed once, on assignment; read back, always the typed object."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_" + name

    @overload
    def __get__(self, obj: None, owner: Any) -> CollectOptions: ...
    @overload
    def __get__(self, obj: object, owner: Any) -> CollectOptions: ...

    def __get__(self, obj: object | None, owner: Any) -> CollectOptions:
        if obj is None:  # the dataclass asks the class for the field's default
            return CollectOptions()
        opts: CollectOptions = getattr(obj, self.slot, CollectOptions())
        return opts

    def __set__(self, obj: object, value: CollectOptions | Mapping[str, Any] | None) -> None:
        object.__setattr__(obj, self.slot, as_options(value))
