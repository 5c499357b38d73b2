"""What every plan builder receives: the validated inputs of one pod."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from launcher.config.defaults import PROBE_PORT
from launcher.config.recipe import ArgValue, DisaggSidecar, Recipe
from launcher.config.recipe_file import RecipeSource
from launcher.contract.errors import ConfigError, Problem
from launcher.contract.plan import (
    Canary,
    FileSpec,
    KvEventsWatch,
    PdCanary,
    PdRole,
    Plan,
    ProcessSpec,
    ProgressSource,
    ProgressWatch,
    Role,
    ShutdownBudget,
    StartupOutput,
)
from launcher.contract.record import record
from roles.args import Arg, args_from, flag_key, flatten, merge_extra, split_extra_args
from roles.derive import PodFacts
from roles.flags import (
    FlagCatalog,
    check_flags,
    check_secret_abbreviations,
    known_secret_flags,
    off_switch,
    switch_key,
)
from roles.probes import build_probes

if TYPE_CHECKING:
    from roles.engines.family import EngineFamily

EXTRA_ARGS = "LLMD_EXTRA_ARGS"


@record
class BuildContext:
    """No defaults: every value comes from the settings (roles/__init__.py build_plan), which declare them."""

    recipe: Recipe
    recipe_source: RecipeSource
    role: Role
    pod: PodFacts
    runtime_dir: str
    extra_args: str
    extra_env: Mapping[str, str]
    shutdown: ShutdownBudget
    probe_port: int  # the launcher's own probe server
    peer_lost_seconds: float  # how long a peer pod may stop answering before this pod ends
    leader_name: str | None  # LWS_LEADER_ADDRESS as given: peers are watched by name, not by IP
    catalog: FlagCatalog | None  # the pod's engine's flag catalogue (roles/flags.py choose_catalog)
    allow_flags: frozenset[str]  # unknown flags let through (LLMD_ALLOW_FLAGS)
    stall_seconds: float  # token counters still this long: canary (0: no forward-progress watch)
    canary_seconds: float
    step_seconds: float  # requests running and no engine step this long: stalled (0: not judged)
    startup_seconds: float  # the launcher's start-up deadline (0: none)
    pd_canary_prefiller: str | None  # LLMD_PD_CANARY_PREFILLER: the two-step canary's prefill host:port

    @property
    def pool_name(self) -> str:
        return self.role.pool

    @property
    def engine_release(self) -> str | None:
        """The engine release the pod is planned for: its flag catalogue's (the installed one's when a
        catalogue has it, roles/flags.py choose_catalog)."""
        return self.catalog.version if self.catalog else None

    def env(self, *layers: Mapping[str, str]) -> dict[str, str]:
        """Layers in order of increasing priority, LLMD_EXTRA_ENV last."""
        merged: dict[str, str] = {}
        for layer in (*layers, self.extra_env):
            merged.update(layer)
        return merged

    def progress_watch(
        self, sources: list[ProgressSource], family: EngineFamily[Any], pd_role: PdRole, canary: Canary
    ) -> ProgressWatch | None:
        """The forward-progress watch of a serving engine in its P/D role: the counters it watches are
        the role's step signals; None when LLMD_STALL_SECONDS is 0."""
        if self.stall_seconds <= 0 or not sources or family.steps is None:
            return None
        return ProgressWatch(
            tuple(sources),
            family.steps.signals(pd_role),
            canary,
            self.stall_seconds,
            self.canary_seconds,
            busy=family.busy_gauges,
            role=pd_role,
            steps=family.steps.watch(pd_role, self.step_seconds),
        )

    def pd_canary(self, sidecar: DisaggSidecar | None) -> PdCanary | None:
        """The P/D canary through the disagg sidecar fronting the serving engine, when
        LLMD_PD_CANARY_PREFILLER names a prefill endpoint."""
        if sidecar is None or self.pd_canary_prefiller is None:
            return None
        return PdCanary(self.pd_canary_prefiller, sidecar.port, sidecar.tls)

    def startup_env(self, name: str | None) -> dict[str, str]:
        """An engine start-up timeout that would fire before the launcher's deadline, raised to it
        (the recipe's env, layered above, still wins)."""
        if self.startup_seconds <= 0 or name is None:
            return {}
        return {name: str(int(self.startup_seconds))}

    def check_recipe_args(
        self, args: Mapping[str, ArgValue], owned: Mapping[str, str], where: str, catalog: str | None = None
    ) -> None:
        """Recipe args may not set what the launcher derives (the engine would see both), and must be
        flags the engine knows."""
        source = self.recipe_source
        problems = [
            Problem(
                source.setting,
                f"{source.label}: pools.{self.pool_name}.{where}.{flag} is derived by the launcher",
                owned[flag_key(flag)],
            )
            for flag in args
            if flag_key(flag) in owned
        ]
        if not problems:
            place = f"{source.label}: pools.{self.pool_name}.{where}"
            problems = [
                Problem(p.setting, f"{place}: {p.message}", p.fix)
                for p in self._check(self.recipe_args(args, catalog), source.setting, catalog)
            ]
        if problems:
            raise ConfigError(problems)

    def recipe_args(self, args: Mapping[str, ArgValue], catalog: str | None = None) -> list[Arg]:
        """A recipe's args as the pod's engine writes them: a `false` switch in the off form its
        catalogue names (roles/flags.py off_switch); a process without one (catalog None) gets --no-X."""
        engine = self.catalog if catalog is not None else None
        return args_from(args, off=lambda flag: off_switch(engine, flag))

    def command(
        self, prefix: list[str], args: list[Arg], owned: Mapping[str, str], catalog: str | None = None
    ) -> tuple[tuple[str, ...], list[str]]:
        """The main process's argv: prefix, generated args, then LLMD_EXTRA_ARGS merged explicitly."""
        engine = self.catalog if catalog is not None else None

        def paired(group: list[Arg]) -> list[Arg]:
            return [replace(a, key=switch_key(engine, a.key)) for a in group]

        extra = paired(split_extra_args(self.extra_args, EXTRA_ARGS))
        merged, notes = merge_extra(paired(args), extra, owned, EXTRA_ARGS)
        problems = self._check(extra, EXTRA_ARGS, catalog)
        if problems:
            raise ConfigError(problems)
        return (*prefix, *flatten(merged)), notes

    def _check(self, args: list[Arg], setting: str, catalog: str | None) -> list[Problem]:
        """A secret under an abbreviated name first, never allowed; then the engine's catalogue. Args of
        a process without one (a sidecar, a Mooncake binary: catalog None) are checked against every
        engine's secret flags, so no printed argv shows one under an abbreviation."""
        if catalog is None or self.catalog is None:
            return check_secret_abbreviations(known_secret_flags(), args, setting)
        secrets = check_secret_abbreviations(self.catalog.flags, args, setting)
        return secrets or check_flags(self.catalog, args, setting, self.allow_flags)

    def plan(
        self,
        processes: list[ProcessSpec],
        files: list[FileSpec] | None = None,
        notes: list[str] | None = None,
        model_path: str | None = None,
        leader_port: int | None = None,
        progress: StartupOutput | None = None,
        kv_events: KvEventsWatch | None = None,
        forward: ProgressWatch | None = None,
        kv_transfer: tuple[str, ...] = (),
        pd_sidecar: DisaggSidecar | None = None,
    ) -> Plan:
        """leader_port: the leader's API port, which workers watch; progress: how the engine's output
        tells its start-up phase; kv_transfer: the connector's counters relayed, and pd_sidecar: the
        disagg sidecar the P/D canary goes through, both beside the forward watch (none without it)."""
        files = files or []
        for process in processes:
            for port in process.ports:
                if port.number == self.probe_port:
                    raise ConfigError.one(
                        "LLMD_PROBE_PORT",
                        f"{port.number} is also {process.name}'s {port.name} port",
                        f"set LLMD_PROBE_PORT to a port no process of the pod uses (default {PROBE_PORT})",
                    )
        # List only the placeholders this plan really contains (a master uses no POD_IP).
        text = [*(t for p in processes for t in (*p.argv, *p.env.values())), *(f.content for f in files)]
        used = tuple(v for v in self.pod.placeholders if any(f"$({v})" in t for t in text))
        return Plan(
            recipe=self.recipe.name,
            role=self.role,
            pod=self.pod.identity,
            processes=tuple(processes),
            shutdown=self.shutdown,
            files=tuple(files),
            notes=(*self.pod.notes, *(notes or ())),
            placeholders=used,
            model_path=model_path,
            probes=build_probes(
                self.role,
                processes,
                self.probe_port,
                leader_port,
                progress,
                kv_events is not None and (kv_events.readiness or kv_events.block_size_readiness),
                self.peer_lost_seconds,
                self.leader_name,
                forward,
                self.startup_seconds,
                kv_transfer if forward is not None else (),
                self.pd_canary(pd_sidecar) if forward is not None else None,
            ),
            kv_events=kv_events,
        )


def owned_flags(fix: str, *keys: str) -> dict[str, str]:
    return dict.fromkeys(keys, fix)
