"""`llm-d-launcher run`, the pod's ENTRYPOINT: settings -> plan -> prepare (leader IP, preflight) ->
watchers + supervisor -> stop.

Nothing is spawned until every check passed. Whatever ends the pod, the exit code says how (the
engine's own code, 128+N for signal N, 2 for bad input) and, when it is not 0, the termination
message says why, root cause first.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from launcher import early
from launcher.contract.addresses import is_ip
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.exits import STARTUP_DEADLINE, signal_name
from launcher.contract.lws import in_group
from launcher.contract.plan import Check, Plan, Probes
from launcher.contract.redact import Scrubber, secret_values
from launcher.supervise.outcome import Outcome

if TYPE_CHECKING:
    import asyncio

    from healthchecks.server import ProbeServer
    from healthchecks.state import BuildInfo, PodHealth
    from launcher.config.recipe import Recipe
    from launcher.config.settings import Settings
    from launcher.contract.log import Log
    from launcher.parking import Parking
    from launcher.supervise.ending import Ending
    from launcher.supervise.host import HostReport
    from launcher.supervise.logs import ChildOutput
    from launcher.supervise.supervisor import Event
    from roles import FoundInPod


T = TypeVar("T")


@dataclass(frozen=True)
class Inputs:
    """What the pod was given, validated: settings, recipe, and the plan built from them (with what
    the files and env told: the mounted checkpoint's config.json, the engines' switches)."""

    settings: Settings
    recipe: Recipe
    plan: Plan
    found: FoundInPod | None = None


def read_inputs(cli_settings: dict[str, Any], *, say: Callable[[Problem, str], None] | None = None) -> Inputs:
    """Settings, recipe and plan, or a ConfigError with every input mistake; read from the env and the
    files each time (a parked pod reads them again). `say`: also tell of unknown LLMD_* variables."""
    from launcher.catalogs.shelf import load_shelf
    from launcher.config.model_file import checkpoint_config
    from launcher.config.recipe_file import load_recipe
    from launcher.config.settings import load_settings, unknown_env
    from roles import FoundInPod, build_plan
    from roles.engines import ENGINE_SWITCHES
    from roles.group import command_line_problems, port_problems

    settings = load_settings(**cli_settings)
    if say is not None:
        for problem in unknown_env(os.environ):
            say(problem, "warning")
    recipe = load_recipe(settings.recipe_source, name_given="recipe" in settings.model_fields_set)
    shelf = load_shelf(settings.catalog_dir)
    plan = build_plan(settings, recipe, shelf=shelf)
    found = FoundInPod(
        checkpoint_config=checkpoint_config(plan.model_path),
        switches={name: os.environ[name] for name in ENGINE_SWITCHES if name in os.environ},
    )
    if found.checkpoint_config is not None:  # what the model's shape rules out, refused before preflight
        plan = build_plan(settings, recipe, found=found, shelf=shelf)
    if problems := port_problems(plan) + command_line_problems(plan, os.environ):
        raise ConfigError(problems)
    return Inputs(settings, recipe, plan, found)


def run(cli_settings: dict[str, Any], *, exiting: bool = False) -> int:
    """exiting: the process ends as soon as this returns (the entry point's os._exit), so the event
    loop is left to the kernel instead of being torn down (_until_complete)."""
    from launcher.config.settings import env_value
    from launcher.supervise.ending import Ending

    early.install()  # already done by the entry point's first lines; again for in-process callers
    scrub = Scrubber(secret_values(os.environ))
    ending = Ending(scrub, lambda field: env_value(field, os.environ))  # until the settings are read
    output: ChildOutput | None = None
    try:
        # Every input mistake surfaces here, before the async machinery is even imported: a bad
        # flag costs a fraction of a second, not an engine start (in an LWS group the pod parks).
        first: Inputs | ConfigError
        try:
            first = read_inputs(cli_settings, say=ending.say)
        except ConfigError as exc:
            if not _parks():
                raise
            first = exc
        ending.setting = functools.partial(_setting, first)
        if isinstance(first, Inputs):  # secrets the plan adds (recipe env, LLMD_EXTRA_ENV) are hidden too
            scrub.learn(_plan_secrets(first.plan))
        output = _child_output(first, scrub)
        outcome = _supervise(cli_settings, first, ending, output, exiting=exiting)
    except ConfigError as exc:
        outcome = ending.refused(exc)
    except Exception as exc:  # a bug or an environment failure, not a user mistake: say so, exit 1
        outcome = ending.crashed(exc)
    code = ending.finish(outcome)
    if output is not None:  # lines a slow reader has not taken yet: the process may end next
        output.drain()
    return code


def _parks() -> bool:
    """A failed input or preflight parks the pod (launcher/parking.py): in an LWS group, unless
    LLMD_PARK_SECONDS=0."""
    from launcher.config.settings import env_value

    return in_group(os.environ) and env_value("park_seconds", os.environ) > 0


def _setting(inputs: Inputs | ConfigError, field: str) -> Any:
    """A setting of valid inputs, or (a parked pod whose settings failed) its value from the env alone."""
    from launcher.config.settings import env_value

    return getattr(inputs.settings, field) if isinstance(inputs, Inputs) else env_value(field, os.environ)


def _plan_secrets(plan: Plan) -> list[str]:
    return secret_values({**os.environ, **{k: v for p in plan.processes for k, v in p.env.items()}})


def _child_output(first: Inputs | ConfigError, scrub: Scrubber) -> ChildOutput:
    """The launcher's stdout and stderr, shared by its own log and its children's lines."""
    from launcher.stderr import wants_json
    from launcher.supervise.logs import ChildOutput

    return ChildOutput(wants_json(_setting(first, "log_format")), scrub)


def _supervise(
    cli_settings: dict[str, Any],
    first: Inputs | ConfigError,
    ending: Ending,
    output: ChildOutput,
    *,
    exiting: bool,
) -> Outcome:
    from launcher.supervise.logs import configure

    log = ending.log = configure(output.as_json, ending.scrub, output.stderr)
    if isinstance(first, Inputs):
        _log_notes(first.plan, log)
    try:
        return _until_complete(_run(cli_settings, first, ending, output), exiting=exiting)
    except ConfigError as exc:
        log.error("preflight failed", problems=[str(p) for p in exc.problems])
        raise
    finally:
        early.install()  # closing the loop reset its handlers: the last lines must not die of a signal


def _until_complete(main: Coroutine[Any, Any, Outcome], *, exiting: bool) -> Outcome:
    """asyncio.run's life cycle, but when the process ends right after (exiting) the loop is not
    closed: closing it removes the launcher's 44 signal handlers one by one (~4.5 ms on the path from
    an engine's death to the pod's exit, bench/results/supervisor.md), and they end with the process
    anyway; a signal that comes meanwhile finds the loop's no-op handlers. Tasks left are cancelled
    either way, and thread work still in flight (a preflight probe's subprocess) is waited for, so
    nothing it started outlives the launcher; idle threads are left to end with the process."""
    import asyncio

    loop = asyncio.new_event_loop()
    threads = _ThreadWork()
    loop.set_default_executor(threads)  # asyncio.to_thread's
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            if not exiting:
                loop.run_until_complete(loop.shutdown_default_executor())
            elif threads.busy:
                threads.shutdown(wait=True)
        finally:
            if not exiting:
                asyncio.set_event_loop(None)
                loop.close()


class _ThreadWork(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor, which knows whether any work is in flight: joining its idle
    threads at exit costs a wake-up each (~5 ms on a loaded 2-core box) and saves nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: set[concurrent.futures.Future[Any]] = set()

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future = super().submit(fn, *args, **kwargs)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    @property
    def busy(self) -> bool:
        return bool(self._pending)


def _log_notes(plan: Plan, log: Log) -> None:
    if plan.notes:  # what the dry-run says about the inputs (a clamped setting, a literal secret)
        log.info("plan notes", notes=list(plan.notes))


async def _run(
    cli_settings: dict[str, Any], first: Inputs | ConfigError, ending: Ending, output: ChildOutput
) -> Outcome:
    """The phases: prepare (inputs, leader, preflight; parked until they pass), start the watchers,
    supervise, stop."""
    import asyncio

    from healthchecks.pod_watchers import build_watchers
    from healthchecks.state import PodHealth
    from healthchecks.watcher import watching
    from launcher.supervise.spawn import SubprocessSpawner
    from launcher.supervise.supervisor import Supervisor, SupervisorConfig

    log, scrub = ending.log, ending.scrub
    assert log is not None
    output.attach(asyncio.get_running_loop())  # from now on a stalled log reader cannot block the loop
    events = _signal_events(log)
    # The probes answer from the first moment: a pod waiting for its leader is alive, not started.
    health = PodHealth(_first_probes(first))
    health.identity = _identity()
    health.dropped_lines = lambda: output.dropped  # read at scrape time
    server = await _serve(health, _setting(first, "probe_host"), _setting(first, "probe_port"), scrub)
    try:
        ready = await _until_prepared(cli_settings, first, ending, health, events)
        if isinstance(ready, Outcome):  # a signal, the start-up deadline or parking's bound came first
            return ready
        inputs, prepared = ready
        if (server.host, server.port) != (inputs.settings.probe_host, inputs.settings.probe_port):
            await server.stop()  # parked before the recipe's launcher: section could say where
            server = await _serve(health, inputs.settings.probe_host, inputs.settings.probe_port, scrub)
        health.use_plan(prepared.probes)
        _freeze_heap()
        config = SupervisorConfig.from_settings(inputs.settings)
        supervisor = Supervisor(
            prepared,
            config,
            events,
            output,
            log,
            on_line=health.on_line,
            spawner=SubprocessSpawner(server.spared),
            on_stopping=server.publish_now,
            before_weights=health.before_weights,
        )
        health.attach(supervisor)
        recorder = ending.events
        health.watchers = build_watchers(
            prepared,
            health,
            inputs.settings,
            log,
            parks=_parks(),
            record_event=recorder.record if recorder is not None else None,
        )
        retry = inputs.settings.check_interval
        async with watching(health.watchers, supervisor.condemn, log, health.watcher_errors, retry):
            outcome = await supervisor.run()
        if outcome.refusal and _parks():
            return await _park_refused(outcome, _parking(health, ending), events)
        return outcome
    finally:
        await server.stop()
        output.detach()


def _parking(health: PodHealth, ending: Ending) -> Parking:
    from launcher.config.settings import env_value
    from launcher.parking import Parking

    assert ending.log is not None
    events = ending.events
    return Parking(
        health,
        ending.log,
        env_value("park_seconds", os.environ),
        scrub=ending.scrub,
        record=events.record if events is not None else None,
    )


async def _park_refused(outcome: Outcome, parking: Parking, events: asyncio.Queue[Event]) -> Outcome:
    """Park on the engine's refusal (in a group, a restart recreates the group into the same error):
    alive, not started, the line as the reason, until a stop signal or LLMD_PARK_SECONDS; then exit 2
    with the engine's last lines after the reason."""
    from launcher.parking import ENGINE_CONFIGURATION

    parking.log.error("the engine refused its configuration before loading weights", code=outcome.exit_code)
    refusal = ConfigError.one(
        ENGINE_CONFIGURATION,
        f"the engine refused it ({outcome.reason}): {outcome.refusal}",
        "fix the flag or value it names (the pool's args in the recipe, or LLMD_EXTRA_ARGS); a rollout "
        "replaces the parked group",
    )
    while True:
        parking.park(refusal)
        if (ended := await parking.pause(events)) is not None:
            return replace(ended, output=outcome.output)


def _build_info(inputs: Inputs) -> BuildInfo:
    from healthchecks.state import BuildInfo
    from launcher import __version__

    plan, pool = inputs.plan, inputs.plan.role.pool
    kind = inputs.recipe.pools[pool].kind
    return BuildInfo(__version__, plan.recipe, pool, plan.role.name, kind, plan.needs.catalog_version or "")


async def _serve(health: PodHealth, host: str, port: int, scrub: Scrubber) -> ProbeServer:
    """The probe server; its answers pass through the scrubber, like the logs."""
    from healthchecks.server import ProbeServer
    from launcher.supervise.preflight import listener_of

    server = ProbeServer(health, host, port, listener_of, scrub)
    await server.start()
    return server


def _first_probes(first: Inputs | ConfigError) -> Probes:
    """The plan's probe rules; a pod parked before it had a plan has none to follow yet."""
    if isinstance(first, Inputs):
        assert first.plan.probes is not None
        return first.plan.probes
    return Probes(_setting(first, "probe_port"), ready=(), started=Check("engine", "engine"))


def _identity() -> str:
    """Who answers this pod's probes (healthchecks/http.py IDENTITY_HEADER): the pod's name and when
    this launcher started. A pod replaced under the same name answers with another start time."""
    import datetime
    import socket

    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}@{started}"


async def _until_prepared(
    cli_settings: dict[str, Any],
    attempt: Inputs | ConfigError,
    ending: Ending,
    health: PodHealth,
    events: asyncio.Queue[Event],
) -> tuple[Inputs, Plan] | Outcome:
    """The inputs read and every preflight check passed. In an LWS group a failure parks the pod
    (launcher/parking.py) and both are tried again from the files, until they pass, parking's bound
    runs out, or a stop signal comes."""
    log = ending.log
    assert log is not None
    parking = _parking(health, ending) if _parks() else None
    warned: set[str] = set()  # preflight's warnings, said once however often it runs
    while True:
        if isinstance(attempt, Inputs):
            if parking is not None:
                parking.resume()
            health.use_plan(attempt.plan.probes)
            health.build = _build_info(attempt)
            try:
                prepared = await _prepare_in_time(attempt, log, health, events, warned)
            except ConfigError as exc:
                if parking is None:
                    raise
                attempt = exc
            else:
                if parking is not None:
                    parking.healed()
                return prepared if isinstance(prepared, Outcome) else (attempt, prepared)
        assert parking is not None
        parking.park(attempt)
        if (ended := await parking.pause(events)) is not None:
            return ended
        attempt = _read_again(cli_settings, log, ending.scrub)


def _read_again(cli_settings: dict[str, Any], log: Log, scrub: Scrubber) -> Inputs | ConfigError:
    from launcher.config.recipe_file import read_recipe

    read_recipe.cache_clear()  # the file may have changed: that is what a parked pod waits for
    try:
        inputs = read_inputs(cli_settings)
    except ConfigError as exc:
        return exc
    scrub.learn(_plan_secrets(inputs.plan))
    _log_notes(inputs.plan, log)
    return inputs


def _signal_events(log: Log) -> asyncio.Queue[Event]:
    """The supervisor's event queue, fed by the stop signals (those that came early included)."""
    import asyncio

    from launcher.supervise.supervisor import SignalReceived

    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()
    for sig in early.STOP:
        loop.add_signal_handler(sig, events.put_nowait, SignalReceived(sig))
    for sig in early.IGNORED:  # README "Signals": their default action would orphan the engine
        loop.add_signal_handler(sig, _ignored, log, sig)
    for signum in early.RECEIVED:
        events.put_nowait(SignalReceived(signum))
    early.RECEIVED.clear()
    return events


def _ignored(log: Log, signum: int) -> None:
    log.warning("ignoring signal", signal=signal_name(signum))


def _freeze_heap() -> None:
    """Everything allocated so far lives until exit: keep it out of the garbage collector's scans,
    which would otherwise pause probes and log pass-through for the pod's whole life."""
    import gc

    gc.collect()
    gc.freeze()


async def _prepare_in_time(
    inputs: Inputs, log: Log, health: PodHealth, events: asyncio.Queue[Event], warned: set[str]
) -> Plan | Outcome:
    """The prepared plan; or, when a stop signal or the start-up deadline comes first, how the pod
    ended (nothing was started)."""
    import asyncio

    from healthchecks.deadline import late
    from launcher.supervise.supervisor import SignalReceived

    stage = ["building the plan"]
    prepare = asyncio.create_task(_prepare(inputs, log, stage, health, warned))
    first_signal = asyncio.create_task(events.get())
    startup = health.probes.startup_seconds
    await asyncio.wait(
        {prepare, first_signal},
        timeout=max(0.0, health.startup_due() - health.clock()) if startup > 0 else None,
        return_when=asyncio.FIRST_COMPLETED,
    )
    if not prepare.done() and not first_signal.done():  # the start-up deadline, before any spawn
        prepare.cancel()
        first_signal.cancel()
        return Outcome(
            STARTUP_DEADLINE.number, late(startup, f"{health.phase} ({stage[0]}); nothing was started")
        )
    if first_signal.done() and not prepare.done():
        prepare.cancel()
        event = first_signal.result()
        assert isinstance(event, SignalReceived)
        # Nothing was started, so the stop is complete: exit 0 like any stop that finished in time.
        return Outcome(
            0, f"stopped by {signal_name(event.signum)} during preflight ({stage[0]}); nothing was started"
        )
    if first_signal.done():  # both at once: the signal still counts
        events.put_nowait(first_signal.result())
    else:
        first_signal.cancel()
    return prepare.result()  # raises ConfigError


async def _prepare(inputs: Inputs, log: Log, stage: list[str], health: PodHealth, warned: set[str]) -> Plan:
    """The plan as the pod will run it: what only the pod knows filled in (roles.build_plan with
    FoundInPod: the leader's IP, the interface that holds POD_IP), every check passed."""
    import asyncio

    from launcher.catalogs.shelf import load_shelf
    from launcher.contract.phases import PREFLIGHT, WAITING_FOR_LEADER
    from launcher.supervise.host.packages import installed_version
    from launcher.supervise.preflight import resolve_leader, run_preflight
    from roles import FoundInPod, build_plan

    settings, recipe, plan = inputs.settings, inputs.recipe, inputs.plan
    # The flag catalogue follows the engine installed: its version, asked without importing it.
    version = await asyncio.to_thread(installed_version, plan, settings.bin_path)
    found = replace(inputs.found or FoundInPod(), engine_version=version)
    shelf = load_shelf(settings.catalog_dir)
    if found.engine_version:
        plan = build_plan(settings, recipe, found=found, shelf=shelf)
    leader = plan.role.leader_address
    if leader and plan.role.group_size > 1 and not is_ip(leader):
        stage[0] = f"resolving LWS_LEADER_ADDRESS {leader}"
        health.set_phase(WAITING_FOR_LEADER)
        found = replace(found, leader_ip=await resolve_leader(leader, settings.leader_wait_seconds, log))
        plan = build_plan(settings, recipe, found=found, shelf=shelf)  # preflight checks the route to it
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
        sysfs_root=settings.sysfs_root,
        store_master_wait_seconds=settings.store_master_wait_seconds,
        pod_ip=settings.pod_ip,
        pod_name=settings.pod_name,
        warned=warned,
    )
    if host.ifname or host.rdma:
        found = replace(found, interface=host.ifname, rdma=host.rdma)
        plan = build_plan(settings, recipe, found=found, shelf=shelf)
    _log_host_facts(plan, host, log, health)
    log.info(
        "plan ready",
        recipe=plan.recipe,
        role=plan.role.name,
        worker_index=plan.role.worker_index,
        processes=[p.name for p in plan.processes],
    )
    return plan


def _log_host_facts(plan: Plan, host: HostReport, log: Log, health: PodHealth) -> None:
    """What preflight found about the host: the interface that holds POD_IP, the engine installed."""
    if host.ifname:
        derived = {d.name: d.source for d in plan.needs.derived_env}
        env = plan.engine.env
        log.info(
            "network identity", interface=host.ifname, env={k: (env.get(k), v) for k, v in derived.items()}
        )
    if host.engine is not None:
        health.flag_catalog = host.engine.as_dict()
        log.info("flag catalogue", **host.engine.as_dict())


def _unknown(name: str) -> Problem:
    fixes = {
        "POD_IP": "give the container POD_IP from the downward API (fieldRef: status.podIP)",
        "LWS_LEADER_ADDRESS": "run the pod under a LeaderWorkerSet, or set it to the leader's DNS name or IP",
    }
    return Problem(name, "is not set but the plan needs it", fixes.get(name, "set it"))
