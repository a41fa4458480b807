"""Shared pytest setup. Every test cleans up what it starts; see tests/fake_tree.py and the
simulator's own fixtures."""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
# tests/ holds the shared helpers and data; tests/unit/ the pure tests, tests/live/ the ones that start something.
# All three on sys.path: a live module imports the helpers its pure half defines (``from test_x import ...``)
# whichever file pytest collects first.
_HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(_HERE), str(_HERE / "unit"), str(_HERE / "live")]


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("VLLMDIAG_TESTING", "1")
    # watch's default --out and what triage reads of a watcher: a private directory for the run (as root the
    # default is the machine's /var/lib/vllmdiag/watch: a test's watcher must not leave triage a memory there,
    # nor a real watcher's state reach a test's triage).
    if "VLLMDIAG_WATCH_DIR" not in os.environ:
        import tempfile

        os.environ["VLLMDIAG_WATCH_DIR"] = _WATCH_DIR[0] = tempfile.mkdtemp(prefix="vllmdiag-test-watch-")


_WATCH_DIR = [""]


def pytest_unconfigure(config: pytest.Config) -> None:
    if _WATCH_DIR[0]:
        import shutil

        shutil.rmtree(_WATCH_DIR[0], ignore_errors=True)


# ---- fast pure tests and live ones (issue 27) ------------------------------------------------------
# A test is live when it starts something: the simulator, a subprocess, a namespace, sshd, a real vLLM, a
# socket, a collection on this host (triage, the CLI). Decided per test from what it runs: its own code, the
# module helpers it calls and the fixtures it uses (transitively), never from a list someone forgets to
# update. `pytest -m unit` runs the pure ones (analysis, render, parsers: seconds), `-m live` the rest;
# the README's one command runs both. Source that cannot be read counts as live.
LIVE_WORDS = re.compile(r"sim_state|sim_fixtures|fleet_fixtures|fake_tree|vllmdiag_sim|subprocess|Popen|multiprocessing"
                        r"|os\.fork|sshd|unshare|nsenter|real_vllm|socket\.socket|\bzmq\b|cpu_hog|\btriage\(|collect_node"
                        r"|collect_bounded|run_probes|CliRunner|\.invoke\(|\bmain\(|\bsweep\(|\bwatch\(|run_cli|_run\(")


TESTS = Path(__file__).resolve().parent


def _code_names(code: Any) -> set[str]:
    names = set(code.co_names) | set(code.co_varnames)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


@functools.cache
def _live_func(func: Any) -> bool:
    """Whether ``func`` (a test, a fixture or a helper) or a same-module function it names starts something."""
    import inspect

    seen: set[Any] = set()
    todo = [inspect.unwrap(func)]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        try:
            if LIVE_WORDS.search(inspect.getsource(f)):
                return True
        except (OSError, TypeError):
            return True
        module = sys.modules.get(getattr(f, "__module__", ""))
        codes = [getattr(f, "__code__", None)] + [getattr(m, "__code__", None) for m in vars(f).values()] \
            if inspect.isclass(f) else [getattr(f, "__code__", None)]
        for name in {n for c in codes if c is not None for n in _code_names(c)}:
            helper = getattr(module, name, None)
            if (inspect.isfunction(helper) or inspect.isclass(helper)) and _ours(helper):
                todo.append(helper)  # a helper of the tests (this module's, or tests/real_vllm's server)
            elif _helper_module_live(name, helper):
                return True  # `import liveness_scenario` (in the test or at the top) then liveness_scenario.run()
    return False


def _helper_module_live(name: str, obj: Any) -> bool:
    """A module of the test helpers (tests/*.py, not a test module) that the test names starts something."""
    import inspect

    path = Path(inspect.getfile(obj)) if inspect.ismodule(obj) and _ours(obj) else TESTS / f"{name}.py"
    if path.name.startswith(("test_", "conftest")) or path.parent not in (TESTS, TESTS / "real_vllm") \
            or not path.is_file():
        return False  # a test module, or a file of tests/data/ loaded for its tables (stacks/fake_rank.py)
    try:
        return bool(LIVE_WORDS.search(path.read_text(encoding="utf-8")))
    except OSError:
        return True


def _ours(obj: Any) -> bool:
    import inspect

    try:
        return Path(inspect.getfile(obj)).resolve().is_relative_to(TESTS)
    except (OSError, TypeError):
        return False


SESSION_INFRA: set[Any] = set()


def is_live(item: pytest.Item) -> bool:
    func = getattr(item, "function", None)
    if func is None or _live_func(func):
        return True
    info = getattr(item, "_fixtureinfo", None)  # every fixture it uses, the fixtures' fixtures included
    defs = [d for ds in (info.name2fixturedefs.values() if info is not None else ()) for d in ds]
    return any(_live_func(d.func) for d in defs if d.func not in SESSION_INFRA
               and not str(getattr(d.func, "__module__", "")).startswith("_pytest"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The session's own autouse fixtures (the optional CPU hog, the leftover sweep) wrap every test alike:
    # they say nothing about what a test starts.
    SESSION_INFRA.update(f.__wrapped__ if hasattr(f, "__wrapped__") else f for f in (_session_cpu_hog, _session_cleanup))
    misplaced = []
    for item in items:
        kind = "live" if is_live(item) else "unit"
        item.add_marker(getattr(pytest.mark, kind))
        folder = Path(str(item.path)).parent.name
        if folder in ("unit", "live") and folder != kind:
            misplaced.append(f"{item.nodeid} (it is {kind}: move it to tests/{kind}/)")
    # The folders are the markers, checked: a test in the wrong one stops the run before anything runs.
    if misplaced:
        raise pytest.UsageError("tests in the wrong folder (tests/conftest.py decides from what each one runs):\n  "
                                + "\n  ".join(misplaced))


# ---- CPU hog (issue 15, item 15): the suite must hold with a busy core beside it ------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-hog", type=int, default=int(os.environ.get("VLLMDIAG_CPU_HOG") or 0), metavar="N",
                     help="run N bounded busy-loop processes beside the whole session (bench/cpu_hog.py)")


def _hog_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllmdiag_bench_cpu_hog", ROOT / "bench" / "cpu_hog.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session", autouse=True)
def _session_cpu_hog(request: pytest.FixtureRequest) -> Any:
    n = int(request.config.getoption("--cpu-hog") or 0)
    if n <= 0:
        yield None
        return
    hog = _hog_module()
    hogs = hog.start(n, seconds=hog.MAX_SECONDS)
    _HOG_RUN.append(n)
    try:
        yield hogs
    finally:
        hog.stop(hogs)


@pytest.fixture
def cpu_hog() -> Any:
    """One busy-looping process for the duration of this test (bounded to 5 minutes), then killed."""
    hog = _hog_module()
    hogs = hog.start(1, seconds=300)
    try:
        yield hogs
    finally:
        hog.stop(hogs)


_HOG_RUN: list[int] = []


@pytest.fixture
def shared_data() -> Path:
    path = SHARED / "data" / "vllm-0.33.0"
    if not path.exists():
        pytest.skip(f"shared fixtures not found at {path}")
    return path


requires_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


class ReliabilityCounter:
    """Counts reliability cases so the run ends with one honest line: tried, hangs, writes, tracebacks,
    and unsafe outcomes (a foreign binary run, a secret printed, a target signalled that we did not stop)."""

    def __init__(self) -> None:
        self.cases = self.hangs = self.writes = self.tracebacks = self.unsafe = 0

    def case(self, *, hang: bool = False, write: bool = False, traceback: bool = False, unsafe: bool = False) -> None:
        self.cases += 1
        self.hangs += int(hang)
        self.writes += int(write)
        self.tracebacks += int(traceback)
        self.unsafe += int(unsafe)


_COUNTER = ReliabilityCounter()


@pytest.fixture
def reliability() -> ReliabilityCounter:
    return _COUNTER


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    _print_matrix(terminalreporter)
    if _HOG_RUN:
        terminalreporter.write_line(f"cpu hog: {_HOG_RUN[0]} busy-loop process(es) ran beside this session")
    if _LEFTOVERS:
        terminalreporter.write_line("cleanup: tests left behind (now removed): " + ", ".join(_LEFTOVERS[:20]))
    c = _COUNTER
    if c.cases:
        terminalreporter.write_line(
            f"reliability: {c.cases} cases tried, hangs {c.hangs}, writes {c.writes}, tracebacks {c.tracebacks}, "
            f"unsafe {c.unsafe}")


class AccuracyMatrix:
    def __init__(self) -> None:
        self.rows: dict[str, dict[int, str]] = {}

    def record(self, fault: str, tp: int, seen: str, ok: bool) -> None:
        self.rows.setdefault(fault, {})[tp] = ("ok " if ok else "MISS ") + seen


_MATRIX = AccuracyMatrix()


@pytest.fixture
def accuracy_matrix() -> AccuracyMatrix:
    return _MATRIX


def _print_matrix(terminalreporter: pytest.TerminalReporter) -> None:
    if not _MATRIX.rows:
        return
    tps = sorted({tp for row in _MATRIX.rows.values() for tp in row})
    terminalreporter.write_line("accuracy matrix (fault x TP):")
    terminalreporter.write_line(f"  {'fault':22}" + "".join(f"{'TP=' + str(tp):28}" for tp in tps))
    for fault, row in _MATRIX.rows.items():
        terminalreporter.write_line(f"  {fault:22}" + "".join(f"{row.get(tp, '-'):28}" for tp in tps))


# ---- the last line of clean-up: nothing a test started survives the session ------------------------
_LEFTOVERS: list[str] = []


def _sim_processes(marker: str) -> list[int]:
    """Processes started by the simulator for this session (their environment names our state dirs)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if marker.encode() in env:
            out.append(int(name))
    return out


def _our_segments(base: Path) -> set[str]:
    """psm_* names the simulator recorded under this session's own state dirs (rings its processes
    created, leaks it planted). Only these may be removed: other runs and real deployments share
    /dev/shm, and an unmapped segment of theirs is not ours to delete."""
    names: set[str] = set()
    for record in [*base.rglob("segments.txt"), *base.rglob("state.json")]:
        try:
            text = record.read_text(errors="replace")
        except OSError:
            continue
        if record.name == "state.json":
            try:
                data = json.loads(text)
            except ValueError:
                continue
            found = data.get("leaked", []) + data.get("leaked_segments", []) if isinstance(data, dict) else []
        else:
            found = text.split()
        names.update(n for n in found if isinstance(n, str) and n.startswith("psm_") and "/" not in n)
    return names


def _mapped_shm() -> set[str]:
    names: set[str] = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/maps") as fh:
                    names.update(line.rsplit("/", 1)[1].split()[0] for line in fh if "/dev/shm/psm_" in line)
            except (OSError, IndexError):
                continue
    return names


@pytest.fixture(scope="session", autouse=True)
def _session_cleanup(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import signal

    base = tmp_path_factory.getbasetemp()
    state = base / "sim-state"
    state.mkdir(exist_ok=True)
    old = os.environ.get("VLLMDIAG_SIM_STATE")
    os.environ["VLLMDIAG_SIM_STATE"] = str(state)
    yield
    if old is None:
        os.environ.pop("VLLMDIAG_SIM_STATE", None)
    else:
        os.environ["VLLMDIAG_SIM_STATE"] = old
    # Only what the simulator started carries VLLMDIAG_SIM_DIR (pytest's own children, such as its
    # multiprocessing resource tracker, inherit our other variables and are not leftovers).
    for pid in _sim_processes(f"VLLMDIAG_SIM_DIR={base}"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                what = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()[:80]
        except OSError:
            what = "?"
        _LEFTOVERS.append(f"process {pid} ({what})")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    mapped = _mapped_shm()
    for name in sorted(_our_segments(base) - mapped):
        if not os.path.exists(f"/dev/shm/{name}"):
            continue
        _LEFTOVERS.append(f"/dev/shm/{name}")
        try:
            os.unlink(f"/dev/shm/{name}")
        except OSError:
            pass


# Reliability cases written before the counter fixture existed, by what they prove. A failing one
# counts as a hang, a write or a traceback; every one that runs counts as a case tried.
RELIABILITY_TESTS = {
    "hang": ("test_stopped_target_is_read_in_bounded_time_and_stays_stopped", "test_d_state_target_is_read_in_bounded_time",
             "test_sigcont_restores_a_target_our_killed_py_spy_left_stopped", "test_a_hanging_query_is_killed_at_the_deadline",
             "test_silent_tcp_listener_gets_no_byte_and_times_out", "test_full_backlog_black_hole_is_bounded",
             "test_stale_and_missing_ipc_paths", "test_dead_nodes_listed_and_sweep_ends_on_time",
             "test_whole_sweep_deadline_kills_hung_nodes", "test_many_silent_listeners_fit_the_zmtp_budget",
             "test_get_refused_and_timeout_are_results", "test_silent_server_and_no_server_end_in_bounded_time",
             "test_wedged_deployment_fails_one_token_check_within_deadline",
             "test_sampling_overlaps_the_other_probes_and_respects_the_deadline"),
    "write": ("test_check_delivers_no_message_and_no_subscription", "test_probe_never_modifies_a_segment",
              "test_workers_tcp_listeners_are_never_dialed", "test_non_zmtp_speaker_is_not_answered"),
    "traceback": ("test_fuzz_decoder_never_raises", "test_fuzz_scan_chunk", "test_fuzz_decoder_on_solvable_sizes",
                  "test_hostile_names_rejected", "test_cli_rejects_hostile_names_and_runs_nothing", "test_bad_inventory",
                  "test_non_vllm_segments_are_rejected_with_a_reason", "test_bad_usage_and_config_exit_2_with_one_line",
                  "test_malformed_snapshot_one_line_exit_2", "test_any_json_value", "test_corrupted_probe_data",
                  "test_corrupted_real_snapshot", "test_hostfile_longer_than_the_cap_is_refused"),
    # issue 15 (hardening): a foreign binary run as root, a secret that reaches output, a signal to a target
    # we did not stop, an ssh option that runs a command.
    "unsafe": ("test_ship_never_runs_a_decoy_python", "test_ship_python_pointing_at_a_user_file_is_refused",
               "test_snippet_refuses_writable_directories_and_non_pythons",
               "test_secrets_in_one_argument_titles_short_flags_and_env_values_are_redacted",
               "test_remote_stderr_in_a_sweep_reason_is_redacted", "test_value_shapes_and_names_in_free_text",
               "test_inventory_ssh_options_are_allow_listed", "test_allowed_ssh_options_come_after_ours"),
}
_KIND = {name: kind for kind, names in RELIABILITY_TESTS.items() for name in names}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    kind = _KIND.get(report.nodeid.split("::")[-1].split("[")[0])
    if kind is None:
        return
    _COUNTER.case(hang=kind == "hang" and report.failed, write=kind == "write" and report.failed,
                  traceback=kind == "traceback" and report.failed, unsafe=kind == "unsafe" and report.failed)
