"""`llm-d-launcher lint`: plans every launcher pod of a rendered manifest (roles/manifest.py) and checks
what ties the manifest to its plan, which the launcher in a running pod cannot see or sees too late:
the accelerators it requests, the probes' port and start-up budget, the grace period, the memory, the
recipe it mounts and its service links. Pure: the manifest's objects in, findings out.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from launcher.config.recipe import EnginePool, Pool
from launcher.config.recipe_file import load_recipe, read_recipe, validate_recipe
from launcher.config.recipe_source import RecipeSource
from launcher.config.settings import Settings, pod_settings
from launcher.contract.errors import ConfigError
from launcher.contract.plan import Plan
from launcher.contract.record import record
from roles.manifest import ManifestPod, launcher_pods, mounted_recipe, namespace_of, recipe_source
from roles.memory import pod_memory

# Extended resources that are accelerator devices, and for TPUs how many devices (what the engine
# counts: JAX devices, TensorCores) one chip is, by GKE's node label
# cloud.google.com/gke-tpu-accelerator: a TPU7x chip is two devices, v4, v5e, v5p and v6e chips one
# (AI-Hypercomputer/cloud-accelerator-diagnostics tpu_info/tpu_info/device.py, TpuChip.devices_per_chip).
ACCELERATORS = ("nvidia.com/gpu", "amd.com/gpu", "google.com/tpu")
TPU_LABEL = "cloud.google.com/gke-tpu-accelerator"
DEVICES_PER_TPU_CHIP = {"tpu7x": 2}
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")
# Kubernetes' defaults (core/v1 Probe, PodSpec).
PROBE_PERIOD, PROBE_FAILURES, GRACE = 10, 3, 30


@record
class Finding:
    """One way a manifest and its plan disagree, phrased for the person who edits the manifest."""

    where: str  # the object, its pod template and container
    field: str
    what: str
    fix: str

    def line(self) -> str:
        return f"{self.where}: {self.field}: {self.what}; {self.fix}"


@record
class LintReport:
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]  # which recipe each pod template was planned with
    pods: int  # launcher pods planned


def lint(objects: Sequence[Mapping[str, Any]]) -> LintReport:
    config_maps = {
        (namespace_of(o), o["metadata"].get("name")): o.get("data") or {}
        for o in objects
        if o.get("kind") == "ConfigMap" and isinstance(o.get("metadata"), dict)
    }
    findings: list[Finding] = []
    notes: list[str] = []
    pods = launcher_pods(objects)
    for pod in pods:
        found, note = _lint_pod(pod, config_maps)
        findings += found
        notes.append(note)
    return LintReport(tuple(dict.fromkeys(findings)), tuple(dict.fromkeys(notes)), len(pods))


ConfigMaps = Mapping[tuple[str, Any], Mapping[str, Any]]  # (namespace, name) -> data


@record
class _Recipe:
    """The recipe a pod would read: a ConfigMap's text parsed (data), else the built-in (None)."""

    data: Mapping[str, Any] | None
    note: str  # which, said for people
    findings: tuple[Finding, ...] = ()
    plannable: bool = True


def _lint_pod(pod: ManifestPod, config_maps: ConfigMaps) -> tuple[list[Finding], str]:
    recipe_in = _pod_recipe(pod, config_maps)
    findings = list(recipe_in.findings)
    if not recipe_in.plannable:
        return findings, recipe_in.note
    env = dict(pod.env)
    builtin = recipe_source(pod)
    try:
        if recipe_in.data is None:
            env.pop("LLMD_RECIPE_FILE", None)
            settings = pod_settings(env, read_recipe(builtin))
            recipe = load_recipe(builtin)
        else:
            settings = pod_settings(env, recipe_in.data)
            recipe = validate_recipe(recipe_in.data, RecipeSource(builtin.name, env["LLMD_RECIPE_FILE"]))
        from roles import build_plan

        plan = build_plan(settings, recipe)
    except ConfigError as exc:
        return findings + _problems(pod.where, exc), recipe_in.note
    pool = recipe.pools[plan.role.pool]
    for check in CHECKS:
        findings += check(pod, settings, pool, plan)
    return findings, recipe_in.note


def _pod_recipe(pod: ManifestPod, config_maps: ConfigMaps) -> _Recipe:
    """The recipe ConfigMap the pod mounts at LLMD_RECIPE_FILE when this stream holds it; else the
    image's built-in recipe (LLMD_RECIPE), and a finding when the file could never be there."""
    where, builtin = pod.where, recipe_source(pod).name
    mounted = mounted_recipe(pod)
    if mounted is None:
        return _Recipe(None, f"{where}: planned with the built-in recipe {builtin} (LLMD_RECIPE)")
    instead = f"{where}: planned with the image's built-in recipe {builtin}"
    path = pod.env["LLMD_RECIPE_FILE"]
    if mounted.problem is not None:
        fix = f"mount the recipe's ConfigMap at {posixpath.dirname(path)}"
        found = Finding(where, "volumeMounts", f"LLMD_RECIPE_FILE is {path} but {mounted.problem}", fix)
        return _Recipe(None, f"{instead}: its recipe file is not mounted", (found,))
    data = config_maps.get((pod.namespace, mounted.config_map))
    if data is not None:
        text = data.get(str(mounted.key))
        if not isinstance(text, str):
            fix = f"give it the recipe under {mounted.key}, or fix LLMD_RECIPE_FILE"
            found = Finding(where, "volumes", f"ConfigMap {mounted.config_map} has no key {mounted.key}", fix)
            return _Recipe(None, f"{where}: not planned: its recipe file would be missing", (found,), False)
        from launcher.config.recipe_yaml import parse_recipe_yaml

        try:
            parsed = parse_recipe_yaml(text, RecipeSource(builtin, path))
        except ConfigError as exc:
            return _Recipe(
                None, f"{where}: not planned: its recipe does not parse", tuple(_problems(where, exc)), False
            )
        return _Recipe(
            parsed, f"{where}: planned with the recipe in ConfigMap {mounted.config_map} (key {mounted.key})"
        )
    if generated := _generated(config_maps, mounted.config_map):
        namespace, made = generated
        elsewhere = (
            f" in namespace {namespace}, the pod in {pod.namespace}" if namespace != pod.namespace else ""
        )
        found = Finding(
            where,
            "volumes",
            f"mounts ConfigMap {mounted.config_map}, which this stream does not hold but a "
            f"configMapGenerator's {made}{elsewhere}: kustomize did not rewrite the reference",
            f"set `namespace:` in the kustomization that adds the {pod.kind} (kustomize rewrites a name "
            f"only within one namespace), or mount {made}",
        )
        return _Recipe(None, f"{instead}: its ConfigMap is missing", (found,))
    name = mounted.config_map or "its recipe volume"
    return _Recipe(None, f"{instead} (LLMD_RECIPE): ConfigMap {name} is not in this stream")


def _generated(config_maps: ConfigMaps, name: str | None) -> tuple[str, str] | None:
    """(namespace, name) of the ConfigMap a kustomize configMapGenerator made of `name`:
    name-<10-character hash>, which a reference kustomize rewrote would name."""
    made = re.compile(rf"{re.escape(str(name))}-[a-z0-9]{{10}}")
    return next(((ns, str(n)) for (ns, n) in config_maps if made.fullmatch(str(n))), None)


def _problems(where: str, exc: ConfigError) -> list[Finding]:
    return [Finding(where, p.setting, p.message, p.fix) for p in exc.problems]


def _accelerators(pod: ManifestPod, settings: Settings, pool: Pool, plan: Plan) -> list[Finding]:
    """The accelerator devices requested against the pool's parallelism (devices_per_pod: TP, PP,
    local DP ranks, as the recipe's arithmetic counts them)."""
    resources = pod.container.get("resources") or {}
    asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    name = next((r for r in ACCELERATORS if r in asked), None)
    if name is None and resources.get("claims"):
        return []  # devices from a DRA claim: counted by the driver, not here
    count = _integer(asked.get(name)) if name else 0
    field = f"resources.limits.{name or 'nvidia.com/gpu'}"
    if not isinstance(pool, EnginePool):
        if count:
            return [
                Finding(
                    pod.where,
                    field,
                    f"is {count} but pool {plan.role.pool} runs no engine",
                    "remove the accelerator request",
                )
            ]
        return []
    if pool.gpus_per_node is None and settings.gpus_per_node is None and not count:
        return []  # a CPU pool
    layout = pool.parallelism()
    devices, why = layout.devices_per_pod, layout.describe()
    per_chip = DEVICES_PER_TPU_CHIP.get(str((pod.spec.get("nodeSelector") or {}).get(TPU_LABEL)), 1)
    per_unit = per_chip if name == "google.com/tpu" else 1
    if count is not None and count * per_unit == devices:
        return []
    got = (
        "no accelerator"
        if not name
        else f"{asked.get(name)!r}" + (f" chips ({per_chip} devices each)" if per_unit > 1 else "")
    )
    wanted = devices // per_unit if devices % per_unit == 0 else devices
    return [
        Finding(
            pod.where,
            field,
            f"requests {got} but pool {plan.role.pool} needs {devices} devices per pod ({why})",
            f"request {wanted}, or change pools.{plan.role.pool}'s parallelism",
        )
    ]


def _integer(value: object) -> int | None:
    text = str(value)
    return int(text) if text.isdigit() else None


def _probe_ports(pod: ManifestPod, settings: Settings, pool: Pool, plan: Plan) -> list[Finding]:
    """Each probe asks the launcher's probe server, on LLMD_PROBE_PORT."""
    ports = {p.get("name"): p.get("containerPort") for p in pod.container.get("ports") or []}
    findings = []
    for probe in PROBES:
        spec = pod.container.get(probe) or {}
        handler = next((k for k in ("httpGet", "tcpSocket", "grpc") if k in spec), None)
        if handler is None:
            continue  # an exec probe (`llm-d-launcher probe`) reads LLMD_PROBE_PORT itself
        port = spec[handler].get("port")
        number = ports.get(port) if isinstance(port, str) else port
        field = f"{probe}.{handler}.port"
        if number is None:
            findings.append(
                Finding(
                    pod.where,
                    field,
                    f"names port {port!r}, which the container does not declare",
                    f"declare it (containerPort {settings.probe_port}) under ports",
                )
            )
        elif number != settings.probe_port:
            findings.append(
                Finding(
                    pod.where,
                    field,
                    f"is {number} but the launcher serves its probes on LLMD_PROBE_PORT "
                    f"{settings.probe_port}",
                    f"probe port {settings.probe_port}, or set LLMD_PROBE_PORT",
                )
            )
    return findings


def _startup_budget(pod: ManifestPod, settings: Settings, pool: Pool, plan: Plan) -> list[Finding]:
    """The launcher ends a start-up that overran LLMD_STARTUP_SECONDS itself, naming the phase; the
    kubelet's startup probe ("probe failed") must not win that race: its budget holds the deadline,
    time parked in an LWS group (LLMD_PARK_SECONDS, not counted by the deadline) and two periods for
    the launcher's stop and termination message."""
    probe = pod.container.get("startupProbe")
    if not probe or not settings.startup_seconds:
        return []
    period = probe.get("periodSeconds", PROBE_PERIOD)
    initial = probe.get("initialDelaySeconds", 0)
    budget = initial + period * probe.get("failureThreshold", PROBE_FAILURES)
    in_group = pod.index is not None
    park = settings.park_seconds if in_group and math.isfinite(settings.park_seconds) else 0
    needed = settings.startup_seconds + park + 2 * period
    if budget >= needed:
        return []
    parked = f" + LLMD_PARK_SECONDS {park:g}" if park else ""
    threshold = math.ceil((needed - initial) / period)
    return [
        Finding(
            pod.where,
            "startupProbe",
            f"gives up after {budget:g} s but the launcher's own deadline needs {needed:g} s "
            f"(LLMD_STARTUP_SECONDS {settings.startup_seconds:g}{parked} + two periods of {period} s)",
            f"raise failureThreshold to {threshold}, or lower LLMD_STARTUP_SECONDS to "
            f"{budget - park - 2 * period:g}",
        )
    ]


def _grace(pod: ManifestPod, settings: Settings, pool: Pool, plan: Plan) -> list[Finding]:
    """LLMD_GRACE_SECONDS is what the launcher drains within: the grace period less any preStop."""
    period = pod.spec.get("terminationGracePeriodSeconds", GRACE)
    pre_stop = (pod.container.get("lifecycle") or {}).get("preStop") or {}
    sleep = (pre_stop.get("sleep") or {}).get("seconds", 0)
    hook = bool(pre_stop) and not sleep  # an exec or HTTP hook: how long it takes is not written down
    grace = settings.grace_seconds
    if (grace < period) if hook else (grace == period - sleep):
        return []
    less = " less its preStop hook" if hook else f" less the preStop sleep of {sleep} s" if sleep else ""
    return [
        Finding(
            pod.where,
            "terminationGracePeriodSeconds",
            f"is {period} but LLMD_GRACE_SECONDS is {grace}: the launcher drains within the grace "
            f"period{less}",
            f"set LLMD_GRACE_SECONDS below {period}"
            if hook
            else f"set LLMD_GRACE_SECONDS to {period - sleep}",
        )
    ]


def _memory(pod: ManifestPod, settings: Settings, pool: Pool, plan: Plan) -> list[Finding]:
    """Requests and limits hold what the plan allocates and pins (roles/memory.py), /dev/shm its size."""
    need = pod_memory(pool, plan.role.pool, settings.extra_args)
    if not need.total:
        return []
    resources = pod.container.get("resources") or {}
    findings = []
    for kind in ("requests", "limits"):
        value = (resources.get(kind) or {}).get("memory")
        if value is None and kind == "limits":
            continue  # no limit: the node's memory, which preflight checks at run time
        size = quantity(value) if value is not None else 0
        if size is None or size < need.total:
            got = "no memory request" if value is None else f"memory {value}"
            findings.append(
                Finding(
                    pod.where,
                    f"resources.{kind}.memory",
                    f"{got} is less than pool {plan.role.pool}'s "
                    f"{_gib(need.total)} (engine {_gib(need.overhead)}, segments {_gib(need.segments)}, "
                    f"/dev/shm {_gib(need.shm)}; roles/memory.py)",
                    f"{kind[:-1]} at least {_gib(need.total)}",
                )
            )
    if need.shm:
        shm = _shm_size(pod)
        if shm is None or shm < need.shm:
            findings.append(
                Finding(
                    pod.where,
                    "volumes (/dev/shm)",
                    f"/dev/shm holds {'the default 64 MiB' if shm is None else _gib(shm)}"
                    f" but pool {plan.role.pool}'s host.shm is {_gib(need.shm)}",
                    f"mount an emptyDir (medium: Memory, sizeLimit: {_gib(need.shm)}) at /dev/shm",
                )
            )
    return findings


def _shm_size(pod: ManifestPod) -> int | None:
    mount = next(
        (m for m in pod.container.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"), None
    )
    if mount is None:
        return None
    volume: Mapping[str, Any] = next(
        (v for v in pod.spec.get("volumes") or [] if v.get("name") == mount.get("name")), {}
    )
    empty = volume.get("emptyDir")
    if not isinstance(empty, dict):
        return None
    limit = empty.get("sizeLimit")
    return quantity(limit) if limit is not None else 1 << 62  # no sizeLimit: the pod's memory


def _gib(size: int) -> str:
    return f"{size / (1 << 30):g}Gi"


def _service_links(pod: ManifestPod, settings: Settings, pool: Pool, plan: Plan) -> list[Finding]:
    """Service links put every Service of the namespace in the env; one named like an engine (vllm)
    sets a port variable the engine refuses (roles/engines/service_links.py)."""
    if pod.spec.get("enableServiceLinks") is False:
        return []
    return [
        Finding(
            pod.where,
            "enableServiceLinks",
            "is not false: every Service of the namespace becomes env, and one named like an engine sets "
            "that engine's port variable to tcp://IP:port, which the engine refuses",
            "set enableServiceLinks: false in the pod spec",
        )
    ]


_QUANTITY = re.compile(
    r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?"
)
_SUFFIX = {
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "Ei": 1 << 60,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


def quantity(value: object) -> int | None:
    """Bytes in a Kubernetes resource quantity (k8s.io/apimachinery resource.Quantity: binary Ki..Ei,
    decimal k..E, an exponent), None when it is none."""
    match = _QUANTITY.fullmatch(str(value).strip())
    if not match:
        return None
    number: float = float(match[1]) * 10 ** int(match[2] or 0) * _SUFFIX.get(match[3] or "", 1)
    return math.ceil(number)


# What each launcher pod is checked for, after its plan is built.
CHECKS = (_accelerators, _probe_ports, _startup_budget, _grace, _memory, _service_links)
