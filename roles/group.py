"""`plan --group`: every pod of one LWS group, and checks of the group as a whole.

The rank, agreement and KV-event checks read the argv each pod would run (not the Role the builder
started from), so they catch a builder that computes one thing and emits another; the port check
reads every port the plans declare.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from launcher.config.recipe import Recipe
from launcher.config.settings import Settings
from launcher.contract.errors import Problem
from launcher.contract.plan import GroupCheck, GroupReport, Plan
from launcher.contract.redact import is_secret_name, secret_values
from roles import build_plan
from roles.args import flag_values
from roles.derive import select_pool
from roles.engines.script_hooks import script_hook_problems
from roles.engines.service_links import service_link_problems
from roles.flags import FlagCatalog


def plan_group(
    settings: Settings,
    recipe: Recipe,
    shelf: Sequence[FlagCatalog] | None = None,
    engine_version: str | None = None,
) -> GroupReport:
    """shelf, engine_version: as build_plan's."""
    _, pool = select_pool(settings, recipe)
    size = settings.group_size if settings.group_size is not None else pool.nodes
    plans = tuple(
        build_plan(settings, recipe, group_member=i, shelf=shelf, engine_version=engine_version)
        for i in range(size)
    )
    checks = []
    for name, check in GROUP_CHECKS:
        try:
            checks.append(check(plans))
        except (ValueError, KeyError, TypeError, IndexError) as exc:  # a malformed flag value in a recipe
            checks.append(GroupCheck(name, False, f"unreadable: {exc!r}"))
    return GroupReport(plans, tuple(checks))


def _int_flag(plan: Plan, flag: str, default: int) -> int:
    values = flag_values(plan.engine.argv, flag)
    return int(values[-1]) if values else default


def check_ranks(plans: Sequence[Plan]) -> GroupCheck:
    owned: list[int] = []
    sizes: set[int] = set()
    if any("--data-parallel-size" in p.engine.argv for p in plans):
        what = "DP ranks"
        for p in plans:
            start = _int_flag(p, "--data-parallel-start-rank", 0)
            owned += range(start, start + _int_flag(p, "--data-parallel-size-local", 1))
            sizes.add(_int_flag(p, "--data-parallel-size", 0))
    else:
        what = "node ranks"
        for p in plans:
            owned.append(_int_flag(p, "--node-rank", 0))
            sizes.add(_int_flag(p, "--nnodes", 1))
    if len(sizes) != 1:
        return GroupCheck("ranks", False, f"pods disagree on the number of {what}: {sorted(sizes)}")
    total = sizes.pop()
    counts = Counter(owned)
    missing = sorted(set(range(total)) - set(counts))
    doubled = sorted(r for r, n in counts.items() if n > 1)
    stray = sorted(r for r in counts if not 0 <= r < total)
    if missing or doubled or stray:
        return GroupCheck(
            "ranks", False, f"{what} of {total}: missing {missing}, doubled {doubled}, out of range {stray}"
        )
    return GroupCheck("ranks", True, f"{what} 0..{total - 1} each owned by exactly one pod")


def check_group_ports(plans: Sequence[Plan]) -> GroupCheck:
    """No port is declared twice inside one pod (whether it is free is preflight's check_ports_free)."""
    clashes = [f"pod {p.role.worker_index}: {clash}" for p in plans for clash in p.port_clashes()]
    if clashes:
        return GroupCheck("ports", False, "; ".join(clashes))
    return GroupCheck(
        "ports", True, f"no port is used twice inside a pod ({sum(len(p.ports) for p in plans)} ports)"
    )


def port_problems(plan: Plan) -> list[Problem]:
    """The ports check of one pod, as `plan` and `run` refuse it (`plan --group` reports it per pod)."""
    return [
        Problem(
            f"recipe pool {plan.role.pool}",
            f"port {clash}",
            "give each process of the pod its own port in the recipe (its pool's ports, kv_events, sidecars)",
        )
        for clash in plan.port_clashes()
    ]


def argv_secret_problems(plan: Plan, env: Mapping[str, str]) -> list[Problem]:
    """A secret's value on a command line, as `plan` and `run` refuse it: an argv is readable by every
    process on the node (/proc/PID/cmdline) and is what the dry-run prints. It gets there under a
    flag whose name says nothing (`--kv-transfer-config '{..."token": "$(HF_TOKEN)"}'`, which
    Kubernetes expands in the env), from LLMD_EXTRA_ARGS or a recipe arg. The secrets: the values of
    secret-named variables in the pod's env and in the plan's (recipe `env`, LLMD_EXTRA_ENV)."""
    named = {**env, **{k: v for p in plan.processes for k, v in p.env.items()}}
    holders = {
        value: sorted(k for k, v in named.items() if is_secret_name(k) and value in v)
        for value in secret_values(named)
    }
    problems = []
    for process in plan.processes:
        found = sorted(
            {
                name
                for value, names in holders.items()
                if any(value in t for t in process.argv)
                for name in names
            }
        )
        if found:
            problems.append(
                Problem(
                    f"recipe pool {plan.role.pool}",
                    f"the {process.name} command line holds the value of {', '.join(found)} (a secret by its "
                    "name), visible to every process on the node",
                    "pass the secret in the env only (valueFrom.secretKeyRef); take it out of "
                    "LLMD_EXTRA_ARGS and the recipe's args",
                )
            )
    return problems


# Bytes in one argument or one NAME=value env entry, its NUL included, that execve(2) takes: longer
# fails with E2BIG (Linux include/uapi/linux/binfmts.h MAX_ARG_STRLEN, 32 pages of 4 KiB).
MAX_ARG_STRLEN = 32 * 4096


def oversized_problems(plan: Plan) -> list[Problem]:
    """An argument or env entry the kernel would refuse to pass, as `plan` and `run` refuse it: found
    at the spawn, it ends the pod as an image that cannot run (exit 126), a crash loop in a group;
    found here, it names the flag or variable (never the value) and the pod parks."""
    problems = []
    for process in plan.processes:
        sizes = [(_argument(process.argv, i), len(t.encode()) + 1) for i, t in enumerate(process.argv)]
        sizes += [(f"env {name}", len(f"{name}={value}".encode()) + 1) for name, value in process.env.items()]
        problems += [
            Problem(
                f"recipe pool {plan.role.pool}",
                f"{what} of the {process.name} process is {size} bytes, over the {MAX_ARG_STRLEN} bytes "
                "the kernel passes to a process (MAX_ARG_STRLEN): it would not start",
                "shorten it, or give it as a file (--chat-template, for one, takes a path)",
            )
            for what, size in sizes
            if size > MAX_ARG_STRLEN
        ]
    return problems


def _argument(argv: Sequence[str], i: int) -> str:
    """Argument i of an argv by its flag, never by its value."""
    if argv[i].startswith("-"):
        return f"argument {argv[i].split('=', 1)[0]}"
    flag = next((t for t in reversed(argv[:i]) if t.startswith("-")), None)
    return f"a value of {flag}" if flag else f"argument {i}"


def command_line_problems(plan: Plan, env: Mapping[str, str]) -> list[Problem]:
    """What `plan` and `run` refuse on a pod's command lines (`env`: the pod's own environment)."""
    return (
        argv_secret_problems(plan, env)
        + oversized_problems(plan)
        + service_link_problems(plan, env)
        + script_hook_problems(env)
    )


_LEADER_FLAGS = ("--master-addr", "--data-parallel-address", "--dist-init-addr")
_SIZE_FLAGS = (
    "--nnodes", "--data-parallel-size", "--tensor-parallel-size", "--tp-size",
    "--pipeline-parallel-size", "--pp-size", "--data-parallel-rpc-port",
    "--master-port",
)  # fmt: skip


def check_agreement(plans: Sequence[Plan]) -> GroupCheck:
    """Every pod must name the same leader and the same sizes; headless pods share the leader's args."""
    disagreements = []
    for flag in (*_LEADER_FLAGS, *_SIZE_FLAGS):
        values = {p.role.worker_index: tuple(flag_values(p.engine.argv, flag)) for p in plans}
        if len(set(values.values())) > 1:
            disagreements.append(f"{flag}: " + ", ".join(f"pod {i}={v}" for i, v in values.items()))
    if disagreements:
        return GroupCheck("agreement", False, "; ".join(disagreements))
    leader = next((v for p in plans for f in _LEADER_FLAGS for v in flag_values(p.engine.argv, f)), None)
    detail = f"every pod names leader {leader}" if leader else "single pod: no leader to agree on"
    return GroupCheck("agreement", True, detail + " and the same sizes")


def check_kv_events(plans: Sequence[Plan]) -> GroupCheck:
    """vLLM publishes global rank r on base + r: each pod's first local rank must land on the
    configured port, so every pod publishes on the same port range."""
    landed = set()
    for p in plans:
        for raw in flag_values(p.engine.argv, "--kv-events-config"):
            endpoint = json.loads(raw)["endpoint"]
            base = int(endpoint.rsplit(":", 1)[1])
            start = _int_flag(p, "--data-parallel-start-rank", 0)
            landed.add(base + start)
    if not landed:
        return GroupCheck("kv-events", True, "no KV-event publisher in this pool")
    if len(landed) > 1:
        return GroupCheck(
            "kv-events", False, f"pods' first ranks publish on different ports {sorted(landed)}"
        )
    return GroupCheck("kv-events", True, f"every pod's first rank publishes on port {landed.pop()}")


GROUP_CHECKS: tuple[tuple[str, Callable[[Sequence[Plan]], GroupCheck]], ...] = (
    ("ranks", check_ranks),
    ("ports", check_group_ports),
    ("agreement", check_agreement),
    ("kv-events", check_kv_events),
)
