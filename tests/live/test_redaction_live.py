"""Secrets in environments and command lines never reach a snapshot."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from vllmdiag.api import collect, triage

from fake_tree import fake_tree

SECRETS = ("hf_SeCrEtToKeN123", "sk-LiVeKey999", "p4ssw0rd!", "AKIAEXAMPLEKEY")


def test_live_snapshot_has_no_secrets() -> None:
    env = {"HF_TOKEN": SECRETS[0], "VLLM_API_KEY": SECRETS[1], "NCCL_DEBUG": "INFO",
           "VLLM_DB_URL": f"postgres://user:{SECRETS[2]}@db/x"}
    with fake_tree(tp=2, extra_args=("--api-key", SECRETS[1], f"--hf-token={SECRETS[0]}"), env=env) as t:
        res = triage(pids=[t.api], probes=["processes"], budget_s=5)
        text = res.to_json()
        for secret in SECRETS[:3]:
            assert secret not in text
        api = next(p for p in res.report.snapshots[0].data("processes")["processes"] if p["pid"] == t.api)
        assert api["environ"]["NCCL_DEBUG"] == "INFO"  # useful, non-secret values stay
        assert api["environ"]["HF_TOKEN"] == "<redacted>"
        assert "--api-key" in api["cmdline"] and "<redacted>" in api["cmdline"]
        assert json.loads(text)["snapshot"]["probes"]["processes"]["status"] == "ok"


# ---- issue 15 item 12: secrets inside one argument, in titles with spaces, behind short flags, in env
# values and in a remote node's stderr --------------------------------------------------------------------
LEAKS = {"one_arg": "sk-OneArgSecret0001", "short_flag": "sk-ShortFlagSecret02", "in_title": "TitleSecret03xyz",
         "bearer_env": "BearerEnvSecret04", "url_env": "UrlEnvPw05", "hf_env": "hf_EnvValueSecret06",
         "aws_arg": "AKIAABCDEFGHIJKLMNOP", "json_arg": "JsonArgSecret07"}


@contextlib.contextmanager
def titled(title: str) -> Iterator[int]:
    """A process that retitles itself the way vLLM does (setproctitle): one cmdline string with spaces."""
    code = f"import setproctitle, time; setproctitle.setproctitle({title!r}); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{proc.pid}/cmdline").read_bytes().startswith(title.encode()[:20]):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_secrets_in_one_argument_titles_short_flags_and_env_values_are_redacted() -> None:
    env = {"VLLM_EXTRA_HEADERS": f"Authorization: Bearer {LEAKS['bearer_env']}",
           "VLLM_MIRROR_URL": f"https://user:{LEAKS['url_env']}@mirror.example/x", "NCCL_NOTE": f"key {LEAKS['hf_env']}"}
    args = ("--chat-template", f"sh -c 'vllm serve m --api-key {LEAKS['one_arg']}'", "-k", LEAKS["short_flag"],
            "--served-model-name", f"AWS {LEAKS['aws_arg']}", "--kv-transfer-config",
            json.dumps({"api_key": LEAKS["json_arg"]}))
    with fake_tree(tp=1, extra_args=args, env=env) as t, \
            titled(f"VLLM::Worker_TP7 serve m --api-key {LEAKS['in_title']} --port 8000") as worker:
        snap = collect(probes=["processes"], budget_s=5)
        text = json.dumps(snap.to_dict())
        leaked = [name for name, secret in LEAKS.items() if secret in text]
        assert leaked == [], f"leaked: {leaked}"
        procs = {p["pid"]: p for p in snap.data("processes")["processes"]}
        assert procs[t.api]["environ"]["VLLM_EXTRA_HEADERS"] == "Authorization: Bearer <redacted>"
        assert "--port 8000" in procs[worker]["title"]  # the rest of the title stays readable
        assert "--served-model-name" in procs[t.api]["cmdline"]


def test_remote_stderr_in_a_sweep_reason_is_redacted(tmp_path: Path) -> None:
    node = tmp_path / "node"
    node.write_text(f"#!/bin/sh\necho 'curl -H \"Authorization: Bearer {LEAKS['bearer_env']}\" failed: "
                    f"token={LEAKS['json_arg']} key {LEAKS['one_arg']}' >&2\nexit 3\n")
    node.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", "sweep", "n1", "--exec", f"{node} %h", "--json",
                           "--timeout", "10"], capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["nodes"][0]["status"] == "error"
    assert [s for s in LEAKS.values() if s in out] == [] and "<redacted>" in out
