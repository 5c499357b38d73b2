"""`llm-d-launcher capabilities check`: the pod's capability probes (healthchecks/capabilities.py) run
from outside, against a model server's URL, for a guide's verification lane or an operator asking why a
Ready pool is slow (llm-d/llm-d proposals/model-server-capability-contract.md @0172f04d, "Failure
reporting"). What to check: `--require` names, and with `--recipe`/`--pool` every capability that
pool's pods promise (roles/capabilities.py), probed on the URL's host at the ports the recipe gives.
Exit 0: every required one passed; 1: a required one failed; 2: bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from launcher.contract.capabilities import (
    VOCABULARY,
    CapabilityCheck,
    HttpAnswer,
    Level,
    MetricFamily,
    Probe,
    TcpOpen,
    ZmqAnswer,
)
from launcher.contract.errors import ConfigError

LOCAL = ("127.0.0.1", "$(POD_IP)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("check",), help="check: probe each capability, PASS or FAIL")
    parser.add_argument("--url", required=True, help="the model server, e.g. http://10.0.0.5:8000")
    parser.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="NAME",
        help="a capability it must have (repeatable)",
    )
    parser.add_argument(
        "--recipe", metavar="NAME", help="a built-in recipe whose pool's capabilities to check"
    )
    parser.add_argument("--recipe-file", metavar="PATH", help="a recipe file, instead of --recipe")
    parser.add_argument("--pool", metavar="NAME", help="the recipe's pool (default: its default_pool)")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="per probe (default 5)")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="text (default: a line each) or json"
    )


def command(ns: argparse.Namespace) -> int:
    host, port = _url(ns.url)
    checks = _from_recipe(ns, host) if (ns.recipe or ns.recipe_file) else []
    runtime, family = asyncio.run(_detect(host, port, ns.timeout))
    checks += [_required(name, family, port) for name in ns.require]
    if not checks:
        raise ConfigError.one(
            "--require", "nothing to check", "name a capability, or give --recipe and --pool"
        )
    outcomes = asyncio.run(_probe_all(checks, host, ns.timeout))
    failed = any(not ok and c.level is Level.REQUIRED for c, (ok, _) in zip(checks, outcomes, strict=True))
    rows = [
        {
            "capability": c.capability,
            "level": c.level.value,
            "target": c.target,
            "result": "PASS" if ok else "FAIL",
            "reason": reason,
            "required_by": c.by,
        }
        for c, (ok, reason) in zip(checks, outcomes, strict=True)
    ]
    if ns.format == "json":
        print(
            json.dumps({"url": ns.url, "runtime": runtime, "ok": not failed, "capabilities": rows}, indent=2)
        )
    else:
        print(f"detected runtime: {runtime}")
        for row in rows:
            print(
                f"{row['result']} {row['level']} {row['capability']} at {row['target']}: {row['reason']} "
                f"(required by {row['required_by']})"
            )
    return 1 if failed else 0


def _url(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    if parts.scheme != "http" or not parts.hostname or not port:
        raise ConfigError.one(
            "--url", f"{url[:80]!r} is not http://HOST:PORT", "give e.g. http://10.0.0.5:8000"
        )
    return parts.hostname, port


def _from_recipe(ns: argparse.Namespace, host: str) -> list[CapabilityCheck]:
    """The pool's capability checks as its pods run them, aimed at `host`."""
    from launcher.config.recipe_file import load_recipe
    from launcher.config.settings import load_settings
    from roles import build_plan

    given = {"recipe": ns.recipe, "recipe_file": ns.recipe_file, "pool": ns.pool, "pod_ip": host}
    settings = load_settings(**{k: v for k, v in given.items() if v is not None})
    recipe = load_recipe(settings.recipe_source, name_given=ns.recipe is not None)
    plan = build_plan(settings, recipe)
    if plan.capabilities is None:
        return []
    return [replace(c, probe=_aimed(c.probe, host)) for c in plan.capabilities.checks]


def _aimed(probe: Probe, host: str) -> Probe:
    if isinstance(probe, TcpOpen) and probe.host in LOCAL:
        return replace(probe, host=host)
    if isinstance(probe, ZmqAnswer) and probe.endpoint.startswith("tcp://127.0.0.1:"):
        return replace(probe, endpoint=probe.endpoint.replace("127.0.0.1", host, 1))
    return probe


def _required(name: str, family: Any, port: int) -> CapabilityCheck:
    """A --require name, probed through the detected engine's adapter on the URL's port."""
    if name not in VOCABULARY:
        raise ConfigError.one(
            "--require", f"{name!r} is not a capability", f"use one of {', '.join(VOCABULARY)}"
        )
    if family is None:  # nothing answered: probed as the first engine that has it, and failed
        from roles.engines import FAMILIES

        family = next((f for f in FAMILIES if f.capabilities), None)
    adapter = None if family is None else family.capabilities
    probe: Probe | None = None
    if adapter is not None and name in adapter.render_paths:
        from roles.engines.capability_adapter import render_body

        probe = HttpAnswer(port, "POST", adapter.render_paths[name], render_body(name, "unused"), "token_ids")
    elif adapter is not None and name in adapter.metrics:
        probe = MetricFamily(port, adapter.metrics[name].names, adapter.metrics[name].source)
    if probe is None:
        raise ConfigError.one(
            "--require",
            f"{name} cannot be probed from the URL alone (or the runtime serves no such thing)",
            "give --recipe and --pool, whose ports it is checked on",
        )
    return CapabilityCheck(name, Level.REQUIRED, probe, f":{port}", "--require")


async def _detect(host: str, port: int, timeout: float) -> tuple[str, Any]:
    """The engine family (by the prefix of its /metrics families) and its /version, best effort."""
    import aiohttp

    from healthchecks.engine_metrics import METRICS_BYTES
    from healthchecks.http import BODY_BYTES, NoAnswer, http_get
    from roles.engines import FAMILIES

    base = f"http://{host}:{port}"
    async with aiohttp.ClientSession() as session:
        try:
            _, metrics = await http_get(session, f"{base}/metrics", timeout, read=METRICS_BYTES)
            _, version = await http_get(session, f"{base}/version", timeout, read=BODY_BYTES)
        except NoAnswer as exc:
            return f"unknown ({base}: {exc})", None
    family = next((f for f in FAMILIES if f.capabilities and f"\n{f.name}:" in f"\n{metrics}"), None)
    try:
        said = json.loads(version).get("version", "")
    except (ValueError, AttributeError):
        said = ""
    return (f"{family.name} {said}".strip() if family else "unknown"), family


async def _probe_all(checks: list[CapabilityCheck], host: str, timeout: float) -> list[tuple[bool, str]]:
    import aiohttp

    from healthchecks.capabilities import probe_once

    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(probe_once(session, c.probe, host, timeout) for c in checks)))
