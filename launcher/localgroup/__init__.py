"""`llm-d-launcher local-group`: run every pod of one LeaderWorkerSet group of a recipe pool on this machine.

Each pod gets what a pod of a real LWS group gets, so `llm-d-launcher run` takes its unchanged code path:
- its own network namespace with its own IP on a shared bridge and a default route through it (vLLM
  asks the routing table for its outbound address); the bridge lives in the runner's own network
  namespace, which has no uplink, so nothing leaves the machine;
- its own UTS namespace (hostname = pod name) and mount namespace with a private /dev/shm and its own
  sysfs: /sys/class/net lists the pod's interfaces, not the host's, as a container's fresh sysfs does
  (UCX, under NIXL, takes its network devices from there; with the host's it sees only lo);
- the DNS names LWS gives, resolved by the normal resolver: a private /etc/hosts bind-mounted in the
  runner's mount namespace holds `<lws>-<group>.<lws>.<namespace>` (LWS_LEADER_ADDRESS) and
  `<lws>-<group>-<i>.<lws>.<namespace>` for worker i (kubernetes-sigs/lws `pkg/utils/pod/pod_utils.go`);
- the env LWS and the downward API inject: LWS_LEADER_ADDRESS (the DNS name), LWS_GROUP_SIZE,
  LWS_WORKER_INDEX, POD_IP, POD_NAME, POD_NAMESPACE.

Unprivileged: the runner re-executes itself under `unshare -rnm` (user + network + mount namespaces),
and everything it made disappears with it. SIGINT or SIGTERM reaches every pod as SIGTERM, as the
kubelet does when a group is deleted; when a pod ends by itself the others are left to notice, as
their launchers do in a cluster (LWS would then recreate the group).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `probe` builds this parser too: the runner's modules load only for local-group
    from launcher.localgroup.group import GroupLayout


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recipe", metavar="NAME", help="built-in recipe (LLMD_RECIPE)")
    parser.add_argument("--recipe-file", metavar="PATH", help="recipe YAML file (LLMD_RECIPE_FILE)")
    parser.add_argument("--pool", metavar="NAME", help="the pool whose group runs (LLMD_POOL)")
    parser.add_argument("--size", type=int, metavar="N", help="pods in the group (default: the pool's nodes)")
    parser.add_argument(
        "--lws-name", metavar="NAME", help="the LeaderWorkerSet's name (default: recipe-pool)"
    )
    parser.add_argument(
        "--namespace", default="default", metavar="NS", help="the pods' namespace (default: default)"
    )
    parser.add_argument(
        "--env", metavar="KEY=VALUE", action="append", default=[], help="extra env for every pod (repeatable)"
    )
    parser.add_argument(
        "--pod-env",
        metavar="INDEX:KEY=VALUE",
        action="append",
        default=[],
        help="extra env for pod INDEX only, over --env (repeatable): what differs between real hosts, "
        "e.g. which cores an engine binds when every pod shares this machine's",
    )
    parser.add_argument(
        "--service",
        metavar="POOL=NAME",
        action="append",
        default=[],
        help="also run one pod of another pool of the recipe behind a Service called NAME, started "
        "first (repeatable): e.g. --service mooncake-master=mooncake-master for a donor group",
    )
    parser.add_argument(
        "--leader-dns-after",
        default="0",
        metavar="SECONDS|never",
        help="the leader's DNS name resolves only after this long (default 0), or never",
    )
    parser.add_argument(
        "--restart-policy",
        choices=("Never", "Always"),
        default="Never",
        help="a pod's restartPolicy (default Never: the group ends when every pod has ended); Always: a pod "
        "that exits is started again in its own namespaces (same IP), as the kubelet restarts the "
        "container of a Deployment's or DaemonSet's pod (e.g. a KV store's master, a memory donor)",
    )
    parser.add_argument(
        "--status-every",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="print every pod's probe state this often (default 5)",
    )
    parser.add_argument(
        "--workdir", metavar="DIR", help="logs, hosts file, pods.json (default: a new temp dir)"
    )
    parser.add_argument(
        "--no-unshare",
        action="store_true",
        help="already root of a private user + network + mount namespace (e.g. under `unshare -rnm`)",
    )


def command(ns: argparse.Namespace, argv: list[str]) -> int:
    import shutil
    import tempfile

    from launcher.contract.errors import ConfigError
    from launcher.localgroup.group import LWS_ENV, LocalGroup, RunnerError, run_group

    for name in LWS_ENV:  # the runner is no pod: its own env must not choose a role
        os.environ.pop(name, None)
    request = _request(ns)  # every option is checked before any namespace exists
    missing = [tool for tool in ("unshare", "nsenter", "ip", "mount") if shutil.which(tool) is None]
    if missing:
        raise ConfigError.one("local-group", f"needs {', '.join(missing)}", "install util-linux and iproute2")
    if not ns.no_unshare:
        # The same command as root of new user, network and mount namespaces (same pid: signals reach it).
        os.execvp("unshare", ["unshare", "-rnm", "--propagation", "private", sys.executable, "-m", "launcher",
                              *argv, "--no-unshare"])  # fmt: skip
    workdir = request.workdir or Path(tempfile.mkdtemp(prefix="llmd-local-group-"))
    group = LocalGroup(
        request.layout,
        workdir,
        {**{k: v for k, v in os.environ.items() if k not in LWS_ENV}, **request.env},
        request.probe_port,
        say=lambda line: print(line, flush=True),
        per_pod_env=request.per_pod_env,
        restart_always=ns.restart_policy == "Always",
    )
    try:
        return run_group(group, request.leader_dns_after, ns.status_every, grace=request.grace)
    except RunnerError as exc:
        print(f"llm-d-launcher local-group: {exc}", file=sys.stderr, flush=True)
        return 1


@dataclass(frozen=True)
class GroupRequest:
    """What the options ask for, checked: the group's layout and what each pod gets besides."""

    layout: GroupLayout
    env: dict[str, str]  # over the runner's own env, for every pod
    per_pod_env: dict[int, dict[str, str]]
    leader_dns_after: float | None  # None: never
    probe_port: int
    grace: float  # seconds the runner waits after SIGTERM before SIGKILL
    workdir: Path | None  # None: a new temporary directory


def _request(ns: argparse.Namespace) -> GroupRequest:
    """Every option checked, one ConfigError naming it: nothing may fail once namespaces exist."""
    from launcher.config.recipe_file import load_recipe
    from launcher.config.settings import load_settings
    from launcher.contract.errors import ConfigError
    from launcher.localgroup.group import FIRST_POD_HOST, GroupLayout
    from roles.derive import select_pool

    given = {"recipe": ns.recipe, "recipe_file": ns.recipe_file, "pool": ns.pool}
    settings = load_settings(**given)
    recipe = load_recipe(settings.recipe_source, name_given="recipe" in settings.model_fields_set)
    pool_name, pool = select_pool(settings, recipe)
    if ns.size is not None and ns.size < 1:
        raise ConfigError.one("--size", f"{ns.size} is not a number of pods", "give 1 or more")
    size = pool.nodes if ns.size is None else ns.size
    after = None if ns.leader_dns_after == "never" else _seconds(ns.leader_dns_after)
    if not 0 < ns.status_every < float("inf"):
        raise ConfigError.one(
            "--status-every", f"{ns.status_every!r} is not a number of seconds", "give e.g. 5"
        )
    lws = ns.lws_name or "".join(c if c.isalnum() else "-" for c in f"{recipe.name}-{pool_name}".lower())
    _dns_label("--lws-name", lws)
    _dns_label("--namespace", ns.namespace)
    services = tuple(_service(item, recipe.pools) for item in ns.service)
    layout = GroupLayout(lws, size, namespace=ns.namespace, services=services)
    if size + len(services) > layout.capacity:
        raise ConfigError.one(
            "--size",
            f"{size} pods and {len(services)} service pod(s) do not fit the group's network "
            f"{layout.network} ({layout.capacity} addresses from .{FIRST_POD_HOST})",
            f"give at most {layout.capacity - len(services)}",
        )
    _dns_label("--lws-name", layout.pod_name(size - 1))  # the longest pod name
    env = {f"LLMD_{k.upper()}": str(v) for k, v in given.items() if v is not None}
    if settings.recipe_file and not os.path.isabs(settings.recipe_file):
        # A pod's launcher starts in its mount namespace's root (nsenter --mount), not in this
        # directory: a relative path would find nothing there and park the pod.
        env["LLMD_RECIPE_FILE"] = os.path.abspath(settings.recipe_file)
    for item in ns.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError.one("--env", "is not KEY=VALUE", "write it as --env NAME=value")
        env[key] = value
    return GroupRequest(
        layout,
        env,
        _pod_env(ns.pod_env, size),
        after,
        settings.probe_port,
        settings.grace_seconds + 10,
        _workdir(ns.workdir) if ns.workdir else None,
    )


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _dns_label(option: str, name: str) -> None:
    """Kubernetes names the pods, Services and namespace with DNS labels (RFC 1123): the pods'
    hostnames and /etc/hosts names are made of them."""
    from launcher.contract.errors import ConfigError

    if not _DNS_LABEL.fullmatch(name):
        raise ConfigError.one(
            option,
            f"{name!r} is not a DNS label (at most 63 of a-z, 0-9 and '-', a letter or digit at each end)",
            "give a name like my-group (pod names add -<group>-<index> to --lws-name)",
        )


def _workdir(text: str) -> Path:
    from launcher.contract.errors import ConfigError

    path = Path(text)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError.one(
            "--workdir",
            f"{text!r} cannot be made a directory ({exc.strerror or exc})",
            "give a directory path",
        ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError.one(
            "--workdir", f"{text!r} is not writable", "give a directory this user can write"
        )
    return path


def _seconds(text: str) -> float:
    from launcher.contract.errors import ConfigError

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ConfigError.one(
            "--leader-dns-after", f"{text!r} is not a number of seconds", "give 0, 8.5, or never"
        )
    return value


def _pod_env(items: list[str], size: int) -> dict[int, dict[str, str]]:
    from launcher.contract.errors import ConfigError

    per_pod: dict[int, dict[str, str]] = {}
    for item in items:
        index, colon, pair = item.partition(":")
        key, sep, value = pair.partition("=")
        if not (colon and sep and key and index.isdigit() and int(index) < size):
            raise ConfigError.one(
                "--pod-env",
                f"{item!r} is not INDEX:KEY=VALUE with INDEX a pod of the group (0..{size - 1})",
                "write it as --pod-env 1:NAME=value",
            )
        per_pod.setdefault(int(index), {})[key] = value
    return per_pod


def _service(item: str, pools: Collection[str]) -> tuple[str, str]:
    from launcher.contract.errors import ConfigError

    pool, sep, name = item.partition("=")
    if not (sep and pool and name) or pool not in pools:
        fix = "e.g. --service mooncake-master=mooncake-master"
        raise ConfigError.one("--service", f"{item!r} is not POOL=NAME with POOL a pool of the recipe", fix)
    _dns_label("--service", name)
    return pool, name
