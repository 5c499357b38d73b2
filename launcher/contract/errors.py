"""User-facing configuration errors: one line per problem, naming the setting and the fix."""

from __future__ import annotations

from collections.abc import Callable

from launcher.contract.record import record

# Characters of a problem's message shown: a value echoed whole (100 KB of LLMD_EXTRA_ARGS) pushed the
# fix off the screen, and out of the 4 KiB termination message with every problem after it.
MAX_SHOWN = 400
_HEAD, _TAIL = 300, 80

# What str.splitlines breaks lines on, and many log readers too, as Python writes them escaped.
_ESCAPED_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


@record
class Problem:
    """One thing wrong with the pod's configuration, phrased for the person who can fix it."""

    setting: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.setting}: {self.message}; {self.fix}"

    def shown(self, scrub: Callable[[str], str] = str) -> str:
        """As people read it: known secrets hidden first (a cut must not leave half of one to see),
        then a long message cut in its middle, so the setting and the fix stay whole."""
        message = scrub(self.message)
        if len(message) > MAX_SHOWN:
            hidden = len(message) - _HEAD - _TAIL
            message = f"{message[:_HEAD]} … ({hidden} characters not shown) … {message[-_TAIL:]}"
        return f"{scrub(self.setting)}: {message}; {scrub(self.fix)}"

    def line(self, severity: str = "error", scrub: Callable[[str], str] = str) -> str:
        """As printed: one line, even when a value in it holds a line break (escaped as \\n, \\x1e...)."""
        return f"llm-d-launcher: {severity}: {self.shown(scrub).translate(_ESCAPED_BREAKS)}"


class ConfigError(Exception):
    """Bad input: reported as one line per problem with exit code 2, before anything is spawned."""

    exit_code = 2

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems

    @classmethod
    def one(cls, setting: str, message: str, fix: str) -> ConfigError:
        return cls([Problem(setting, message, fix)])
