"""The canary: the smallest request an engine's runner serves (the plan's Canary), POSTed with the
engine's own API key and its own deadline. The forward watch sends it to an idle engine
(healthchecks/forward.py), the P/D canary through the disagg sidecar (healthchecks/pd_canary.py).

Its status is the judgement: 200 the engine core worked; a timeout, no connection or a 5xx is stall
evidence; any other status is the API server refusing the canary itself (its key, path, model or
shape), logged once with the fix (refusal_fix). No body reaches /livez, a verdict or the metrics
(a body may echo anything): the log line of a refusal carries a scrubbed excerpt of its head, and
no more than CANARY_BODY_BYTES of any answer is read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from launcher.contract.plan import Canary, ProgressWatch
from launcher.contract.redact import REDACTED

if TYPE_CHECKING:
    from aiohttp import ClientSession

CANARY_AGENT = "llm-d-launcher-canary"  # so the engine's access log says who sent it
CANARY_BODY_BYTES = 4096  # read of any answer, at most: its status is the judgement, its head the excerpt
EXCERPT_CHARS = 200
Outcome = Literal["ok", "failed", "refused"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "failed", "refused")


def engine_api_key(canary: Canary, engine_env: Mapping[str, str]) -> str | None:
    """The key the engine enforces, as its own environment gives it (the plan's env over the
    launcher's, which it inherits); None when the engine reads none from there."""
    if canary.api_key_env is None:
        return None
    return engine_env.get(canary.api_key_env) or None


def judge(status: int) -> Outcome:
    """200: the engine core worked. 5xx: it failed, stall evidence. Any other status is the API
    server refusing the canary itself (its key, path, model or shape): not the engine's progress."""
    if status == 200:
        return "ok"
    return "failed" if status >= 500 else "refused"


def refusal_fix(status: int, canary: Canary, key_sent: bool) -> str:
    """Why the canary was refused, and what makes it right; said once in the log."""
    if status in (401, 403):
        if canary.api_key_env is None:
            why = "the engine enforces an API key the launcher cannot send"
        elif key_sent:
            why = f"the engine refused the key in {canary.api_key_env}"
        else:
            why = "the engine enforces an API key the launcher cannot see"
        return f"{why}: {canary.key_fix}"
    if status == 404:
        return (
            f"the engine serves no POST {canary.path} for model {canary.body.get('model')}: {canary.path_fix}"
        )
    if status in (400, 422):
        return (
            f"the engine refused the canary's request shape (POST {canary.path}): set LLMD_STALL_SECONDS=0 "
            "to send none, and report the engine's answer"
        )
    return f"HTTP {status} proves neither progress nor a stall; the canary is asked again a window later"


@dataclass(frozen=True)
class CanaryAnswer:
    outcome: Outcome
    detail: str  # for /livez and the verdict: the status or the failure, never a body
    status: int | None = None
    excerpt: str = ""  # the head of the reply's body, for the log only


async def send_canary(
    session: ClientSession,
    base: str,
    watch: ProgressWatch,
    api_key: str | None,
    extra: Mapping[str, str] | None = None,
    tls: bool = False,
    clock: Callable[[], float] = time.monotonic,
) -> CanaryAnswer:
    """The watch's canary POSTed to base (scheme://host:port) within its canary_seconds; tls: to the
    pod's own sidecar, whose certificate (self-signed unless it was given one) is not verified."""
    import aiohttp

    seconds, canary = watch.canary_seconds, watch.canary
    headers = {"User-Agent": CANARY_AGENT, **(extra or {})}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    began = clock()
    try:
        async with session.post(
            f"{base}{canary.path}",
            json=dict(canary.body),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=seconds),
            ssl=not tls,
        ) as reply:
            status = reply.status
            head = await reply.content.read(CANARY_BODY_BYTES)
    except asyncio.TimeoutError:
        return CanaryAnswer("failed", f"timed out after {seconds:g} s")
    except aiohttp.ClientError as exc:
        return CanaryAnswer("failed", f"failed: {type(exc).__name__}: {exc}")
    outcome = judge(status)
    if outcome == "ok":
        return CanaryAnswer(outcome, f"answered in {clock() - began:.2f} s", status)
    excerpt = " ".join(head.decode("utf-8", errors="replace").split())[:EXCERPT_CHARS]
    if api_key is not None:  # an answer may echo the request's header
        excerpt = excerpt.replace(api_key, REDACTED)
    verb = "failed" if outcome == "failed" else "refused"
    return CanaryAnswer(outcome, f"{verb}: HTTP {status}", status, excerpt)
