"""The pure tests of tests/live/test_redaction_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag.probes._procfs import redact_argv, redact_env
from vllmdiag.redact import redact_text


def test_redaction_rules() -> None:
    assert redact_argv(["serve", "--api-key", "k", "--token=t", "--port", "8000"]) == [
        "serve", "--api-key", "<redacted>", "--token=<redacted>", "--port", "8000"]
    assert redact_argv(["Authorization: Bearer abc.def"]) == ["Authorization: Bearer <redacted>"]
    assert redact_argv(["https://u:pw@host/x"]) == ["https://u:<redacted>@host/x"]
    assert redact_env({"AWS_SECRET_ACCESS_KEY": "x", "MY_PASSWORD": "y", "VLLM_PORT": "8000"}) == {
        "AWS_SECRET_ACCESS_KEY": "<redacted>", "MY_PASSWORD": "<redacted>", "VLLM_PORT": "8000"}


def test_value_shapes_and_names_in_free_text() -> None:
    assert redact_argv(["serve", "-k", "sk-abcdefgh12345678"]) == ["serve", "-k", "<redacted>"]
    assert redact_argv(["sh", "-c", "vllm serve m --api-key K1 --port 1"]) == [
        "sh", "-c", "vllm serve m --api-key <redacted> --port 1"]
    assert redact_argv(["VLLM::APIServer --token=abc --max-num-batched-tokens 8192 --tokenizer t"]) == [
        "VLLM::APIServer --token=<redacted> --max-num-batched-tokens 8192 --tokenizer t"]
    assert redact_env({"VLLM_X": "HF_TOKEN=hf_abcdefghijkl rest", "VLLM_Y": '{"password": "pw1"}'}) == {
        "VLLM_X": "HF_TOKEN=<redacted> rest", "VLLM_Y": '{"password": "<redacted>"}'}
    assert redact_text("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4f") == "jwt <redacted>"
    assert redact_text("x" * 10_000).endswith("[5904 more chars]")  # bounded
    # a boolean flag named like a secret does not swallow the next flag
    assert redact_argv(["--enable-auth", "--port", "8000"]) == ["--enable-auth", "--port", "8000"]
