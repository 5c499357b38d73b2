"""The one way healthchecks ask over HTTP: a GET with a deadline, every failure turned into a reason
of one line ("no answer within 5 s", "Connection refused"), so checks, watchers and /livez say why."""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import ClientSession


class NoAnswer(Exception):
    """The request got no HTTP status; str() is the reason."""


async def http_get(session: ClientSession, url: str, timeout: float, read: bool = False) -> tuple[int, str]:
    """The status and, with `read`, the body; raises NoAnswer with the reason when there is none."""
    import aiohttp

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as reply:
            return reply.status, (await reply.text()) if read else ""
    except asyncio.TimeoutError:
        raise NoAnswer(f"no answer within {timeout:g} s") from None
    except aiohttp.ClientConnectorError as exc:
        raise NoAnswer(os_reason(exc.os_error)) from None
    except aiohttp.ClientError as exc:
        raise NoAnswer(f"{type(exc).__name__}: {exc}") from None


def os_reason(exc: OSError) -> str:
    """'Connection refused', not asyncio's "Connect call failed ('127.0.0.1', 8000)"."""
    return os.strerror(exc.errno) if exc.errno else str(exc)
