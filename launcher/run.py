"""`llm-d-launcher run`, the pod's ENTRYPOINT: settings -> plan -> prepare (leader IP, preflight) ->
watchers + supervisor -> stop.

Nothing is spawned until every check passed. Whatever ends the pod, the exit code says how (the
engine's own code, 128+N for signal N, 2 for bad input) and, when it is not 0, the termination
message says why, root cause first.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from launcher import early
from launcher.config.defaults import TERMINATION_LOG
from launcher.contract.addresses import is_ip
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.exits import INTERNAL_ERROR, STARTUP_DEADLINE, signal_name
from launcher.contract.plan import Check, Plan, Probes
from launcher.contract.redact import Scrubber, secret_values
from launcher.stderr import say
from launcher.supervise.outcome import TERMINATION_LIMIT, Outcome

if TYPE_CHECKING:
    import asyncio

    from healthchecks.server import ProbeServer
    from healthchecks.state import BuildInfo, PodHealth
    from healthchecks.watcher import Watcher
    from launcher.config.recipe import Recipe
    from launcher.config.settings import Settings
    from launcher.contract.log import Log
    from launcher.supervise.host import HostReport
    from launcher.supervise.logs import ChildOutput
    from launcher.supervise.supervisor import Event, Supervisor


T = TypeVar("T")


@dataclass(frozen=True)
class Inputs:
    """What the pod was given, validated: settings, recipe, and the plan built from them."""

    settings: Settings
    recipe: Recipe
    plan: Plan


def read_inputs(cli_settings: dict[str, Any], *, warn: bool = True) -> Inputs:
    """Settings, recipe and plan, or a ConfigError with every input mistake; read from the env and the
    files each time (a parked pod reads them again). `warn`: also print unknown LLMD_* variables."""
    from launcher.config.recipe_file import load_recipe
    from launcher.config.settings import load_settings, unknown_env
    from roles import build_plan
    from roles.group import command_line_problems, port_problems

    settings = load_settings(**cli_settings)
    if warn:
        for problem in unknown_env(os.environ):
            say(problem.line("warning"))
    recipe = load_recipe(settings.recipe_source, name_given="recipe" in settings.model_fields_set)
    from launcher.catalogs.shelf import load_shelf

    plan = build_plan(settings, recipe, shelf=load_shelf(settings.catalog_dir))
    if problems := port_problems(plan) + command_line_problems(plan, os.environ):
        raise ConfigError(problems)
    return Inputs(settings, recipe, plan)


def run(cli_settings: dict[str, Any], *, exiting: bool = False) -> int:
    """exiting: the process ends as soon as this returns (the entry point's os._exit), so the event
    loop is left to the kernel instead of being torn down (_until_complete)."""
    early.install()  # already done by the entry point's first lines; again for in-process callers
    scrub = Scrubber(secret_values(os.environ))
    termination_log = os.environ.get("LLMD_TERMINATION_LOG", TERMINATION_LOG)  # until the settings are valid
    output: ChildOutput | None = None
    log: Log | None = None  # the launcher's log, once _supervise set it up
    try:
        # Every input mistake surfaces here, before the async machinery is even imported: a bad
        # flag costs a fraction of a second, not an engine start (in an LWS group the pod parks).
        first: Inputs | ConfigError
        try:
            first = read_inputs(cli_settings)
        except ConfigError as exc:
            if not _parks():
                raise
            first = exc
        termination_log = _setting(first, "termination_log")
        if isinstance(first, Inputs):  # secrets the plan adds (recipe env, LLMD_EXTRA_ENV) are hidden too
            scrub.learn(_plan_secrets(first.plan))
        output = _child_output(first, scrub)
        outcome, log = _supervise(cli_settings, first, scrub, output, exiting=exiting)
    except ConfigError as exc:
        for problem in exc.problems:
            say(problem.line(scrub=scrub))
        outcome = Outcome(exc.exit_code, "; ".join(p.shown(scrub) for p in exc.problems))
    except Exception as exc:  # a bug or an environment failure, not a user mistake: say so, exit 1
        import traceback

        say(scrub(traceback.format_exc()).rstrip("\n"))
        outcome = Outcome(INTERNAL_ERROR.number, INTERNAL_ERROR.says(error=f"{type(exc).__name__}: {exc}"))
    if outcome.exit_code != 0:
        message = scrub(outcome.termination_message())
        write_termination_message(termination_log, message)
        if not outcome.recorded:
            with contextlib.suppress(Exception):  # best effort: it must never change the exit code
                _record_end(outcome.code_name, message, scrub, log)
    if log is not None:  # the launcher's last line (the runbook's log query looks for it)
        (log.error if outcome.exit_code else log.info)(
            "exiting", code=outcome.exit_code, reason=outcome.reason
        )
    if output is not None:  # lines a slow reader has not taken yet: the process may end next
        output.drain()
    return outcome.exit_code


def _record_end(reason: str, message: str, scrub: Scrubber, log: Log | None) -> None:
    """The reason the pod ends, as a Kubernetes Event on its LWS: a group recreation deletes the pod
    and its termination message with it. Bounded by LLMD_EVENT_SECONDS."""
    from launcher.config.settings import env_value

    if env_value("event_seconds", os.environ) <= 0 or (log is None and sys.stderr is None):
        return
    if log is None:  # the input was refused before _supervise set up the log: one on stderr
        from launcher.supervise.logs import configure

        log = configure(False, scrub, sys.stderr)
    record = _event_recorder(log)
    if record is not None:
        record(reason, message.split("\n", 1)[0])


def _parks() -> bool:
    """A failed input or preflight parks the pod (launcher/parking.py): in an LWS group, unless
    LLMD_PARK_SECONDS=0."""
    from launcher.config.settings import env_value
    from launcher.parking import in_group

    return in_group(os.environ) and env_value("park_seconds", os.environ) > 0


def _setting(inputs: Inputs | ConfigError, field: str) -> Any:
    """A setting of valid inputs, or (a parked pod whose settings failed) its value from the env alone."""
    from launcher.config.settings import env_value

    return getattr(inputs.settings, field) if isinstance(inputs, Inputs) else env_value(field, os.environ)


def _plan_secrets(plan: Plan) -> list[str]:
    return secret_values({**os.environ, **{k: v for p in plan.processes for k, v in p.env.items()}})


def _child_output(first: Inputs | ConfigError, scrub: Scrubber) -> ChildOutput:
    """The launcher's stdout and stderr, shared by its own log and its children's lines."""
    from launcher.supervise.logs import ChildOutput, wants_json

    return ChildOutput(wants_json(_setting(first, "log_format")), scrub)


def _supervise(
    cli_settings: dict[str, Any],
    first: Inputs | ConfigError,
    scrub: Scrubber,
    output: ChildOutput,
    *,
    exiting: bool,
) -> tuple[Outcome, Log]:
    from launcher.supervise.logs import configure

    log = configure(output.as_json, scrub, output.stderr)
    if isinstance(first, Inputs):
        _log_notes(first.plan, log)
    try:
        outcome = _until_complete(_run(cli_settings, first, log, output, scrub), exiting=exiting)
    except ConfigError as exc:
        log.error("preflight failed", problems=[str(p) for p in exc.problems])
        raise
    finally:
        early.install()  # closing the loop reset its handlers: the last lines must not die of a signal
    return outcome, log  # run() logs "exiting" last, after the termination message and the Event


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
    cli_settings: dict[str, Any], first: Inputs | ConfigError, log: Log, output: ChildOutput, scrub: Scrubber
) -> Outcome:
    """The phases: prepare (inputs, leader, preflight; parked until they pass), start the watchers,
    supervise, stop."""
    import asyncio

    from healthchecks.pod_watchers import build_watchers
    from healthchecks.state import PodHealth
    from launcher.supervise.spawn import SubprocessSpawner
    from launcher.supervise.supervisor import Supervisor, SupervisorConfig

    output.attach(asyncio.get_running_loop())  # from now on a stalled log reader cannot block the loop
    events = _signal_events(log)
    # The probes answer from the first moment: a pod waiting for its leader is alive, not started.
    health = PodHealth(_first_probes(first))
    health.identity = _identity()
    health.dropped_lines = lambda: output.dropped  # read at scrape time
    server = await _serve(health, _setting(first, "probe_host"), _setting(first, "probe_port"), scrub)
    try:
        ready = await _until_prepared(cli_settings, first, log, health, events, scrub)
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
        )
        health.attach(supervisor)
        health.watchers = build_watchers(
            prepared, health, inputs.settings, log, parks=_parks(), record_event=_event_recorder(log)
        )
        async with _watching(health.watchers, supervisor):
            outcome = await supervisor.run()
        if _parks() and (refused := _refused_configuration(supervisor, health)) is not None:
            return await _park_refused(refused, outcome, log, health, events, scrub)
        return outcome
    finally:
        await server.stop()
        output.detach()


def _refused_configuration(supervisor: Supervisor, health: PodHealth) -> str | None:
    """The engine's configuration error, when it exited by itself, non-zero, before it finished
    loading weights, with that error as its last output (launcher/supervise/refusal.py)."""
    from launcher.contract.phases import INITIALIZING, PHASES
    from launcher.contract.stop import Failed
    from launcher.supervise.refusal import configuration_error

    engine, stop = supervisor.engine, supervisor.stop
    if not isinstance(stop, Failed) or engine.last_exit is None or engine.last_exit <= 0:
        return None
    if stop.output != tuple(engine.tail) or health.started_at is not None:
        return None  # not the engine's own exit (a watcher's verdict, a sidecar), or after start-up
    if PHASES.index(health.reached) >= PHASES.index(INITIALIZING):
        return None  # it had loaded its weights: a crash, which a fresh group may not repeat
    return configuration_error(engine.tail)


async def _park_refused(
    refused: str, outcome: Outcome, log: Log, health: PodHealth, events: asyncio.Queue[Event], scrub: Scrubber
) -> Outcome:
    """Park on the engine's refusal (in a group, a restart recreates the group into the same error):
    alive, not started, the line as the reason, until a stop signal or LLMD_PARK_SECONDS; then exit 2
    with the engine's last lines after the reason."""
    from launcher.config.settings import env_value
    from launcher.parking import ENGINE_CONFIGURATION, Parking

    log.error("the engine refused its configuration before loading weights", code=outcome.exit_code)
    parking = Parking(
        health, log, env_value("park_seconds", os.environ), scrub=scrub, record=_event_recorder(log)
    )
    refusal = ConfigError.one(
        ENGINE_CONFIGURATION,
        f"the engine refused it ({outcome.reason}): {refused}",
        "fix the flag or value it names (the pool's args in the recipe, or LLMD_EXTRA_ARGS); a rollout "
        "replaces the parked group",
    )
    while True:
        parking.park(refusal)
        if (ended := await parking.pause(events)) is not None:
            return replace(ended, output=outcome.output)


def _event_recorder(log: Log) -> Callable[[str, str], bool] | None:
    """Records a parked pod's reason as a Kubernetes Event (launcher/supervise/kube_event.py), or None
    when LLMD_EVENT_SECONDS is 0."""
    from launcher.config.settings import env_value

    seconds = env_value("event_seconds", os.environ)
    if seconds <= 0:
        return None
    account_dir = env_value("service_account_dir", os.environ)

    def record(reason: str, message: str) -> bool:
        from launcher.supervise.kube_event import record_event

        return record_event(reason, message, log, seconds=seconds, account_dir=account_dir)

    return record


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
    log: Log,
    health: PodHealth,
    events: asyncio.Queue[Event],
    scrub: Scrubber,
) -> tuple[Inputs, Plan] | Outcome:
    """The inputs read and every preflight check passed. In an LWS group a failure parks the pod
    (launcher/parking.py) and both are tried again from the files, until they pass, parking's bound
    runs out, or a stop signal comes."""
    from launcher.config.settings import env_value
    from launcher.parking import Parking

    parking = (
        Parking(health, log, env_value("park_seconds", os.environ), scrub=scrub, record=_event_recorder(log))
        if _parks()
        else None
    )
    while True:
        if isinstance(attempt, Inputs):
            if parking is not None:
                parking.resume()
            health.use_plan(attempt.plan.probes)
            health.build = _build_info(attempt)
            try:
                prepared = await _prepare_in_time(
                    attempt.settings, attempt.recipe, attempt.plan, log, health, events
                )
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
        attempt = _read_again(cli_settings, log, scrub)


def _read_again(cli_settings: dict[str, Any], log: Log, scrub: Scrubber) -> Inputs | ConfigError:
    from launcher.config.recipe_file import read_recipe

    read_recipe.cache_clear()  # the file may have changed: that is what a parked pod waits for
    try:
        inputs = read_inputs(cli_settings, warn=False)
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
    settings: Settings, recipe: Recipe, plan: Plan, log: Log, health: PodHealth, events: asyncio.Queue[Event]
) -> Plan | Outcome:
    """The prepared plan; or, when a stop signal or the start-up deadline comes first, how the pod
    ended (nothing was started)."""
    import asyncio

    from healthchecks.deadline import late
    from launcher.supervise.supervisor import SignalReceived

    stage = ["building the plan"]
    prepare = asyncio.create_task(_prepare(settings, recipe, plan, log, stage, health))
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


@contextlib.asynccontextmanager
async def _watching(watchers: Sequence[Watcher], supervisor: Supervisor) -> AsyncIterator[None]:
    """Each watcher runs as a task while the supervisor does; a verdict it returns ends the pod."""
    import asyncio

    async def watch(watcher: Watcher) -> None:
        verdict = await watcher.run()
        if verdict is not None:
            supervisor.condemn(verdict)

    tasks = [asyncio.create_task(watch(w), name=f"watcher {w.name}") for w in watchers]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _prepare(
    settings: Settings, recipe: Recipe, plan: Plan, log: Log, stage: list[str], health: PodHealth
) -> Plan:
    """The plan as the pod will run it: what only the pod knows filled in (roles.build_plan with
    FoundInPod: the leader's IP, the interface that holds POD_IP), every check passed."""
    import asyncio

    from launcher.catalogs.shelf import load_shelf
    from launcher.contract.phases import PREFLIGHT, WAITING_FOR_LEADER
    from launcher.supervise.host.packages import installed_version
    from launcher.supervise.preflight import resolve_leader, run_preflight
    from roles import FoundInPod, build_plan

    # The flag catalogue follows the engine installed: its version, asked without importing it.
    found = FoundInPod(engine_version=await asyncio.to_thread(installed_version, plan, settings.bin_path))
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


def write_termination_message(path: str, message: str) -> None:
    """Kubernetes shows this file as the container's last state. The head carries the root cause, so
    the message is cut at the end, never at the start. Not writable (e.g. outside a pod, a FIFO
    no one reads), or a relative path (refused by the settings, and never meant to land in the
    working directory): skipped."""
    if not os.path.isabs(path):
        return
    data = message.encode("utf-8")[:TERMINATION_LIMIT].decode("utf-8", errors="ignore")
    try:  # non-blocking: a FIFO no one reads refuses at once (ENXIO, fifo(7)) instead of a hang at exit
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o666)
        with open(fd, "w", encoding="utf-8") as handle:
            handle.write(data)
    except OSError:
        pass
