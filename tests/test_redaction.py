"""Secrets in environments and command lines never reach a snapshot."""

from __future__ import annotations

import json

from vllmdiag.api import triage
from vllmdiag.probes._procfs import redact_argv, redact_env

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


def test_redaction_rules() -> None:
    assert redact_argv(["serve", "--api-key", "k", "--token=t", "--port", "8000"]) == [
        "serve", "--api-key", "<redacted>", "--token=<redacted>", "--port", "8000"]
    assert redact_argv(["Authorization: Bearer abc.def"]) == ["Authorization: Bearer <redacted>"]
    assert redact_argv(["https://u:pw@host/x"]) == ["https://u:<redacted>@host/x"]
    assert redact_env({"AWS_SECRET_ACCESS_KEY": "x", "MY_PASSWORD": "y", "VLLM_PORT": "8000"}) == {
        "AWS_SECRET_ACCESS_KEY": "<redacted>", "MY_PASSWORD": "<redacted>", "VLLM_PORT": "8000"}
