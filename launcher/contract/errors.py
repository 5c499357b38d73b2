"""User-facing configuration errors: one line per problem, naming the setting and the fix."""

from __future__ import annotations

from launcher.contract.record import record

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

    def line(self, severity: str = "error") -> str:
        """As printed: one line, even when a value in it holds a line break (escaped as \\n, \\x1e...)."""
        return f"llm-d-launcher: {severity}: {str(self).translate(_ESCAPED_BREAKS)}"


class ConfigError(Exception):
    """Bad input: reported as one line per problem with exit code 2, before anything is spawned."""

    exit_code = 2

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems

    @classmethod
    def one(cls, setting: str, message: str, fix: str) -> ConfigError:
        return cls([Problem(setting, message, fix)])
