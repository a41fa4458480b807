"""Secrets never reach output: one redaction for argv, environments and any text we print or store.

Used by the probes (command lines, titles, environments, reasons) and the fleet (remote stderr in node
reasons). Two kinds of evidence: the *name* a value comes under (``--api-key X``, ``--token=X``,
``HF_TOKEN=X``, ``"api_key": "X"``) and the *shape* of well-known credentials wherever they stand
(``sk-...``, ``hf_...``, ``Bearer ...``, AWS key ids, JWTs, ``user:pass@`` in URLs), because a secret
also hides inside one argument (``sh -c "vllm serve --api-key sk-..."``), a setproctitle title with
spaces or an unrelated flag (``-k sk-...``).

Linear time by construction (issue 15 item 2: a quadratic pattern on one 20,000-character argument
held the GIL for 37 s): every string is cut to ``MAX_CHARS`` first, every pattern starts only at a
word boundary (a fixed lookbehind) and repeats one character class that cannot overlap what follows.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
MAX_CHARS = 4096  # per argument, environment value or line of text; longer ones are cut (and say so)

# A name that announces a secret. Not "tokens"/"tokenizer" (--max-num-batched-tokens, --tokenizer) nor "author".
_WORD = r"(?:token(?!s|iz)|secret|passw(?:or)?d|api[-_]?key|access[-_]?key|private|credential|auth(?!or))"
_SECRET_NAME = re.compile(_WORD, re.I)
_B = r"(?<![A-Za-z0-9_-])"  # a word boundary for tokens that may contain '-' and '_'
# Credentials recognisable by their shape alone.
_SHAPED = re.compile(_B + r"(?:sk-[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{10,}|gh[pousr]_[A-Za-z0-9]{16,}|glpat-[A-Za-z0-9_-]{16,}"
                     r"|xox[abposr]-[A-Za-z0-9-]{8,}|(?:AKIA|ASIA)[A-Z0-9]{16}"
                     r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*)")
_SCHEME = re.compile(r"(?<![A-Za-z])((?:[Bb]earer|BEARER|[Bb]asic|BASIC)[ \t]{1,4})[A-Za-z0-9._~+/=-]+")
_URL_PASSWORD = re.compile(r"(?<=://)([^/:@\s]{1,256}:)[^@/\s]{1,256}@")
# NAME=value, NAME: value, "NAME": "value" (env prefixes, headers, JSON, YAML) where NAME holds a secret
# word. Bounded name parts, tried only at a word start: at most 64 x 64 steps per start.
_NAMED = re.compile(r"(?<![A-Za-z0-9_.-])([A-Za-z0-9_.-]{0,63}?" + _WORD + r"[A-Za-z0-9_.-]{0,63})"
                    r"([ \t]{0,3}=[ \t]{0,3}[\"']?|[\"']?[ \t]{0,3}:(?:[ \t]{1,3}[\"']?|[\"']))([^\s\"',;&]+)", re.I)
_SPACE = re.compile(r"(\s+)")


def cap(text: str, limit: int = MAX_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}...[{len(text) - limit} more chars]"


def is_secret_name(name: str) -> bool:
    return len(name) <= 256 and _SECRET_NAME.search(name) is not None


def redact_text(text: str, limit: int = MAX_CHARS) -> str:
    """Free text (one argument with spaces, a title, a line of stderr): flags, names and shapes."""
    text = cap(text, limit)
    if _SPACE.search(text):
        text = "".join(_flags(_SPACE.split(text), spaced=True))
    return _shapes(text)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line: ``--secret-flag VALUE`` and ``--secret-flag=VALUE`` by name, everything else by shape."""
    return [_shapes(cap(a)) if a == REDACTED or not _SPACE.search(a) else redact_text(a)
            for a in _flags([cap(a) for a in argv], spaced=False)]


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else redact_text(v)) for k, v in env.items()}


def _flags(tokens: list[str], spaced: bool) -> list[str]:
    """Hide the value after a secret flag, and the part after '=' of ``--secret-flag=value``.
    ``spaced``: tokens alternate with the whitespace that separated them (re.split with a group)."""
    out: list[str] = []
    hide_next = False
    for tok in tokens:
        if spaced and (not tok or tok.isspace()):
            out.append(tok)
            continue
        if hide_next and not tok.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name, sep, _ = tok.partition("=")
        if tok.startswith("-") and is_secret_name(name):
            if sep:
                tok = f"{name}={REDACTED}"
            else:
                hide_next = True
        out.append(tok)
    return out


def _shapes(text: str) -> str:
    if len(text) < 8:
        return text
    text = _SHAPED.sub(REDACTED, text)
    text = _SCHEME.sub(lambda m: m.group(1) + REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + "@", text)
    return _NAMED.sub(_named, text)


def _named(m: re.Match[str]) -> str:
    name, sep, value = m.group(1), m.group(2), m.group(3)
    if value == REDACTED or value.lower() in ("bearer", "basic"):
        return m.group(0)
    return f"{name}{sep}{REDACTED}"
