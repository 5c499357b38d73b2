"""The one way healthchecks ask over HTTP: a GET with a deadline, every failure turned into a reason
of one line ("no answer within 5 s", "Connection refused"), so checks, watchers and /livez say why.
A body is read only when asked for, and never past the bound the caller gives: an answer longer is a
failure, not a launcher grown by what a peer or an engine sends (issue #40)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import ClientSession, StreamReader


# Every answer of a launcher's probe server carries this: who answers (the pod's name and when its
# launcher started), so a peer replaced between two looks is told from the one that answered before.
IDENTITY_HEADER = "Llmd-Launcher-Identity"
BODY_BYTES = 64 * 1024  # a body read at most (a peer's /livez is under 2 KiB), unless the caller says


class NoAnswer(Exception):
    """The request got no HTTP status; str() is the reason."""


async def http_get(session: ClientSession, url: str, timeout: float, read: int = 0) -> tuple[int, str]:
    """The status and the body, when `read` bytes at most are asked for; raises NoAnswer with the
    reason when there is none (or the body is longer)."""
    reply = await http_reply(session, url, timeout, read=read)
    return reply.status, reply.body


@dataclass(frozen=True)
class Reply:
    status: int
    body: str  # empty unless read
    headers: Mapping[str, str]  # names in lower case


async def http_reply(
    session: ClientSession,
    url: str,
    timeout: float,
    *,
    read: int = 0,
    follow_redirects: bool = True,
    method: str = "GET",
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """http_get's whole answer; without `follow_redirects` a 3xx is the answer, not its target's.
    Another `method` (with `data`): the store-master watcher PUTs its marker. `read`: the body's bytes
    at most (0: the body is not read)."""
    import aiohttp

    if isinstance(read, bool):  # `read=True` type-checks as 1: a byte count is asked for
        raise TypeError("read is the body's byte count, not a flag")

    try:
        async with session.request(
            method,
            url,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
            allow_redirects=follow_redirects,
        ) as reply:
            # UTF-8, bytes that are not as U+FFFD: no body can raise past here (Prometheus text is UTF-8).
            body = (
                (await _read_at_most(reply.content, read)).decode("utf-8", errors="replace") if read else ""
            )
            return Reply(reply.status, body, {k.lower(): v for k, v in reply.headers.items()})
    except asyncio.TimeoutError:
        raise NoAnswer(f"no answer within {timeout:g} s") from None
    except aiohttp.ClientConnectorError as exc:
        raise NoAnswer(os_reason(exc.os_error)) from None
    except aiohttp.ClientError as exc:
        raise NoAnswer(f"{type(exc).__name__}: {exc}") from None


async def tcp_connect(host: str, port: int, timeout: float) -> tuple[bool, str]:
    """A TCP connection opens (then closes) within `timeout`, and the reason in one line."""
    what = f"connect {host}:{port}"
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=timeout)
    except asyncio.TimeoutError:
        return False, f"{what}: no answer within {timeout:g} s"
    except OSError as exc:
        return False, f"{what}: {os_reason(exc)}"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True, f"{what}: reachable"


def os_reason(exc: OSError) -> str:
    """'Connection refused', not asyncio's "Connect call failed ('127.0.0.1', 8000)"."""
    return os.strerror(exc.errno) if exc.errno else str(exc)


async def _read_at_most(content: StreamReader, limit: int) -> bytes:
    """The whole body, or NoAnswer once it passes `limit` bytes (aiohttp buffers no more than its
    read window meanwhile: what is not read is never held)."""
    body = bytearray()
    async for chunk in content.iter_any():
        body += chunk
        if len(body) > limit:
            raise NoAnswer(f"answered more than {limit} bytes")
    return bytes(body)
