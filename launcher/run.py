"""`llm-d-launcher run`, the pod's ENTRYPOINT: settings -> leader IP -> plan -> preflight -> supervisor.

Nothing is spawned until every check passed. Whatever ends the pod, the exit code says how (the
engine's own code, 128+N for signal N, 2 for bad input) and, when it is not 0, the termination
message says why, root cause first.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from launcher import early
from launcher.config.defaults import TERMINATION_LOG
from launcher.contract.addresses import is_ip
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.exits import GROUP_BROKEN, INTERNAL_ERROR, STALLED, STARTUP_DEADLINE, signal_name
from launcher.contract.plan import Plan
from launcher.contract.redact import Scrubber, secret_values
from launcher.supervise.outcome import TERMINATION_LIMIT, Outcome

if TYPE_CHECKING:
    from healthchecks.state import PodHealth
    from launcher.config.recipe import Recipe
    from launcher.config.settings import Settings
    from launcher.contract.log import Log
    from launcher.supervise.host import HostReport
    from launcher.supervise.logs import ChildOutput
    from launcher.supervise.supervisor import Supervisor


def run(cli_settings: dict[str, Any]) -> int:
    early.install()  # already done by the entry point's first lines; again for in-process callers
    scrub = Scrubber(secret_values(os.environ))
    termination_log = os.environ.get("LLMD_TERMINATION_LOG", TERMINATION_LOG)  # until the settings are valid
    try:
        # Every input mistake surfaces here, before the async machinery is even imported: a bad
        # flag costs a fraction of a second, not an engine start.
        from launcher.config.recipe_file import load_recipe
        from launcher.config.settings import load_settings, unknown_env
        from roles import build_plan
        from roles.group import port_problems

        settings = load_settings(**cli_settings)
        termination_log = settings.termination_log
        for problem in unknown_env(os.environ):
            print(problem.line("warning"), file=sys.stderr, flush=True)
        recipe = load_recipe(settings.recipe_source, name_given="recipe" in settings.model_fields_set)
        plan = build_plan(settings, recipe)
        if problems := port_problems(plan):
            raise ConfigError(problems)
        # Secrets the plan adds (recipe env, LLMD_EXTRA_ENV) are hidden as well as the pod's own.
        scrub = Scrubber(
            secret_values({**os.environ, **{k: v for p in plan.processes for k, v in p.env.items()}})
        )
        outcome = _supervise(settings, recipe, plan, scrub)
    except ConfigError as exc:
        for problem in exc.problems:
            print(scrub(problem.line()), file=sys.stderr, flush=True)
        outcome = Outcome(exc.exit_code, "; ".join(str(p) for p in exc.problems))
    except Exception as exc:  # a bug or an environment failure, not a user mistake: say so, exit 1
        import traceback

        print(scrub(traceback.format_exc()), file=sys.stderr, flush=True)
        outcome = Outcome(INTERNAL_ERROR.number, INTERNAL_ERROR.says(error=f"{type(exc).__name__}: {exc}"))
    if outcome.exit_code != 0:
        write_termination_message(termination_log, scrub(outcome.termination_message()))
    return outcome.exit_code


def _supervise(settings: Settings, recipe: Recipe, plan: Plan, scrub: Scrubber) -> Outcome:
    import asyncio

    from launcher.supervise.logs import ChildOutput, configure, wants_json

    as_json = wants_json(settings.log_format)
    output = ChildOutput(as_json, scrub)
    log = configure(as_json, scrub, output.stderr)
    if plan.notes:  # what the dry-run says about the inputs (a clamped setting, a literal secret)
        log.info("plan notes", notes=list(plan.notes))
    try:
        outcome = asyncio.run(_run(settings, recipe, plan, log, output))
    except ConfigError as exc:
        log.error("preflight failed", problems=[str(p) for p in exc.problems])
        raise
    finally:
        early.install()  # closing the loop reset its handlers: the last lines must not die of a signal
    if outcome.exit_code != 0:
        log.error("exiting", code=outcome.exit_code, reason=outcome.reason)
    else:
        log.info("exiting", code=0, reason=outcome.reason)
    return outcome


async def _run(settings: Settings, recipe: Recipe, plan: Plan, log: Log, output: ChildOutput) -> Outcome:
    import asyncio
    import contextlib
    import gc

    from healthchecks.checks import CheckRunner
    from healthchecks.server import ProbeServer
    from healthchecks.state import PodHealth
    from launcher.supervise.preflight import listener_of
    from launcher.supervise.supervisor import Event, SignalReceived, Supervisor, SupervisorConfig

    loop = asyncio.get_running_loop()
    output.attach(loop)  # from now on a stalled log reader cannot block the loop
    events: asyncio.Queue[Event] = asyncio.Queue()
    for sig in early.STOP:
        loop.add_signal_handler(sig, events.put_nowait, SignalReceived(sig))
    for sig in early.IGNORED:  # README "Signals": their default action would orphan the engine
        loop.add_signal_handler(sig, _ignored, log, sig)
    for signum in early.RECEIVED:
        events.put_nowait(SignalReceived(signum))
    early.RECEIVED.clear()
    # The probes answer from the first moment: a pod waiting for its leader is alive, not started.
    health = PodHealth(plan.probes)
    health.dropped_lines = lambda: output.dropped  # read at scrape time
    server = ProbeServer(
        health, settings.probe_host, settings.probe_port, listener_of, settings.kv_events_token_ids
    )
    await server.start()
    try:
        stage = ["building the plan"]
        prepare = asyncio.create_task(_prepare(settings, recipe, plan, log, stage, health))
        first_signal = asyncio.create_task(events.get())
        startup = plan.probes.startup_seconds
        await asyncio.wait(
            {prepare, first_signal},
            timeout=max(0.0, health.launched_at + startup - health.clock()) if startup > 0 else None,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if not prepare.done() and not first_signal.done():  # the start-up deadline, before any spawn
            prepare.cancel()
            first_signal.cancel()
            return Outcome(
                STARTUP_DEADLINE.number,
                _late(startup, f"{health.phase} ({stage[0]}); nothing was started"),
            )
        if first_signal.done() and not prepare.done():
            prepare.cancel()
            event = first_signal.result()
            assert isinstance(event, SignalReceived)
            # Nothing was started, so the stop is complete: exit 0 like any stop that finished in time.
            reason = (
                f"stopped by {signal_name(event.signum)} during preflight ({stage[0]}); nothing was started"
            )
            return Outcome(0, reason)
        if first_signal.done():  # both at once: the signal still counts
            events.put_nowait(first_signal.result())
        else:
            first_signal.cancel()
        plan = prepare.result()  # raises ConfigError
        health.use_plan(plan.probes)
        config = SupervisorConfig(
            bin_path=settings.bin_path,
            sidecar_restarts=settings.sidecar_restarts,
            sidecar_restart_window=settings.sidecar_restart_window,
            restart_backoff=settings.restart_backoff_seconds,
        )
        # Everything allocated so far lives until exit: keep it out of the garbage collector's scans,
        # which would otherwise pause probes and log pass-through for the pod's whole life.
        gc.collect()
        gc.freeze()
        supervisor = Supervisor(plan, config, events, output, log, on_line=health.on_line)
        health.attach(supervisor)
        background = [
            asyncio.create_task(
                CheckRunner(health, settings.check_interval, settings.check_timeout, log).run()
            )
        ]
        if plan.kv_events is not None:  # subscribed before the engine binds: no early batch is missed
            from healthchecks.kvevents.watcher import KvEventWatcher

            health.kv_events = KvEventWatcher(plan.kv_events, log)
            background.append(asyncio.create_task(health.kv_events.run()))
            if any(s.ipc for s in plan.kv_events.sources):  # IPv6 pod: the router reaches the relay
                from healthchecks.kvevents.relay import KvEventRelay

                background.append(asyncio.create_task(KvEventRelay(plan.kv_events, log).run()))
        if startup > 0:
            background.append(asyncio.create_task(_startup_deadline(health, startup, supervisor)))
        if plan.probes.forward is not None:
            from healthchecks.forward import ForwardWatcher
            from launcher.contract.phases import STOPPING

            def stalled(reason: str) -> None:
                supervisor.condemn(reason, STALLED.number)

            health.forward = ForwardWatcher(
                plan.probes.forward,
                lambda: health.started_at is not None and health.phase != STOPPING,
                settings.check_interval,
                settings.check_timeout,
                stalled,
                log,
            )
            background.append(asyncio.create_task(health.forward.run()))
        if plan.probes.peers:
            from healthchecks.peers import PeerWatcher

            def group_broken(reason: str) -> None:
                supervisor.condemn(reason, GROUP_BROKEN.number)

            watcher = PeerWatcher(
                plan.probes, settings.check_interval, settings.check_timeout, group_broken, log
            )
            background.append(asyncio.create_task(watcher.run()))
        try:
            return await supervisor.run()
        finally:
            for task in background:
                task.cancel()
            for task in background:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await server.stop()
        output.detach()


def _ignored(log: Log, signum: int) -> None:

    log.warning("ignoring signal", signal=signal_name(signum))


async def _startup_deadline(health: PodHealth, seconds: float, supervisor: Supervisor) -> None:
    """Ends the pod when start-up has not ended `seconds` after launch, naming where it is stuck: the
    kubelet's startup probe would end it a little later, saying only that a probe failed."""
    import asyncio

    await asyncio.sleep(max(0.0, health.launched_at + seconds - health.clock()))
    if health.started_at is None:
        supervisor.condemn(_late(seconds, health.stuck_in()), STARTUP_DEADLINE.number)


def _late(seconds: float, where: str) -> str:
    return STARTUP_DEADLINE.says(seconds=seconds, where=where)


async def _prepare(
    settings: Settings, recipe: Recipe, plan: Plan, log: Log, stage: list[str], health: PodHealth
) -> Plan:
    """The plan as the pod will run it: the leader's name replaced by its IP, every check passed."""
    from launcher.contract.phases import PREFLIGHT, WAITING_FOR_LEADER
    from launcher.supervise.preflight import resolve_leader, run_preflight
    from roles import build_plan

    leader = plan.role.leader_address
    if leader and plan.role.group_size > 1 and not is_ip(leader):
        stage[0] = f"resolving LWS_LEADER_ADDRESS {leader}"
        health.set_phase(WAITING_FOR_LEADER)
        ip = await resolve_leader(leader, settings.leader_wait_seconds, log)
        resolved = build_plan(settings.model_copy(update={"leader_address": ip}), recipe)
        # Peers stay watched by DNS name: a recreated pod keeps its name, not its IP, and the workers'
        # names follow only from the leader's name.
        plan = replace(resolved, probes=replace(resolved.probes, peers=plan.probes.peers))
    if plan.placeholders:
        raise ConfigError([_unknown(name) for name in plan.placeholders])
    stage[0] = "checking model, binaries, ports and files"
    health.set_phase(PREFLIGHT)
    host = await run_preflight(
        plan,
        bin_path=settings.bin_path,
        runtime_dir=settings.runtime_dir,
        shm_dir=settings.shm_dir,
        log=log,
    )
    plan = _with_host_facts(plan, host, log, health)
    log.info(
        "plan ready",
        recipe=plan.recipe,
        role=plan.role.name,
        worker_index=plan.role.worker_index,
        processes=[p.name for p in plan.processes],
    )
    return plan


def _with_host_facts(plan: Plan, host: HostReport, log: Log, health: PodHealth) -> Plan:
    """What only the pod knows: the interface that holds POD_IP, the engine version installed."""
    from roles.needs import fill_interface

    if host.ifname:
        plan = fill_interface(plan, host.ifname)
        derived = {d.name: d.source for d in plan.needs.derived_env}
        env = plan.engine.env
        log.info(
            "network identity", interface=host.ifname, env={k: (env.get(k), v) for k, v in derived.items()}
        )
    if host.engine is not None:
        health.flag_catalog = host.engine.as_dict()
        log.info("flag catalogue", **host.engine.as_dict())
    return plan


def _unknown(name: str) -> Problem:
    fixes = {
        "POD_IP": "give the container POD_IP from the downward API (fieldRef: status.podIP)",
        "LWS_LEADER_ADDRESS": "run the pod under a LeaderWorkerSet, or set it to the leader's DNS name or IP",
    }
    return Problem(name, "is not set but the plan needs it", fixes.get(name, "set it"))


def write_termination_message(path: str, message: str) -> None:
    """Kubernetes shows this file as the container's last state. The head carries the root cause, so
    the message is cut at the end, never at the start. Not writable (e.g. outside a pod), or a
    relative path (refused by the settings, and never meant to land in the working directory): skipped."""
    if not os.path.isabs(path):
        return
    data = message.encode("utf-8")[:TERMINATION_LIMIT].decode("utf-8", errors="ignore")
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(data)
    except OSError:
        pass
