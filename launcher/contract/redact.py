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
# ...and every start of one, two letters or more (`hf-tok`): argparse expands abbreviations. A set, as
# `plan` checks every flag of every catalogue against it (~1,500 flags).
_SECRET_STARTS = frozenset(word[:end] for word in _SECRET_WORDS for end in range(2, len(word) + 1))


def is_secret_name(name: str) -> bool:
    """True for env names that may carry credentials (*TOKEN*, *SECRET*, *PASSWORD*, *KEY*, ...)."""
    return bool(_SECRET_NAME.search(name))


def flag_name(flag: str) -> str:
    """The option an engine's parser would see: `--HF_Token.x=v` is hf-token (vLLM reads `.x` as a
    key of the option's JSON value; `=` attaches the value)."""
    return flag.lstrip("-").split("=", 1)[0].split(".", 1)[0].replace("_", "-").lower()


def is_secret_flag(flag: str) -> bool:
    """True for CLI flags whose value is a credential; those values must travel in the env instead.
    A last word that begins a secret word (`--hf-tok`, `--api-ke`) counts too: argparse expands such
    abbreviations (roles/flags.py also checks them against the engines' own flag lists)."""
    return flag_name(flag).rpartition("-")[2] in _SECRET_STARTS


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Hide the values of any secret-looking flag (`--api-key X Y`, `--hf-token=X`, `-api-key X`)."""
    out: list[str] = []
    hiding = False
    for token in argv:
        if hiding and not token.startswith("-"):
            out.append(REDACTED)
        elif token.startswith("-") and "=" in token and is_secret_flag(token):
            out.append(token.split("=", 1)[0] + "=" + REDACTED)
            hiding = False
        else:
            out.append(token)
            hiding = token.startswith("-") and "=" not in token and is_secret_flag(token)
    return out


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of secret-named variables worth hiding in free text, and each line of a multi-line one
    (a PEM key: output is scrubbed line by line). Short or plain values are not credentials
    (TOKENIZERS_PARALLELISM=false, MAX_TOKENS=4096) and hiding them would garble logs."""
    values = {v for k, v in env.items() if is_secret_name(k)}
    pieces = {line.strip() for v in values for line in _LINE_END.split(v)}
    return sorted({v for v in values | pieces if len(v) >= 8 and not _PLAIN.match(v)}, key=len, reverse=True)


_LINE_END = re.compile(r"\r\n|\r|\n")  # where child output is cut into lines (supervise/logs.py)
_PLAIN = re.compile(r"^(true|false|yes|no|on|off|none|null|[0-9.]+)$", re.IGNORECASE)


class Scrubber:
    """Hides known secret values inside free text: child output, log lines, termination messages."""

    def __init__(self, values: Sequence[str]) -> None:
        self._values: tuple[str, ...] = ()
        self.learn(values)

    def learn(self, values: Sequence[str]) -> None:
        """Hide these too: a pod that parked before its plan existed learns the plan's secrets when it
        heals, and every log and output writer holding this scrubber follows."""
        self._values = tuple(dict.fromkeys((*self._values, *values)))
        values = sorted(self._values, key=len, reverse=True)  # the longest match wins
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None
        encoded = [v.encode() for v in values]
        self._bytes = re.compile(b"|".join(map(re.escape, encoded))) if encoded else None
        self.longest = max(map(len, encoded), default=0)  # bytes a cut must look ahead

    def __call__(self, text: str) -> str:
        return self._pattern.sub(REDACTED, text) if self._pattern else text

    def cut(self, data: bytes, limit: int) -> int:
        """Where to split `data` near `limit` without cutting a secret in two: before the secret
        that straddles `limit` (after it, when it starts the data). `data` must extend `longest`
        bytes past `limit` for every straddling secret to be seen whole."""
        if self._bytes is not None:
            for match in self._bytes.finditer(data, 0, limit + self.longest):
                if match.start() < limit < match.end():
                    return match.start() or match.end()
        return limit
