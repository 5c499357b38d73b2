"""Helpers for watcher tests against real HTTP servers on loopback, in the test's own process."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from launcher.contract.plan import Canary
from roles.probes import completion_body


class QuietLog:
    """A Log that drops everything (the watchers' log lines are not under test)."""

    def __getattr__(self, _name: str) -> Any:
        return lambda *args, **kwargs: None


def completion_canary(model: str = "tiny", api_key_env: str | None = "VLLM_API_KEY") -> Canary:
    """A canary as a vLLM pool's plan carries it (roles/engines/vllm.py)."""
    return Canary("/v1/completions", completion_body(model), api_key_env, "KEY FIX", "PATH FIX")


async def serve_engine(engine: Any, port: int) -> web.AppRunner:
    """A stand-in engine's /metrics (GET) and /v1/completions (POST) on 127.0.0.1:port, in this loop."""
    app = web.Application()
    app.router.add_get("/metrics", engine.metrics)
    app.router.add_post("/v1/completions", engine.completions)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner
