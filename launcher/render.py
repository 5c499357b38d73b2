"""The dry-run: a Plan (or a whole LWS group) as readable text, a copy-pasteable shell script, or JSON.

Every env mapping and argv passes through launcher.contract.redact before it is printed.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from launcher.contract.capabilities import CapabilitiesHeld, CapabilityWatch
from launcher.contract.plan import (
    IFNAME_PLACEHOLDER,
    Check,
    EventsFlowing,
    GroupReport,
    HostNeeds,
    HttpCheck,
    KvEventsWatch,
    Parallelism,
    Plan,
    Probes,
    ProcessSpec,
    ProgressWatch,
    RoleKind,
    ShutdownBudget,
    TcpCheck,
)
from launcher.contract.redact import REDACTED, is_secret_name, redact_argv, redact_env

PLAN_SCHEMA = "llm-d-launcher/plan/v2"
GROUP_SCHEMA = "llm-d-launcher/group/v2"


# ---------------------------------------------------------------- json
def plan_to_dict(plan: Plan) -> dict[str, Any]:
    role = plan.role
    ranks = role.dp_ranks
    return {
        "schema": PLAN_SCHEMA,
        "recipe": plan.recipe,
        "role": {
            "name": role.name,
            "pool": role.pool,
            "kind": role.kind.value,
            "worker_index": role.worker_index,
            "group_size": role.group_size,
            "leader_address": role.leader_address,
            "dp_ranks": None
            if ranks is None
            else {"start": ranks.start, "stop": ranks.stop, "size": role.dp_size},
            "parallelism": None if role.parallelism is None else _parallelism_dict(role.parallelism),
        },
        "pod": {"name": plan.pod.name, "namespace": plan.pod.namespace, "node": plan.pod.node},
        "placeholders": list(plan.placeholders),
        "notes": list(plan.notes),
        "files": [{"path": f.path, "mode": f"{f.mode:04o}", "content": f.content} for f in plan.files],
        "processes": [
            {
                "name": p.name,
                "critical": p.critical,
                "argv": redact_argv(p.argv),
                "env": redact_env(p.env),
                "ports": [{"port": port.number, "name": port.name} for port in p.ports],
                "health": _health_dict(p.health),
            }
            for p in plan.processes
        ],
        "probes": _probes_dict(plan.probes),
        "kv_events": None if plan.kv_events is None else _kv_events_dict(plan.kv_events),
        "shutdown": _shutdown_dict(plan.shutdown),
        "host_needs": _needs_dict(plan.needs),
        "capabilities": None if plan.capabilities is None else _capabilities_dict(plan.capabilities),
    }


def _parallelism_dict(layout: Parallelism) -> dict[str, Any]:
    return {
        "tensor": layout.tensor,
        "pipeline": layout.pipeline,
        "local_dp": layout.local_dp,
        "devices_per_pod": layout.devices_per_pod,
        "spans_pods": layout.spans_pods,
        "text": layout.describe(),
    }


def _capabilities_dict(watch: CapabilityWatch) -> dict[str, Any]:
    return {
        "interval_seconds": watch.interval,
        "runtime": watch.runtime,
        "checks": [
            {
                "capability": c.capability,
                "level": c.level.value,
                "target": c.target,
                "by": c.by,
                "probe": {"kind": type(c.probe).__name__, "what": c.probe.what, **asdict(c.probe)},
            }
            for c in watch.checks
        ],
    }


def _capabilities_text(watch: CapabilityWatch) -> list[str]:
    head = (
        f"capabilities (checked once the engine answers, before the first ready, every {watch.interval:g} s "
        "and after a restart; a required one absent: not ready, never a restart):"
    )
    return [head] + [
        f"  {c.level.value} {c.capability} at {c.target}: {c.probe.what} ({c.by})" for c in watch.checks
    ]


def _needs_dict(needs: HostNeeds) -> dict[str, Any]:
    """What preflight checks on the host; derived env values say where they came from."""
    return {
        "derived_env": [
            {"process": d.process, "name": d.name, "source": d.source} for d in needs.derived_env
        ],
        "modules": [{"module": m.module, "package": m.package, "why": m.why} for m in needs.modules],
        "memory": [
            {"what": m.what, "bytes": m.size, "processes": m.processes, "pinned": m.pinned}
            for m in needs.memory
        ],
        "checkpoint": needs.model_files,
        "drafter": needs.drafter,
        "flag_catalog": None
        if needs.engine_package is None
        else {
            "package": needs.engine_package,
            "version": needs.catalog_version,
            "source": needs.catalog_source,
            "engine_versions": needs.engine_versions,
        },
        "rdma": None
        if needs.rdma is None
        else {"env": list(needs.rdma.env), "required_by": needs.rdma.required_by},
        "store_master": None
        if needs.store_master is None
        else {"rpc": needs.store_master.rpc, "metadata_server": needs.store_master.metadata_server},
        "advisory": list(needs.advisory),
        "accelerators": needs.accelerators,
    }


def _needs_text(needs: HostNeeds) -> list[str]:
    out = [f"  env {d.name} <- {d.source}" for d in needs.derived_env]
    out += [f"  module {m.module} (package {m.package}) for {m.why}" for m in needs.modules]
    if needs.memory:
        parts = ", ".join(
            f"{m.what} {m.size / 1024**3:.1f} GiB" + (" pinned" if m.pinned else "") for m in needs.memory
        )
        out.append(f"  host memory: {parts}; compared with the container's limit and RLIMIT_MEMLOCK")
    if needs.model_files:
        out.append(
            "  checkpoint: config.json, tokenizer, every shard present and its safetensors header in range"
        )
    if needs.drafter:
        out.append(f"  drafter {needs.drafter}: staged in HF_HUB_CACHE when HF_HUB_OFFLINE=1")
    if needs.engine_package:
        out.append(
            f"  flags checked against the {needs.engine_package} {needs.catalog_version} catalogue "
            f"({needs.catalog_source}); at run, the catalogue of the installed version is used"
        )
        if needs.engine_versions:
            out.append(f"  engine version: {needs.engine_package} {needs.engine_versions} (recipe)")
    if needs.rdma is not None:
        names = ", ".join(needs.rdma.env) or "the store client's devices"
        required = f"; required by {needs.rdma.required_by}" if needs.rdma.required_by else ""
        out.append(f"  rdma: {names} <- the pod's active RDMA ports (none: left unset){required}")
    if needs.store_master is not None:
        master = needs.store_master
        where = master.metadata_server or "no HTTP metadata server"
        out.append(f"  {master.name} {master.rpc} and {where}: reachable (LLMD_STORE_MASTER_WAIT_SECONDS)")
    if needs.accelerators is not None:
        out.append(
            f"  accelerators: the pod must see {needs.accelerators} device(s)"
            " (GPUs, or TPU chips x devices each)"
        )
    if needs.advisory:
        out.append(f"  advisory (warn, do not refuse): {', '.join(needs.advisory)}")
    return (
        ["", "preflight (host checks before spawning; " + IFNAME_PLACEHOLDER + " is found in the pod):", *out]
        if out
        else []
    )


def _shutdown_dict(budget: ShutdownBudget) -> dict[str, float]:
    """Seconds after SIGTERM reaches the launcher."""
    return {
        "grace": budget.grace,
        "deregister": budget.deregister,
        "engine_drain": budget.drain,
        "engine_deadline": budget.engine_deadline,
        "kill_at": budget.kill_at,
    }


def _kv_events_dict(watch: KvEventsWatch) -> dict[str, Any]:
    return {
        "sources": [
            {
                "rank": s.rank,
                "port": s.port,
                "replay_port": s.replay_port,
                "api_port": s.api_port,
                "ipc": s.ipc,
                "replay_ipc": s.replay_ipc,
            }
            for s in watch.sources
        ],
        "silence_seconds": watch.silence_seconds,
        "readiness": watch.readiness,
        "block_size": watch.block_size,
        "block_size_readiness": watch.block_size_readiness,
        "identity": None
        if watch.identity is None
        else {
            "model": watch.identity.model,
            "block_size": watch.identity.block_size,
            "hash_seed": watch.identity.hash_seed,
        },
    }


def _check_dict(check: Check) -> dict[str, Any]:
    request = check.request
    out: dict[str, Any] = {"name": check.name, "process": check.process}
    if isinstance(request, HttpCheck):
        out["http"] = {"port": request.port, "path": request.path}
    elif isinstance(request, TcpCheck):
        out["tcp"] = {"host": request.host, "port": request.port}
    elif isinstance(request, EventsFlowing):
        out["kv_events"] = "flowing once a request was served"
    elif isinstance(request, CapabilitiesHeld):
        out["capabilities"] = "every required capability present"
    return out


def _health_dict(health: HttpCheck | TcpCheck | None) -> dict[str, Any] | None:
    """A process's own check: GET port/path, or (TcpCheck) a connection to host:port."""
    if isinstance(health, TcpCheck):
        return {"host": health.host, "port": health.port}
    return None if health is None else {"port": health.port, "path": health.path}


def _probes_dict(probes: Probes) -> dict[str, Any]:
    return {
        "port": probes.port,
        "ready": [_check_dict(c) for c in probes.ready],
        "started": _check_dict(probes.started),
        "progress": None if probes.progress is None else probes.progress.engine,
        "peers": [{"name": p.name, "host": p.host, "port": p.port} for p in probes.peers],
        "peer_lost_seconds": probes.peer_lost_seconds,
        "forward": None if probes.forward is None else _forward_dict(probes.forward),
        "forward_watched_by": probes.forward_watched_by,
        "startup_seconds": probes.startup_seconds,
        "kv_transfer": list(probes.kv_transfer),
        "pd_canary": None if probes.pd_canary is None else asdict(probes.pd_canary),
    }


def _steps_line(watch: ProgressWatch) -> str:
    """How a busy engine is judged, and by which counters of its P/D role."""
    if watch.steps is None:
        return (
            f"  busy ({watch.role}): not judged (LLMD_STEP_SECONDS=0): a hang with requests in flight "
            "is never told"
        )
    steps = watch.steps
    return (
        f"  busy ({watch.role}): {' / '.join(steps.running)} > 0 and no step ({' / '.join(steps.signals)} "
        f"still) for {steps.seconds:g} s (LLMD_STEP_SECONDS): stalled, exit 5, no canary"
    )


def _forward_dict(watch: ProgressWatch) -> dict[str, Any]:
    canary = watch.canary
    return {
        "sources": [{"name": s.name, "port": s.port} for s in watch.sources],
        "counters": list(watch.counters),
        "busy": list(watch.busy),
        "model": canary.body.get("model"),  # the served name the canary asks for
        "canary": {
            "path": canary.path,
            "body": dict(canary.body),
            "api_key_env": canary.api_key_env,
            "key_fix": canary.key_fix,
            "path_fix": canary.path_fix,
        },
        "stall_seconds": watch.stall_seconds,
        "canary_seconds": watch.canary_seconds,
        "covers": list(watch.covers),
        "role": watch.role,
        "steps": None
        if watch.steps is None
        else {
            "signals": list(watch.steps.signals),
            "running": list(watch.steps.running),
            "seconds": watch.steps.seconds,
            "source": watch.steps.why,
        },
    }


def group_to_dict(report: GroupReport) -> dict[str, Any]:
    return {
        "schema": GROUP_SCHEMA,
        "recipe": report.plans[0].recipe,
        "pool": report.plans[0].role.pool,
        "group_size": len(report.plans),
        "ok": report.ok,
        "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in report.checks],
        "pods": [plan_to_dict(p) for p in report.plans],
    }


def render_json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


# ---------------------------------------------------------------- text
def _flag_lines(words: Iterable[str]) -> list[str]:
    """Quoted words grouped one flag per line, its values beside it; command words first."""
    lines: list[list[str]] = [[]]
    for word in words:
        if word.startswith("-") and lines[-1]:
            lines.append([])
        lines[-1].append(word)
    return [" ".join(line) for line in lines]


def _argv_lines(argv: Sequence[str], indent: str) -> list[str]:
    lines = _flag_lines(shlex.quote(t) for t in argv)
    return [indent + ("" if i == 0 else "  ") + line for i, line in enumerate(lines)]


def _process_text(p: ProcessSpec) -> list[str]:
    kind = "critical: its exit ends the pod" if p.critical else "sidecar: restarted with backoff"
    out = [f"process {p.name} ({kind})"]
    if p.ports:
        out.append("  ports: " + ", ".join(f"{port.number} {port.name}" for port in p.ports))
    if isinstance(p.health, TcpCheck):
        out.append(f"  health: connect {p.health.host}:{p.health.port}")
    elif p.health:
        out.append(f"  health: GET :{p.health.port}{p.health.path}")
    if p.env:
        out.append("  env:")
        out += [f"    {k}={v}" for k, v in redact_env(p.env).items()]
    out.append("  argv:")
    out += _argv_lines(redact_argv(p.argv), "    ")
    return out


def _headline(plan: Plan) -> str:
    role = plan.role
    parts = [f"recipe {plan.recipe}", f"pool {role.pool}", f"role {role.name}"]
    if role.kind != RoleKind.SERVICE:
        parts.append(f"worker {role.worker_index} of {role.group_size}")
    if role.dp_ranks is not None:
        parts.append(f"DP ranks {role.dp_ranks.start}..{role.dp_ranks.stop - 1} of {role.dp_size}")
    if plan.pod.name:
        where = "/".join(x for x in (plan.pod.namespace, plan.pod.name) if x)
        parts.append(f"pod {where}" + (f" on {plan.pod.node}" if plan.pod.node else ""))
    return " | ".join(parts)


def render_text(plan: Plan, with_notes: bool = True) -> str:
    out = [f"# {_headline(plan)}"]
    if plan.role.parallelism is not None:
        out.append(f"# parallelism: {plan.role.parallelism.describe()}")
    if with_notes:
        out += [f"# note: {n}" for n in plan.notes]
    if plan.placeholders:
        out.append(
            "# placeholders (known only inside the pod): " + ", ".join(f"$({v})" for v in plan.placeholders)
        )
    for f in plan.files:
        out += ["", f"file {f.path} (mode {f.mode:04o})"]
        out += ["  " + line for line in f.content.splitlines()]
    for p in plan.processes:
        out += ["", *_process_text(p)]
    out += _needs_text(plan.needs)
    out += ["", _shutdown_text(plan.shutdown)]
    if plan.probes.peers:
        lost = plan.probes.peer_lost_seconds
        peers = ", ".join(f"{p.name} {p.host}:{p.port}" for p in plan.probes.peers)
        out.append(
            f"group: this pod ends when a peer's launcher stops answering /livez for {lost:g} s: {peers}"
        )
    if plan.capabilities is not None:
        out += ["", *_capabilities_text(plan.capabilities)]
    out += ["", *_probes_text(plan.probes)]
    if plan.kv_events is not None:
        watch = plan.kv_events
        ranks = ", ".join(
            f"rank {s.rank} on :{s.port}" + (f" (replay :{s.replay_port})" if s.replay_port else "")
            for s in watch.sources
        )
        out.append(f"  KV events watched: {ranks}; silent after {watch.silence_seconds:g} s without a batch")
        if any(s.ipc for s in watch.sources):
            out.append(
                "  KV events relayed (IPv6 pod): the engine publishes on ipc://, the launcher on dual-stack "
                "tcp://*:port"
            )
    return "\n".join(out) + "\n"


def _shutdown_text(budget: ShutdownBudget) -> str:
    return (
        f"on SIGTERM (grace {budget.grace} s): not ready at once; SIGTERM to the engine at "
        f"{budget.deregister} s (deregistration), engine drains {budget.drain} s, "
        f"SIGTERM to sidecars by {budget.engine_deadline} s, SIGKILL to what is left at {budget.kill_at} s"
    )


def _check_text(check: Check) -> str:
    request = check.request
    if isinstance(request, HttpCheck):
        return f"{check.name} (GET :{request.port}{request.path} = 200)"
    if isinstance(request, TcpCheck):
        return f"{check.name} ({request.host}:{request.port} accepts connections)"
    if isinstance(request, EventsFlowing):
        return f"{check.name} (KV events flowing once a request was served)"
    if isinstance(request, CapabilitiesHeld):
        return f"{check.name} (every required capability present)"
    return f"{check.name} (process running)"


def _probes_text(probes: Probes) -> list[str]:
    progress = f"; start-up progress read from {probes.progress.engine}'s output" if probes.progress else ""
    out = [
        f"probes on :{probes.port} (/livez /readyz /startupz /metrics)",
        "  ready when: " + ", ".join(_check_text(c) for c in probes.ready),
        f"  started when: {_check_text(probes.started)} passes once{progress}",
    ]
    if probes.startup_seconds > 0:
        out.append(
            f"  start-up deadline: {probes.startup_seconds:g} s, then the pod ends (exit 6) naming its phase"
        )
    if (watch := probes.forward) is not None:
        sources = ", ".join(f"{s.name} :{s.port}" for s in watch.sources)
        covers = f"; covers the headless {', '.join(watch.covers)}" if watch.covers else ""
        canary = watch.canary
        key = (
            f"its key from ${canary.api_key_env}"
            if canary.api_key_env
            else "no key (the engine reads none from env)"
        )
        busy = f" and {' / '.join(watch.busy)} at 0" if watch.busy else ""
        out.append(
            f"  forward progress: {' / '.join(watch.counters)} on {sources} /metrics; still for "
            f"{watch.stall_seconds:g} s{busy}: canary POST {canary.path} {json.dumps(dict(canary.body))} "
            f"with {key} within {watch.canary_seconds:g} s, else (a timeout, no connection, a 5xx) "
            f"stalled: /livez 503, exit 5; a 4xx is a wrong canary, logged once, never a stall{covers}"
        )
        out.append(_steps_line(watch))
        out.append(
            "  a sample that is NaN, ±Inf or negative, or missing, is unknown: never progress, never busy; "
            "counters unknown (or /metrics unanswered) are judged as still ones, /livez says since when"
        )
        if probes.kv_transfer:
            out.append(
                f"  KV transfer: {' / '.join(probes.kv_transfer)} relayed into /metrics "
                "(llmd_launcher_engine_kv_transfer_total, with pool and role)"
            )
        if (pd := probes.pd_canary) is not None:
            scheme = "https" if pd.tls else "http"
            out.append(
                f"  P/D canary: every {watch.stall_seconds:g} s the canary through the disagg sidecar "
                f"({scheme} :{pd.port}) with x-prefiller-host-port: {pd.prefiller} "
                "(LLMD_PD_CANARY_PREFILLER), "
                f"within {watch.canary_seconds:g} s: prefill there, KV transfer, decode here; counted "
                "(llmd_launcher_pd_canary_total) and shown in /livez, never a verdict"
            )
    elif probes.forward_watched_by:
        out.append(
            f"  forward progress: watched by the {probes.forward_watched_by}'s launcher (this pod serves "
            "no API; a stalled worker stops the leader's steps and fails its canary)"
        )
    return out


def render_group_text(report: GroupReport) -> str:
    out = [f"# note: {note}" for note in report.notes]
    for plan in report.plans:
        out += ["", "=" * 100, render_text(plan, with_notes=False).rstrip("\n")]
    out += ["", "=" * 100, "group checks:"]
    out += [f"  {'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}" for c in report.checks]
    return "\n".join(out).lstrip("\n") + "\n"


# ---------------------------------------------------------------- shell
def _sh_word(token: str, placeholders: Sequence[str]) -> str:
    """Quote a token; the plan's placeholders become checked expansions of the pod's own env."""
    parts = [token]
    for var in placeholders:
        marker = f"$({var})"
        parts = [piece for part in parts for piece in _split_keep(part, marker)]
    return (
        "".join(
            f'"${{{part[2:-1]}:?{part[2:-1]} is not set}}"'
            if part in {f"$({v})" for v in placeholders}
            else shlex.quote(part)
            for part in parts
            if part
        )
        or "''"
    )


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _sh_comment(text: str) -> str:
    """A comment line whatever the text holds: a newline in it (a pod name, a flag's value in a note)
    would otherwise end the comment and run the rest as a command."""
    return "# " + _CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], text)


def _split_keep(text: str, marker: str) -> list[str]:
    pieces = text.split(marker)
    out = [pieces[0]]
    for piece in pieces[1:]:
        out += [marker, piece]
    return out


def _sh_env(name: str, value: str, placeholders: Sequence[str]) -> str:
    if is_secret_name(name):
        return f'{name}="${{{name}:?{REDACTED}: export {name} first}}"'
    if value == IFNAME_PLACEHOLDER:  # set only when the caller names the interface (the launcher finds it)
        return f'${{LLMD_POD_IFNAME:+"{name}=$LLMD_POD_IFNAME"}}'
    return f"{name}={_sh_word(value, placeholders)}"


def _sh_command(p: ProcessSpec, background: bool, placeholders: Sequence[str]) -> str:
    env = ["env", *(_sh_env(k, v, placeholders) for k, v in p.env.items())] if p.env else []
    argv = _flag_lines(_sh_word(t, placeholders) for t in redact_argv(p.argv))
    lines = [*([" ".join(env)] if env else []), *argv]
    return ("" if background else "exec ") + " \\\n    ".join(lines) + (" &" if background else "")


def _shell_body(plan: Plan) -> list[str]:
    marks = plan.placeholders
    out = []
    for f in plan.files:  # printf '%s' writes the content byte for byte, whatever it holds
        path = _sh_word(f.path, marks)
        out += [
            f"mkdir -p {_sh_word(posixpath.dirname(f.path), marks)}",
            f"printf '%s' {shlex.quote(f.content)} > {path}",
            f"chmod {f.mode:04o} {path}",
        ]
    for p in plan.processes:
        if not p.critical:
            out.append(
                _sh_comment(f"{p.name}: sidecar (the launcher restarts it with backoff; here it just runs)")
            )
            out.append(_sh_command(p, True, marks))
    for p in plan.processes:
        if p.critical:
            out.append(_sh_comment(f"{p.name}: critical (its exit ends the pod)"))
            out.append(_sh_command(p, False, marks))
    return out


def render_shell(plan: Plan) -> str:
    head = [
        "#!/bin/sh",
        _sh_comment(_headline(plan)),
        *(_sh_comment(f"note: {n}") for n in plan.notes),
        "set -eu",
    ]
    return "\n".join([*head, *_shell_body(plan)]) + "\n"


def render_group_shell(report: GroupReport) -> str:
    """One script for every pod of the group: each pod runs the branch of its LWS_WORKER_INDEX."""
    first = report.plans[0]
    out = ["#!/bin/sh", _sh_comment(f"{first.recipe}: every pod of one {first.role.pool} group")]
    out += [*(_sh_comment(f"note: {n}") for n in report.notes), "set -eu"]
    if len(report.plans) == 1:
        return "\n".join([*out, *_shell_body(first)]) + "\n"
    out.append('case "${LWS_WORKER_INDEX:?LWS_WORKER_INDEX is not set}" in')
    for plan in report.plans:
        out += [f"{plan.role.worker_index})", _sh_comment(_headline(plan)), *_shell_body(plan), ";;"]
    out += ['*) echo "LWS_WORKER_INDEX=$LWS_WORKER_INDEX is outside this group" >&2; exit 2 ;;', "esac"]
    return "\n".join(out) + "\n"


def render_plan(plan: Plan, fmt: str) -> str:
    if fmt == "json":
        return render_json(plan_to_dict(plan))
    return render_shell(plan) if fmt == "shell" else render_text(plan)


def render_group(report: GroupReport, fmt: str) -> str:
    if fmt == "json":
        return render_json(group_to_dict(report))
    return render_group_shell(report) if fmt == "shell" else render_group_text(report)
