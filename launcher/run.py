"""`llm-d-launcher run`, the pod's ENTRYPOINT: settings -> leader IP -> plan -> preflight -> supervisor.

Nothing is spawned until every check passed. Whatever ends the pod, the exit code says how (the
engine's own code, 128+N for signal N, 2 for bad input) and, when it is not 0, the termination
message says why, root cause first.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from launcher.addresses import is_ip
from launcher.errors import ConfigError, Problem
from launcher.logs import ChildOutput, configure, wants_json
from launcher.plan import Plan
from launcher.redact import Scrubber, secret_values
from launcher.supervisor import Event, Outcome, SignalReceived, Supervisor, SupervisorConfig

TERMINATION_LIMIT = 4096  # bytes the kubelet keeps of /dev/termination-log


def run(cli_settings: dict[str, Any]) -> int:
    scrub = Scrubber(secret_values(os.environ))
    as_json = wants_json(os.environ.get("LLMD_LOG_FORMAT", "auto"))
    log = configure(as_json, scrub)
    termination_log = os.environ.get("LLMD_TERMINATION_LOG", "/dev/termination-log")
    try:
        from launcher.recipe import load_recipe
        from launcher.settings import load_settings

        settings = load_settings(**cli_settings)
        termination_log = settings.termination_log
        as_json = wants_json(settings.log_format)
        log = configure(as_json, scrub)
        recipe = load_recipe(settings.recipe_source, name_given="recipe" in settings.model_fields_set)
        outcome = asyncio.run(_run(settings, recipe, log, ChildOutput(as_json, scrub)))
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"llm-d-launcher: error: {problem}", file=sys.stderr, flush=True)
        outcome = Outcome(exc.exit_code, "; ".join(str(p) for p in exc.problems))
    if outcome.exit_code != 0:
        log.error("exiting", code=outcome.exit_code, reason=outcome.reason)
        write_termination_message(termination_log, scrub(outcome.termination_message()))
    else:
        log.info("exiting", code=0, reason=outcome.reason)
    return outcome.exit_code


async def _run(settings: Any, recipe: Any, log: Any, output: ChildOutput) -> Outcome:
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, events.put_nowait, SignalReceived(sig))
    stage = ["building the plan"]
    prepare = asyncio.create_task(_prepare(settings, recipe, log, stage))
    first_signal = asyncio.create_task(events.get())
    await asyncio.wait({prepare, first_signal}, return_when=asyncio.FIRST_COMPLETED)
    if first_signal.done() and not prepare.done():
        prepare.cancel()
        event = first_signal.result()
        assert isinstance(event, SignalReceived)
        name = signal.Signals(event.signum).name
        log.info("stopped before anything was spawned", signal=name, stage=stage[0])
        return Outcome(128 + event.signum, f"stopped by {name} during preflight ({stage[0]})")
    if first_signal.done():  # both at once: the signal still counts
        events.put_nowait(first_signal.result())
    else:
        first_signal.cancel()
    plan = prepare.result()  # raises ConfigError
    config = SupervisorConfig(
        budget=_budget(settings),
        bin_path=settings.bin_path,
        sidecar_restarts=settings.sidecar_restarts,
        sidecar_restart_window=settings.sidecar_restart_window,
        restart_backoff=settings.restart_backoff_seconds,
    )
    return await Supervisor(plan, config, events, output, log).run()


def _budget(settings: Any) -> Any:
    from launcher.shutdown import ShutdownBudget

    return ShutdownBudget.from_grace(settings.grace_seconds)


async def _prepare(settings: Any, recipe: Any, log: Any, stage: list[str]) -> Plan:
    from launcher.preflight import resolve_leader, run_preflight
    from roles import build_plan

    plan = build_plan(settings, recipe)  # every recipe and arithmetic error surfaces here, at once
    leader = plan.role.leader_address
    if leader and plan.role.group_size > 1 and not is_ip(leader):
        stage[0] = f"resolving LWS_LEADER_ADDRESS {leader}"
        ip = await resolve_leader(leader, settings.leader_wait_seconds, log)
        settings = settings.model_copy(update={"leader_address": ip})
        plan = build_plan(settings, recipe)
    if plan.placeholders:
        raise ConfigError([_unknown(name) for name in plan.placeholders])
    stage[0] = "checking model, binaries, ports and files"
    await run_preflight(
        plan,
        bin_path=settings.bin_path,
        runtime_dir=settings.runtime_dir,
        shm_dir=settings.shm_dir,
        log=log,
    )
    log.info(
        "plan ready",
        recipe=plan.recipe,
        role=plan.role.name,
        worker_index=plan.role.worker_index,
        processes=[p.name for p in plan.processes],
    )
    return plan


def _unknown(name: str) -> Problem:
    fixes = {
        "POD_IP": "give the container POD_IP from the downward API (fieldRef: status.podIP)",
        "LWS_LEADER_ADDRESS": "run the pod under a LeaderWorkerSet, or set it to the leader's DNS name or IP",
    }
    return Problem(name, "is not set but the plan needs it", fixes.get(name, "set it"))


def write_termination_message(path: str, message: str) -> None:
    """Kubernetes shows this file as the container's last state. The head carries the root cause, so
    the message is cut at the end, never at the start. Not writable (e.g. outside a pod): skipped."""
    if not path:
        return
    data = message.encode("utf-8")[:TERMINATION_LIMIT].decode("utf-8", errors="ignore")
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(data)
    except OSError:
        pass
