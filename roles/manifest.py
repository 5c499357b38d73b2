"""The launcher pods of a rendered manifest (`kubectl kustomize` output), each with the env the kubelet
and LWS would give it and the recipe it would read: pure, no I/O but parsing the text it is given.
`llm-d-launcher lint` plans and checks them (roles/lint.py); the deploy/ tests read pods through it.

Pod templates are found in Deployments, StatefulSets, DaemonSets, ReplicaSets and Jobs
(`spec.template`), LeaderWorkerSets (`spec.leaderWorkerTemplate`: the leader template, when given, for
worker index 0, else the worker template) and DisaggregatedSets (each role's leaderWorkerTemplate).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from launcher.config.recipe_source import RecipeSource
from launcher.config.settings import DEFAULT_RECIPE
from launcher.contract import lws
from launcher.contract.errors import ConfigError
from launcher.contract.record import record

MAX_MANIFEST_BYTES = 64 << 20  # a rendered guide is a few hundred KiB
TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")
# Example values of what only the cluster knows (documentation addresses, RFC 5737).
POD_IP = "192.0.2.10"
HOST_IP = "192.0.2.1"
NODE_NAME = "node-0"
# A DisaggregatedSet's child LWS is <set>-<slice>-<revision>-<role> (kubernetes-sigs/lws
# DisaggregatedSet docs); the revision is a hash only the controller knows: this is an example.
REVISION = "5d8f7c9b"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


@record
class ManifestPod:
    """One pod of a workload: one launcher container of one pod template, at one LWS worker index."""

    kind: str
    name: str  # the workload's metadata.name
    namespace: str
    template: str  # where its template is, e.g. spec.leaderWorkerTemplate.workerTemplate
    index: int | None  # LWS worker index; None outside an LWS
    spec: Mapping[str, Any]  # the pod spec
    container: Mapping[str, Any]
    env: Mapping[str, str]  # what the kubelet and LWS give the container (Secrets left out)

    @property
    def where(self) -> str:
        """How a finding names it: the object, the pod template, the container (the workers of one
        template share their findings)."""
        return f"{self.kind}/{self.name} {self.template} container {self.container.get('name')}"


def parse_manifest(text: str, label: str) -> list[dict[str, Any]]:
    """The objects of a multi-document YAML stream; anything else is bad input (exit 2, one line)."""
    import yaml

    if len(text) > MAX_MANIFEST_BYTES:
        raise ConfigError.one(label, f"is over {MAX_MANIFEST_BYTES} bytes", "lint one rendering at a time")
    try:
        docs = list(yaml.load_all(text, Loader=yaml.CSafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError.one(
            label, f"is not YAML{where} ({problem})", "give the rendered manifest"
        ) from None
    objects = [d for d in docs if d is not None]
    if not all(isinstance(d, dict) and isinstance(d.get("kind"), str) for d in objects):
        raise ConfigError.one(
            label, "holds a document that is not a Kubernetes object", "give the rendered manifest"
        )
    return objects


def launcher_pods(objects: Sequence[Mapping[str, Any]]) -> list[ManifestPod]:
    """Every pod of every workload whose container runs the launcher (an LLMD_* variable, or the
    command llm-d-launcher)."""
    pods = []
    for obj in objects:
        name, namespace = str((obj.get("metadata") or {}).get("name")), namespace_of(obj)
        for template in _templates(obj):
            spec = template.pod.get("spec") or {}
            launchers = [c for c in spec.get("containers") or [] if _runs_launcher(c)]
            for index in template.indices:
                for container in launchers:
                    env = container_env(obj, template.pod, container, index, template.size, template.lws)
                    pods.append(
                        ManifestPod(obj["kind"], name, namespace, template.where, index, spec, container, env)
                    )
    return pods


def worker_templates(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod template of each pod of a workload's group, by LWS worker index (a DisaggregatedSet:
    role after role); the one template of any other workload."""
    return [template.pod for template in _templates(obj) for _ in template.indices]


@record
class _Template:
    pod: Mapping[str, Any]  # the pod template (metadata, spec)
    where: str
    indices: tuple[int | None, ...]  # the LWS worker indices it makes; (None,) outside an LWS
    size: int | None = None
    lws: str | None = None  # the LeaderWorkerSet's name


def _templates(obj: Mapping[str, Any]) -> Iterator[_Template]:
    spec = obj.get("spec") or {}
    if not isinstance(obj.get("metadata"), dict):
        return
    if obj["kind"] in TEMPLATE_KINDS and isinstance(spec.get("template"), dict):
        yield _Template(spec["template"], "spec.template", (None,))
    elif obj["kind"] == "LeaderWorkerSet":
        yield from _lws_templates(spec, "spec.leaderWorkerTemplate", str(obj["metadata"].get("name")))
    elif obj["kind"] == "DisaggregatedSet":
        for role in spec.get("roles") or []:
            child = f"{obj['metadata'].get('name')}-0-{REVISION}-{role.get('name')}"
            where = f"spec.roles[{role.get('name')}].spec.leaderWorkerTemplate"
            yield from _lws_templates(role.get("spec") or {}, where, child)


def _lws_templates(spec: Mapping[str, Any], where: str, lws_name: str) -> Iterator[_Template]:
    """The leader template (when given) makes worker 0, the worker template every other index."""
    lwt = spec.get("leaderWorkerTemplate") or {}
    size = lwt.get("size", 1)
    size = size if isinstance(size, int) and 0 < size <= 1024 else 1
    workers = tuple(range(1, size))
    if isinstance(lwt.get("leaderTemplate"), dict):
        yield _Template(lwt["leaderTemplate"], f"{where}.leaderTemplate", (0,), size, lws_name)
    else:
        workers = (0, *workers)
    if workers and isinstance(lwt.get("workerTemplate"), dict):
        yield _Template(lwt["workerTemplate"], f"{where}.workerTemplate", workers, size, lws_name)


def _runs_launcher(container: Mapping[str, Any]) -> bool:
    command = container.get("command") or []
    names = [e.get("name", "") for e in container.get("env") or [] if isinstance(e, dict)]
    return any(str(n).startswith("LLMD_") for n in names) or (
        bool(command) and posixpath.basename(str(command[0])) == "llm-d-launcher"
    )


def container_env(
    obj: Mapping[str, Any],
    template: Mapping[str, Any],
    container: Mapping[str, Any],
    index: int | None = None,
    size: int | None = None,
    lws_name: str | None = None,
) -> dict[str, str]:
    """The env the container sees: LWS's variables (at worker `index` of a group of `size`; TPU
    pods also get LWS's TPU variables), literal values and downward-API fields with example values.
    Secrets and ConfigMap keys are left out: no plan needs their values."""
    namespace = namespace_of(obj)
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    env: dict[str, str] = {}
    pod_name = str((obj.get("metadata") or {}).get("name", "pod"))
    if lws_name is not None and index is not None and size is not None:
        pod_name = _lws_pod(lws_name, index)
        labels |= {LWS_NAME_LABEL: lws_name, LWS_INDEX_LABEL: str(index)}
        # What LWS injects, the leader as <lws>-<group>.<service>.<namespace>
        # (https://lws.sigs.k8s.io/docs/reference/labels-annotations-and-environment-variables/)
        env |= {
            lws.LEADER_ADDRESS: f"{lws_name}-0.{lws_name}.{namespace}",
            lws.GROUP_SIZE: str(size),
            lws.WORKER_INDEX: str(index),
        }
        if _requests(container, "google.com/tpu"):  # kubernetes-sigs/lws pkg/utils/accelerators/tpu.go
            env |= {
                "TPU_WORKER_ID": str(index),
                "TPU_WORKER_HOSTNAMES": ",".join(f"{_lws_pod(lws_name, i)}.{lws_name}" for i in range(size)),
            }
    fields = {
        "status.podIP": POD_IP,
        "status.hostIP": HOST_IP,
        "metadata.name": pod_name,
        "metadata.namespace": namespace,
        "spec.nodeName": NODE_NAME,
        "spec.serviceAccountName": str((template.get("spec") or {}).get("serviceAccountName", "default")),
    }
    fields |= {f"metadata.labels['{k}']": str(v) for k, v in labels.items()}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    fields |= {f"metadata.annotations['{k}']": str(v) for k, v in annotations.items()}
    for item in container.get("env") or []:
        if not isinstance(item, dict) or "name" not in item:
            continue
        if "value" in item:
            env[str(item["name"])] = str(item["value"])
        elif (path := ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")) in fields:
            env[str(item["name"])] = fields[path]
    return env


def _lws_pod(lws_name: str, index: int) -> str:
    """The name of worker `index` of an LWS's first group: <lws>-0, then <lws>-0-<index>."""
    return f"{lws_name}-0" if index == 0 else f"{lws_name}-0-{index}"


def namespace_of(obj: Mapping[str, Any]) -> str:
    """An object's namespace; one that names none lands in the default namespace of `kubectl apply`."""
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def _requests(container: Mapping[str, Any], resource: str) -> bool:
    resources = container.get("resources") or {}
    return any(resource in (resources.get(k) or {}) for k in ("limits", "requests"))


@record
class MountedRecipe:
    """Where a pod's LLMD_RECIPE_FILE comes from: a ConfigMap key, or nothing this stream holds."""

    config_map: str | None  # the ConfigMap volume mounted at the file's directory
    key: str | None  # the key that becomes the file
    problem: str | None  # why the file would not be there


def mounted_recipe(pod: ManifestPod) -> MountedRecipe | None:
    """The ConfigMap and key behind LLMD_RECIPE_FILE; None when the pod reads a built-in recipe."""
    path = pod.env.get("LLMD_RECIPE_FILE")
    if path is None:
        return None
    for mount in pod.container.get("volumeMounts") or []:
        mount_path = str(mount.get("mountPath", ""))
        sub_path = mount.get("subPath")
        if sub_path is None and mount_path.rstrip("/") != posixpath.dirname(path):
            continue
        if sub_path is not None and mount_path != path:
            continue
        volume: Mapping[str, Any] = next(
            (v for v in pod.spec.get("volumes") or [] if v.get("name") == mount.get("name")), {}
        )
        config_map = volume.get("configMap")
        if not isinstance(config_map, dict):
            return MountedRecipe(None, None, None)  # another volume type: nothing to check here
        file = str(sub_path) if sub_path is not None else posixpath.basename(path)
        items = {str(i.get("path")): str(i.get("key")) for i in config_map.get("items") or []}
        if items and file not in items:
            return MountedRecipe(config_map.get("name"), None, f"the ConfigMap volume's items give no {file}")
        return MountedRecipe(str(config_map.get("name")), items.get(file, file), None)
    return MountedRecipe(None, None, f"no volume is mounted at {posixpath.dirname(path)}")


def recipe_source(pod: ManifestPod) -> RecipeSource:
    """The built-in recipe the pod names (LLMD_RECIPE, else the default)."""
    return RecipeSource(pod.env.get("LLMD_RECIPE", DEFAULT_RECIPE), None)
