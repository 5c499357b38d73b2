"""The one redaction function every printed or logged mapping passes through."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "<redacted>"

# HF_TOKEN, *_API_KEY, AWS_SECRET_ACCESS_KEY, DB_PASSWORD, ...: the nouns Dynamo's config dump redacts
# (ai-dynamo/dynamo); LWS examples pass a literal $HF_TOKEN that would otherwise reach the logs.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL|AUTH", re.IGNORECASE)


# A flag carries a secret when its name ENDS in a secret noun: --api-key, --hf-token and
# --aws-secret-access-key do; --long-prefill-token-threshold, --return-tokens-as-token-ids and
# --allow-credentials (a CORS switch) do not.
_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "key", "apikey", "credential"})


def is_secret_name(name: str) -> bool:
    """True for env names that may carry credentials (*TOKEN*, *SECRET*, *PASSWORD*, *KEY*, ...)."""
    return bool(_SECRET_NAME.search(name))


def is_secret_flag(flag: str) -> bool:
    """True for CLI flags whose value is a credential; those values must travel in the env instead."""
    words = flag.lstrip("-").split("=", 1)[0].replace("_", "-").lower().split("-")
    return words[-1] in _SECRET_WORDS


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Hide the value of any secret-looking flag (`--api-key X`, `--hf-token=X`)."""
    out: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next and not token.startswith("-"):
            out.append(REDACTED)
            hide_next = False
        elif token.startswith("-") and "=" in token and is_secret_flag(token):
            out.append(token.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(token)
            hide_next = token.startswith("--") and "=" not in token and is_secret_flag(token)
    return out


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of secret-named variables worth hiding in free text. Short or plain values are not
    credentials (TOKENIZERS_PARALLELISM=false, MAX_TOKENS=4096) and hiding them would garble logs."""
    return sorted(
        {v for k, v in env.items() if is_secret_name(k) and len(v) >= 8 and not _PLAIN.match(v)},
        key=len,
        reverse=True,
    )


_PLAIN = re.compile(r"^(true|false|yes|no|on|off|none|null|[0-9.]+)$", re.IGNORECASE)


class Scrubber:
    """Hides known secret values inside free text: child output, log lines, termination messages."""

    def __init__(self, values: Sequence[str]) -> None:
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None

    def __call__(self, text: str) -> str:
        return self._pattern.sub(REDACTED, text) if self._pattern else text
