"""One way to wait for a pod's endpoint in every tier: poll until its body matches, fail at once with
the pod's logs when it died, and name the last body when time runs out."""

from __future__ import annotations

import re
import time
from collections.abc import Callable


def wait_for(
    url: str,
    get: Callable[[str], str | None],
    running: Callable[[], bool],
    logs: Callable[[], str],
    pattern: str = "",
    timeout: float = 30,
) -> str:
    """get(url): the body of a 200 answer, None for any other answer or none. `running`, `logs`: the
    pod's state and output (a process or a container)."""
    deadline = time.monotonic() + timeout
    text: str | None = None
    while time.monotonic() < deadline:
        assert running(), logs()[-3000:]
        text = get(url)
        if text is not None and re.search(pattern, text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"{url} never matched {pattern!r}; last: {(text or '')[:500]}\n{logs()[-3000:]}")


def ended(pid: int, within: float = 2.0) -> bool:
    """Whether the process has ended (gone, or a zombie nobody reaped yet: the launcher's stop SIGKILLs
    its probe process and leaves the reaping to whoever outlives it), looked at for up to `within` s as
    the kernel tears it down."""
    import psutil

    until = time.monotonic() + within
    while time.monotonic() < until:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.01)
    return False
